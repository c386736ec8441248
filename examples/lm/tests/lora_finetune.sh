#!/usr/bin/env bash
# LoRA fine-tuning with lm_train: a shakespeare_char GPT-2 trained 100 iterations on 2 ranks
# and exported (export_hf) is the base; a [lora] table (r 8 on c_attn and both c_proj, PEFT's
# names) fine-tunes it under ZeRO-2 on 2 ranks, freezing the rest (the log's trainable share),
# and writes PEFT's folder to runs/<name>/lora/. Its checkpoints carry adapter_config.json:
# lm_sample continues a prompt from one (the adapters merged), and export_hf writes the merged
# model, which writes the same text. Where Debian's python3-torch is installed, an independent
# reader (tools/check_peft_adapters.py: no peft, no transformers) applies the saved adapters
# to the base folder and gets the merged model's logits. A target that matches nothing is refused by name.
# Usage: lora_finetune.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
train=("$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char.toml"
       --no-progress --set train.eval_iters=5 --set train.final_eval_iters=0 --set data.cache_dir=cache)
"${train[@]}" --set train.max_iters=100 --set train.eval_interval=100 --set train.lr_decay_iters=100 --set train.warmup_iters=10 \
  --set run.name=base > base.log 2>&1 || { cat base.log; exit 1; }
"$build/tools/export_hf" runs/base/checkpoints base_hf > export.log 2>&1 || { cat export.log; exit 1; }
lora=(--set model.pretrained=base_hf --set lora.r=8 --set lora.lora_alpha=16 --set 'lora.target_modules=["c_attn", "c_proj"]'
      --set plugin.name=low_level_zero --set plugin.stage=2 --set plugin.precision=fp32 --set train.lr=3e-3
      --set train.max_iters=60 --set train.eval_interval=30 --set train.lr_decay_iters=60 --set train.warmup_iters=5)
"${train[@]}" "${lora[@]}" --set run.name=lora > lora.log 2>&1 || { cat lora.log; exit 1; }
cat lora.log
grep -q "LoRA: 12 layers adapted (r 8, lora_alpha 16); trainable params" lora.log || { echo "FAIL: no LoRA line"; exit 1; }
grep -q '"peft_type": "LORA"' runs/lora/lora/adapter_config.json
grep -q '"base_model_name_or_path": "base_hf"' runs/lora/lora/adapter_config.json
test -s runs/lora/lora/adapter_model.safetensors
step=$(ls -d runs/lora/checkpoints/step-* | tail -1)
test -s "$step/adapter_config.json"
val=$(grep '"type":"eval"' runs/lora/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
base=$(grep '"type":"eval"' runs/base/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v v="$val" -v b="$base" 'BEGIN { exit !(v < b) }' || { echo "FAIL: fine-tuned val loss $val not below the base's $base"; exit 1; }
echo "val loss: base $base, after LoRA $val"
"$build/examples/lm/lm_sample" --checkpoint runs/lora/checkpoints --start "ROMEO:" --max_new_tokens 40 > sample.log 2> err.log \
  || { cat sample.log err.log; exit 1; }
"$build/tools/export_hf" runs/lora/checkpoints merged_hf > export2.log 2>&1 || { cat export2.log; exit 1; }
"$build/examples/lm/lm_sample" --model merged_hf --start "ROMEO:" --max_new_tokens 40 > sample_hf.log 2> err_hf.log \
  || { cat sample_hf.log err_hf.log; exit 1; }
cat sample.log
cmp sample.log sample_hf.log || { echo "FAIL: the merged export writes other text"; exit 1; }
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$src/tools/check_peft_adapters.py" base_hf runs/lora/lora merged_hf | tee reader.log
  grep -q PASS reader.log
else
  echo "python3-torch not installed: the independent PEFT reader skipped"
fi
# LLaMA: PEFT's default targets (q_proj, v_proj), its adapters read back by the reader too.
ltrain=("$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char_llama.toml"
        --no-progress --set train.eval_iters=5 --set train.final_eval_iters=0 --set data.cache_dir=cache --set train.max_iters=40
        --set train.eval_interval=40 --set train.lr_decay_iters=40 --set train.warmup_iters=5)
"${ltrain[@]}" --set run.name=lbase > lbase.log 2>&1 || { cat lbase.log; exit 1; }
"$build/tools/export_hf" runs/lbase/checkpoints lbase_hf > lexport.log 2>&1 || { cat lexport.log; exit 1; }
"${ltrain[@]}" --set model.pretrained=lbase_hf --set lora.r=4 --set run.name=llora > llora.log 2>&1 || { cat llora.log; exit 1; }
grep -q '"target_modules": \[\s*"q_proj",\s*"v_proj"\s*\]' <(tr -d '\n' < runs/llora/lora/adapter_config.json) \
  || { cat runs/llora/lora/adapter_config.json; echo "FAIL: LLaMA's default targets"; exit 1; }
"$build/tools/export_hf" runs/llora/checkpoints lmerged_hf > lexport2.log 2>&1 || { cat lexport2.log; exit 1; }
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 "$src/tools/check_peft_adapters.py" lbase_hf runs/llora/lora lmerged_hf | tee lreader.log
  grep -q PASS lreader.log
fi
# A target module that matches nothing: named.
if "${train[@]}" "${lora[@]}" --set 'lora.target_modules=["q_proj"]' --set run.name=bad > bad.log 2>&1; then
  cat bad.log; echo "FAIL: a target matching nothing was accepted"; exit 1
fi
grep -q "target modules \[q_proj\] not found in the base model" bad.log || { cat bad.log; echo "FAIL: bad target"; exit 1; }
echo PASS
