#!/usr/bin/env bash
# vit_train on 2 ranks (CONFIG, e.g. pipeline.toml: pp 2), twice on the same small setting
# with dropout on: as configured, then with model.lazy_init (each rank materializes only its
# stage's layers at boost) and model.gradient_checkpointing (plus EXTRA --set arguments):
# every step's loss must be the same (lazy initialization gives the eager weights; the
# recomputation draws the same dropout masks).
# Usage: lazy_checkpointing_train.sh MPIEXEC BUILD_DIR SOURCE_DIR CONFIG RUN_NAME [--set k=v ...]
set -euo pipefail
mpiexec=$1 build=$2 src=$3 config=$4 run=$5
shift 5
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
common=(--config "$src/examples/vit/configs/$config" --no-progress --set model.image_size=32 --set train.epochs=1
        --set data.limit=32 --set train.batch_size=8 --set train.log_every=1 --set model.hidden_dropout_prob=0.1)
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" "${common[@]}" --set run.output_dir=plain \
  2>&1 | tee plain.log
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" "${common[@]}" --set run.output_dir=lazy \
  --set model.lazy_init=true --set model.gradient_checkpointing=true "$@" 2>&1 | tee lazy.log
python3 - "plain/$run/metrics.jsonl" "lazy/$run/metrics.jsonl" <<'PY'
import json, sys
def losses(p):
    return [r["loss"] for r in map(json.loads, open(p)) if r.get("type") == "step"]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
print("plain:", a, "\nlazy + checkpointed:", b)
assert a and len(a) == len(b), f"{len(a)} and {len(b)} steps"
for s, (x, y) in enumerate(zip(a, b)):
    assert abs(x - y) <= 1e-5 * abs(x), f"step {s}: {x} vs {y}"
PY
echo PASS
