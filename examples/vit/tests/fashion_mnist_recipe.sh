#!/usr/bin/env bash
# The large-batch recipe's pieces on Fashion-MNIST, small: the large-batch config (LAMB,
# accumulation under no_sync, clipping, linear warmup) with Mixup, betas (0.9, 0.99), bias
# correction and biases and norms excluded from the trust ratio (logged as Lamb's options,
# per parameter group) on 2 ranks learns (the
# test accuracy after 3 epochs of 4,096 images is over twice chance: 0.31 measured), LARS
# runs, --eval-only
# scores the checkpoint on the whole test split of the data its record names (no config given), and a wrong dataset or
# optimizer name, or one beta, is an error naming the key.
# Usage: fashion_mnist_recipe.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
train() { "$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --no-progress \
  --config "$src/examples/vit/configs/fashion_mnist_large_batch.toml" --set data.limit=4096 --set train.epochs=3 \
  --set train.batch_size=32 --set train.gradient_accumulation=4 "$@"; }
train --set run.name=lamb --set train.mixup_alpha=0.2 --set train.lr=2e-2 --set 'train.betas=[0.9, 0.99]' \
  --set train.bias_correction=true --set train.exclude_from_layer_adaptation=true > lamb.log 2>&1 ||
  { cat lamb.log; exit 1; }
grep -q "done: best validation accuracy" lamb.log
grep "optimizer Lamb:" lamb.log | grep -q "beta2 0.99,.*bias_correction 1" || { grep optimizer lamb.log; echo "FAIL: betas / bias_correction did not reach Lamb"; exit 1; }
grep "optimizer Lamb:" lamb.log | grep -q "group 1 ([0-9]* tensors): adam 1, weight_decay 0" ||
  { grep optimizer lamb.log; echo "FAIL: biases and norms were not excluded from the trust ratio"; exit 1; }
acc=$(grep '"type":"epoch"' runs/lamb/metrics.jsonl | tail -1 | sed -E 's/.*"val_accuracy":([0-9.eE+-]+).*/\1/')
samples=$(grep '"type":"epoch"' runs/lamb/metrics.jsonl | tail -1 | sed -E 's/.*"val_samples":([0-9]+).*/\1/')
echo "LAMB, global batch 256 (2 x 32 x 4), Mixup 0.2: test accuracy $acc over $samples images"
[ "$samples" = 4096 ] || { echo "FAIL: the 4096 test images were not each counted once"; exit 1; }
awk -v a="$acc" 'BEGIN { exit !(a > 0.2) }' || { echo "FAIL: LAMB did not learn (accuracy $acc, chance 0.1)"; exit 1; }
train --set run.name=lars --set train.optimizer=lars --set train.lr=0.5 --set train.lars_eeta=0.01 > lars.log 2>&1 ||
  { cat lars.log; exit 1; }
grep "epoch 3/3:" lars.log
# No config and no split: the checkpoint's data record says Fashion-MNIST and its test split.
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" \
  --eval-only --checkpoint runs/lamb/checkpoints > eval.txt 2>&1 || { cat eval.txt; exit 1; }
grep -q "test: 10000 images, accuracy" eval.txt || { cat eval.txt; echo "FAIL: eval-only"; exit 1; }
grep -q "Ankle boot" eval.txt
# vit_predict takes the run's checkpoints too: any picture, as grayscale at 28 x 28.
img=$(ls "$src"/../shared/data/beans/validation/healthy/*.jpg | head -1)
"$build/examples/vit/vit_predict" --checkpoint runs/lamb/checkpoints "$img" > predict.txt 2>&1 || { cat predict.txt; exit 1; }
grep -Eq "(T-shirt/top|Trouser|Pullover|Dress|Coat|Sandal|Shirt|Sneaker|Bag|Ankle boot) [0-9.]+" predict.txt ||
  { cat predict.txt; echo "FAIL: vit_predict on a Fashion-MNIST checkpoint"; exit 1; }
for bad in "data.dataset=mnist" "train.optimizer=sgdx" "train.lr_scheduler=step"; do
  if train --set "$bad" > bad.log 2>&1; then echo "FAIL: $bad was accepted"; exit 1; fi
  grep -q "${bad%%=*} = '${bad#*=}'" bad.log || { cat bad.log; echo "FAIL: the error does not name $bad"; exit 1; }
  echo "ok: $bad refused: $(grep -o "${bad%%=*} = '[^\"]*" bad.log | head -1)"
done
if train --set 'train.betas=[0.9]' > bad.log 2>&1; then echo "FAIL: one beta was accepted"; exit 1; fi
grep -q "train.betas must be two numbers" bad.log || { cat bad.log; echo "FAIL: the error does not name train.betas"; exit 1; }
echo PASS
