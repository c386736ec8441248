#!/usr/bin/env bash
# vit_train under HybridParallelPlugin on 2 ranks (an example config at a small setting:
# hybrid_parallel.toml, tp 2; pipeline.toml, pp 2 through execute_pipeline; under GalvatronPlugin,
# galvatron.toml, a layerwise plan whose global batch sets the per-replica batch; tp_2d.toml and
# tp_3d.toml, 2D and 3D grids on 4 and 8 ranks, with a split size whose last batch does not
# divide into the grid's row blocks): trains,
# evaluates every validation image once (not once per tensor-parallel rank or pipeline
# stage), and rank 0 writes metrics with the real loss (a pipeline's last stage has it).
# Usage: hybrid_parallel_train.sh MPIEXEC BUILD_DIR SOURCE_DIR [CONFIG RUN_NAME PLUGIN RANKS LIMIT]
set -euo pipefail
mpiexec=$1 build=$2 src=$3 config=${4:-hybrid_parallel.toml} run=${5:-beans_tp2} plugin=${6:-hybrid_parallel}
ranks=${7:-2} limit=${8:-32}
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
if grep -q '^\[parallel\]' "$src/examples/vit/configs/$config"; then
  # Legacy Colossal-AI's [parallel] table beside a [plugin] table: refused before MPI starts.
  set +e
  "$mpiexec" -np 1 "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/$config" \
    --set plugin.name=torch_ddp > both.log 2>&1
  code=$?
  set -e
  [ "$code" -eq 1 ] && grep -q "\[parallel\] (legacy Colossal-AI's table) and \[plugin\] both say how to parallelize" both.log ||
    { cat both.log; echo "FAIL: [parallel] beside [plugin] exited $code"; exit 1; }
fi
"$mpiexec" -np "$ranks" --oversubscribe "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/$config" \
  --no-progress --set model.image_size=32 --set train.epochs=1 --set data.limit="$limit" --set train.batch_size=8 \
  --set train.log_every=1 --set run.output_dir=runs 2>&1 | tee train.log
grep -q "plugin $plugin" train.log
if [ "$plugin" = galvatron ]; then grep -q "global batch 16 from the galvatron plan: 8 images per data-parallel replica" train.log; fi
grep -q "done: best validation accuracy" train.log
m=runs/$run/metrics.jsonl
grep -q '"type":"step"' "$m"
python3 - "$m" train.log <<'PY'
import json, re, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
ev = [r for r in recs if r.get("type") == "epoch"]
steps = [r["loss"] for r in recs if r.get("type") == "step"]
assert steps and all(0.1 < l < 10 for l in steps), f"step losses are not real cross-entropies: {steps}"
assert 0.1 < ev[-1]["train_loss"] < 10 if ev else True
assert ev, "no epoch record"
want = int(re.search(r"/ (\d+) validation images", open(sys.argv[2]).read()).group(1))
print("epoch record:", ev[-1], "validation split:", want)
assert ev[-1]["val_samples"] == want, f"validation counted {ev[-1]['val_samples']} images, the split has {want}"
PY
echo PASS
