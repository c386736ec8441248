#!/usr/bin/env bash
# vit_train in fp16 with dynamic loss scaling, end to end: LowLevelZero (stage 2) on 2 ranks
# from a loss scale of 2^24, where the fp16 gradients overflow: the first steps are skipped,
# each backing the scale off (the log says which step and the new scale), then the scale
# is small enough and training goes on to finite losses and a checkpoint; the optimizer's
# checkpoint holds the scale, and --resume from it goes on with that scale, not 2^24.
# Usage: fp16_loss_scaling.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
run=("$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/low_level_zero.toml"
     --no-progress --set model.image_size=32 --set data.limit=48 --set train.batch_size=4 --set train.log_every=1
     --set plugin.precision=fp16 --set plugin.initial_scale=16777216.0 --set plugin.hysteresis=1
     --set checkpoint.every_steps=6 --set checkpoint.keep_last=3)
"${run[@]}" --set train.epochs=3 > fp16.log 2>&1 || { cat fp16.log; exit 1; }
grep -q "done: best validation accuracy" fp16.log || { cat fp16.log; echo "FAIL: no end"; exit 1; }
skipped=$(grep -c "non-finite gradient, step skipped; loss scale now" fp16.log || true)
grep "step skipped" fp16.log | head -3
[ "$skipped" -ge 2 ] || { cat fp16.log; echo "FAIL: $skipped skipped steps (the 2^24 scale must overflow fp16)"; exit 1; }
last=$(grep "step skipped" fp16.log | tail -1 | sed -E 's/.*loss scale now ([0-9.e+]+).*/\1/')
awk -v s="$last" 'BEGIN { exit !(s < 16777216 && s >= 1) }' || { echo "FAIL: scale $last"; exit 1; }
python3 - runs/beans_zero2/metrics.jsonl <<'PY'
import json, math, sys
losses = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"type":"step"' in l and '"loss"' in l]
assert len(losses) >= 10, losses
assert all(math.isfinite(x) for x in losses[-6:]), losses
print("steps logged:", len(losses), "last losses:", [round(x, 4) for x in losses[-3:]])
PY
# The scale is part of the optimizer's checkpoint: resumed at step 12, the run goes on from
# the backed-off scale (no step skipped), where a fresh 2^24 would overflow again.
"${run[@]}" --set train.epochs=3 --set run.name=resumed --resume runs/beans_zero2/checkpoints/step-00000012 > resumed.log 2>&1 \
  || { cat resumed.log; exit 1; }
grep -q "done: best validation accuracy" resumed.log || { cat resumed.log; echo "FAIL: resumed run"; exit 1; }
! grep -q "step skipped" resumed.log || { grep "step skipped" resumed.log; echo "FAIL: the resumed run lost its loss scale"; exit 1; }
echo "PASS: $skipped steps skipped, the scale backed off to $last, then finite losses"
