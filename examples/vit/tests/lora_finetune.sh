#!/usr/bin/env bash
# vit_train with a [lora] table: a small beans ViT trained one epoch and exported (export_hf)
# is the base; LoRA on query and value (PEFT's ViT default) with the classifier in
# modules_to_save fine-tunes it on 2 ranks, writing PEFT's folder (the adapters and
# base_model.model.classifier.*) to runs/<name>/lora/. The run's checkpoint evaluates
# (--eval-only) and predicts (vit_predict) with the adapters merged, as its export_hf folder
# does. Usage: lora_finetune.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
small=(--set model.image_size=32 --set train.epochs=1 --set data.limit=48 --set train.batch_size=4 --set train.log_every=4)
train=("$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config "$src/examples/vit/configs/torch_ddp.toml"
       --no-progress "${small[@]}")
"${train[@]}" --set run.name=base > base.log 2>&1 || { cat base.log; exit 1; }
"$build/tools/export_hf" runs/base/checkpoints base_hf > export.log 2>&1 || { cat export.log; exit 1; }
"${train[@]}" --set model.pretrained=base_hf --set lora.r=8 --set lora.lora_alpha=16 \
  --set 'lora.modules_to_save=["classifier"]' --set run.name=lora > lora.log 2>&1 || { cat lora.log; exit 1; }
grep -E "LoRA: 24 layers adapted|done:" lora.log
grep -q "LoRA: 24 layers adapted (r 8, lora_alpha 16)" lora.log || { cat lora.log; echo "FAIL: no LoRA line"; exit 1; }
grep -q '"target_modules": \[' runs/lora/lora/adapter_config.json
/usr/bin/python3 - runs/lora/lora/adapter_model.safetensors <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
names = [k for k in header if k != "__metadata__"]
lora = [k for k in names if ".lora_A." in k or ".lora_B." in k]
assert len(lora) == 48, len(lora)  # 12 layers x (query, value) x (A, B)
assert "base_model.model.classifier.weight" in names and "base_model.model.classifier.bias" in names, names
assert header["base_model.model.vit.encoder.layer.0.attention.attention.query.lora_A.weight"]["shape"] == [8, 192]
print("PEFT tensors ok:", len(names))
PY
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --eval-only --checkpoint runs/lora/checkpoints \
  --split validation "${small[@]}" > eval.txt 2>&1 || { cat eval.txt; exit 1; }
grep "validation: 105 images, accuracy" eval.txt
img=$(ls "$src"/../shared/data/beans/validation/healthy/*.jpg | head -1)
"$build/examples/vit/vit_predict" --checkpoint runs/lora/checkpoints "$img" > predict.txt 2> predict.err || { cat predict.txt predict.err; exit 1; }
"$build/tools/export_hf" runs/lora/checkpoints merged_hf > export2.log 2>&1 || { cat export2.log; exit 1; }
"$build/examples/vit/vit_predict" --model merged_hf "$img" > predict_hf.txt 2> predict_hf.err || { cat predict_hf.txt predict_hf.err; exit 1; }
cat predict.txt
diff predict.txt predict_hf.txt || { echo "FAIL: the merged export predicts otherwise"; exit 1; }
echo PASS
