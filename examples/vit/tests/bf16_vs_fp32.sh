#!/usr/bin/env bash
# One epoch of ViT-Ti on beans in bf16 ends within 0.05 of the fp32 run's training loss
# from the same seed. Usage: bf16_vs_fp32.sh MPIEXEC BUILD_DIR SOURCE_DIR [small|full]
set -euo pipefail
mpiexec=$1 build=$2 src=$3 size=${4:-small}
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
args=(--set train.epochs=1 --set checkpoint.every_steps=0 --no-progress)
[ "$size" = small ] && args+=(--set model.image_size=64 --set data.limit=192 --set train.batch_size=8)
for p in fp32 bf16; do
  "$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/torch_ddp.toml" \
    "${args[@]}" --set booster.mixed_precision=$p --set run.name=$p > $p.log 2>&1 || { cat $p.log; exit 1; }
done
loss() { grep '"type":"epoch"' runs/$1/metrics.jsonl | tail -1 | sed -E 's/.*"train_loss":([0-9.eE+-]+).*/\1/'; }
a=$(loss fp32) b=$(loss bf16)
echo "train loss after one epoch: fp32 $a, bf16 $b"
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "difference %.4f (bound 0.05)\n", d; exit !(d <= 0.05) }'
