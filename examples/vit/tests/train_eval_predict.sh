#!/usr/bin/env bash
# vit_train under DDP on 2 ranks (small setting), then --eval-only and vit_predict on its
# checkpoint. Usage: train_eval_predict.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
# A wrong config key is found before MPI starts: the message and exit 1, not SIGABRT.
set +e
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/torch_ddp.toml" \
  --set train.epoch=3 > bad.log 2>&1
code=$?
set -e
cat bad.log
[ "$code" -eq 1 ] || { echo "FAIL: a bad key exited $code, not 1"; exit 1; }
grep -q "fatal: " bad.log && grep -q "unknown key 'train.epoch'" bad.log
! grep -q "terminate called" bad.log
# Train and validation splits with different classes: refused, naming both.
mkdir -p mism/train mism/validation
for c in angular_leaf_spot bean_rust healthy; do ln -s "$src/../shared/data/beans/train/$c" mism/train/$c; done
for c in angular_leaf_spot healthy; do ln -s "$src/../shared/data/beans/validation/$c" mism/validation/$c; done
set +e
"$mpiexec" -np 1 "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/torch_ddp.toml" \
  --set data.root=mism --set data.limit=12 > mism.log 2>&1
code=$?
set -e
[ "$code" -ne 0 ] && grep -q "differ from those of the 'train' split" mism.log || { cat mism.log; echo "FAIL: class mismatch"; exit 1; }
small=(--set model.image_size=32 --set train.epochs=2 --set data.limit=48 --set train.batch_size=4 --set train.log_every=2)
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/torch_ddp.toml" \
  --no-progress "${small[@]}" --set checkpoint.every_steps=4 --set run.output_dir=runs 2>&1 | tee train.log
grep -q "done: best validation accuracy" train.log
test -s runs/vit_beans/metrics.jsonl
grep -q '"type":"epoch"' runs/vit_beans/metrics.jsonl
grep -q '"type":"run","world_size":2' runs/vit_beans/metrics.jsonl
grep -q 'image_size = 32' runs/vit_beans/config.toml   # the effective config, --set applied
if command -v gnuplot >/dev/null; then test -s runs/vit_beans/curves.png; fi
# TensorBoard events beside metrics.jsonl, checked by an independent reader (framing, every
# CRC, the values).
python3 "$src/tools/read_tensorboard.py" runs/vit_beans runs/vit_beans/metrics.jsonl | tee tb.txt
grep -q PASS tb.txt
ls runs/vit_beans/checkpoints
[ "$(ls runs/vit_beans/checkpoints | wc -l)" -le 2 ]   # keep_last = 2
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --eval-only --checkpoint runs/vit_beans/checkpoints \
  --split validation "${small[@]}" | tee eval.txt
grep -q "validation: 105 images, accuracy" eval.txt
grep -q "confusion matrix" eval.txt
img=$(ls "$src"/../shared/data/beans/validation/healthy/*.jpg | head -1)
"$build/examples/vit/vit_predict" --checkpoint runs/vit_beans/checkpoints "$img" | tee predict.txt
grep -Eq "(angular_leaf_spot|bean_rust|healthy) [0-9.]+" predict.txt
last=$(ls -d runs/vit_beans/checkpoints/step-* | tail -1)
"$build/tools/checkpoint_inspect" "$last/model" | tail -1
# The reference reader (docs/checkpoint_format.md; Debian's python3 with python3-protobuf and
# python3-xxhash) reads the step folder and checks every checksum; a flipped byte is found.
/usr/bin/python3 "$src/tools/read_checkpoint.py" "$last" | tee reader.txt
grep -q PASS reader.txt
shard=$(ls "$last"/model/*.shard | head -1)
cp -r "$last" flipped && f="flipped/model/$(basename "$shard")"
/usr/bin/python3 -c "import sys; p=sys.argv[1]; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(b)" "$f"
! /usr/bin/python3 "$src/tools/read_checkpoint.py" flipped > flipped.txt
grep -q "FAIL" flipped.txt && cat flipped.txt
# Export to Hugging Face layout and predict from the exported folder: same answer.
"$build/tools/export_hf" runs/vit_beans/checkpoints hf   # a run's checkpoints folder: its newest step
test -s hf/config.json && test -s hf/model.safetensors && test -s hf/preprocessor_config.json
"$build/examples/vit/vit_predict" --model hf "$img" | tee predict_hf.txt
diff predict.txt predict_hf.txt
# One process of 2 threads, unsplit and with booster.split_batch (each thread its share of
# every batch): the same losses (summed in another order).
for mode in false true; do
  OMP_NUM_THREADS=2 "$mpiexec" -np 1 -x OMP_NUM_THREADS "$build/examples/vit/vit_train" \
    --config "$src/examples/vit/configs/torch_ddp.toml" --no-progress "${small[@]}" --set train.epochs=1 \
    --set booster.split_batch=$mode --set run.output_dir=split_$mode 2>&1 | tee split_$mode.log
  grep -q "done: best validation accuracy" split_$mode.log
done
grep -q "split_batch: each of this rank's 2 threads" split_true.log
! grep -q "split_batch: each" split_false.log
/usr/bin/python3 - split_false/vit_beans/metrics.jsonl split_true/vit_beans/metrics.jsonl <<'PY'
import json, sys
def losses(p): return [r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) > 0, (a, b)
for x, y in zip(a, b): assert abs(x - y) <= 1e-4 * abs(x), (x, y)
print("split_batch losses match:", b)
PY
# The PyTorch peer mirrors the run (its config.toml) and compares, when torch is installed.
if /usr/bin/python3 -c "import torch, PIL" 2>/dev/null; then
  /usr/bin/python3 "$src/bench/torch_beans_train.py" --shared "$src/../shared" --run runs/vit_beans | tee peer.txt
  grep -q '"global_batch": 8' peer.txt && grep -q '"event": "summary"' peer.txt
else
  echo "peer comparison skipped: no python3-torch / python3-pil"
fi
echo PASS
