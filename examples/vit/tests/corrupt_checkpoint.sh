#!/usr/bin/env bash
# Every file of a run checkpoint is verified: one flipped byte in any of them (model and
# optimizer shards and indexes, the scheduler, the progress, config.json, the processor's
# config), sharded or single-file, makes --resume fail with an error naming that file, and
# a truncated shard is refused naming the file and the tensor. The untouched checkpoint
# resumes.
# Usage: corrupt_checkpoint.sh BUILD_DIR
set -uo pipefail
build=$1
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
train() {
  "$build/examples/vit/vit_train" --no-progress --set model.image_size=32 --set train.epochs=1 --set data.limit=16 \
    --set train.batch_size=4 --set run.output_dir=runs --set checkpoint.every_steps=2 "$@"
}
# Flips the byte in the middle of file $1 (a copy of the folder holds it).
flip() { python3 - "$1" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x5A
open(p, "wb").write(b)
PY
}
for shard in true false; do
  train --set run.name="r_$shard" --set checkpoint.shard=$shard > "train_$shard.log" 2>&1 ||
    { cat "train_$shard.log"; echo "FAIL: training"; exit 1; }
  # 4 steps, saved every 2: step 2, then step 4 once (the run's end saves it, not twice).
  [ "$(grep -c "checkpoint saved: .*step-00000004" "train_$shard.log")" = 1 ] ||
    { cat "train_$shard.log"; echo "FAIL: the last step was not saved exactly once"; exit 1; }
  step=$(ls -d runs/r_$shard/checkpoints/step-* | head -1)
  train --set run.name="ok_$shard" --set checkpoint.shard=$shard --resume "$step" > "ok_$shard.log" 2>&1 ||
    { cat "ok_$shard.log"; echo "FAIL: the untouched checkpoint did not resume"; exit 1; }
  n=0
  for f in $(cd "$step" && find . -type f | sed 's|^\./||' | sort); do
    rm -rf bad && cp -r "$step" bad
    flip "bad/$f"
    if train --set run.name="bad_$shard" --set checkpoint.shard=$shard --resume bad > bad.log 2>&1; then
      cat bad.log; echo "FAIL: a flipped byte in $f (shard=$shard) was not noticed"; exit 1
    fi
    grep -q "$(basename "$f")" bad.log || { cat bad.log; echo "FAIL: the error does not name $f"; exit 1; }
    echo "ok: flipped $f (shard=$shard): $(grep -o "[^]]*$(basename "$f")[^\"]*" bad.log | head -1 | cut -c1-160)"
    n=$((n + 1))
  done
  [ $n -ge 5 ] || { echo "FAIL: only $n files in $step"; exit 1; }
done
# A shard cut short: the error names the file and the tensor.
step=$(ls -d runs/r_true/checkpoints/step-* | head -1)
rm -rf bad && cp -r "$step" bad
shard=$(ls bad/model/*.shard | head -1)
truncate -s $(( $(stat -c %s "$shard") / 2 )) "$shard"
train --set run.name=cut --resume bad > cut.log 2>&1 && { echo "FAIL: a truncated shard was loaded"; exit 1; }
grep -q "$(basename "$shard")" cut.log && grep -q "tensor '" cut.log ||
  { cat cut.log; echo "FAIL: the truncation error does not name the file and the tensor"; exit 1; }
echo "ok: truncated $(basename "$shard"): $(grep -o "checkpoint[^\"]*" cut.log | head -1 | cut -c1-200)"
echo PASS
