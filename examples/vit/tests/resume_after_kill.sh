#!/usr/bin/env bash
# A run killed mid-epoch (SIGKILL right after step 7, with checkpoints every 3 steps)
# and resumed must end with the same final weights as an uninterrupted run (fp32, DDP on
# 2 ranks, shuffling and augmentation on: both are seeded per epoch and sample).
# With --set checkpoint.use_async=true after them the killed run writes its checkpoints
# behind training: the kill may land while one is written, and the resume takes the newest
# complete one.
# Usage: resume_after_kill.sh MPIEXEC BUILD_DIR [--set KEY=VALUE ...]
set -uo pipefail
mpiexec=$1 build=$2
shift 2
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
cat > run.toml <<'T'
[plugin]
name = "torch_ddp"
[model]
image_size = 32
[train]
epochs = 2
batch_size = 4
[data]
limit = 48
[checkpoint]
every_steps = 3
keep_last = 3
T
extra=("$@")
train() { "$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config run.toml --no-progress "${extra[@]}" "$@"; }
train --set run.name=full > full.log 2>&1 || { cat full.log; echo "FAIL: uninterrupted run"; exit 1; }
train --set run.name=killed --set train.kill_after_steps=7 > killed.log 2>&1 && { echo "FAIL: the kill did not happen"; exit 1; }
ls runs/killed/checkpoints
train --set run.name=killed --resume runs/killed/checkpoints > resumed.log 2>&1 || { cat resumed.log; echo "FAIL: resume"; exit 1; }
grep "resumed from" resumed.log || { echo "FAIL: did not resume"; exit 1; }
final() { ls -d runs/$1/checkpoints/step-* | tail -1; }
"$build/tools/checkpoint_compare" "$(final full)/model" "$(final killed)/model" || exit 1
"$build/tools/checkpoint_compare" --kind optimizer "$(final full)/optimizer" "$(final killed)/optimizer" || exit 1
echo PASS
