#!/usr/bin/env bash
# lm_train on 2 ranks, short: 200 iterations of the shakespeare_char recipe learn (the
# validation loss falls below 2.9, from ln 65 = 4.17 for a uniform guess), every
# evaluation is an "eval" record, the run ends with a sample and a checkpoint that
# lm_sample continues a prompt from, also as the Hugging Face folder export_hf writes of it;
# the LLaMA config learns too (ZeRO-2, lazy init, checkpointed layers); a key of the wrong table
# or of the other model family is refused by name.
# --resume from the middle of a run reproduces it exactly, and on 1 rank of a 2-rank run nearly;
# i32 token ids train as i64 ones.
# Usage: shakespeare_char_short.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
# A run that must fail, its log naming `pattern`: refused LOG PATTERN WHAT COMMAND...
refused() {
  local log=$1 pattern=$2 what=$3
  shift 3
  if "$@" > "$log" 2>&1; then cat "$log"; echo "FAIL: $what"; exit 1; fi
  grep -q -- "$pattern" "$log" || { cat "$log"; echo "FAIL: $what"; exit 1; }
}
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char.toml" \
  --no-progress --set train.max_iters=200 --set train.eval_interval=100 --set train.lr_decay_iters=200 --set train.eval_iters=10 \
  --set data.cache_dir=cache > run.log 2>&1 || { cat run.log; exit 1; }
cat run.log
[ "$(grep -c '"type":"eval"' runs/shakespeare_char/metrics.jsonl)" = 2 ] || { echo "FAIL: two eval records expected"; exit 1; }
val=$(grep '"type":"eval"' runs/shakespeare_char/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v v="$val" 'BEGIN { exit !(v < 2.9) }' || { echo "FAIL: validation loss $val after 200 iterations"; exit 1; }
grep -q -- "---- sample ----" run.log
ls runs/shakespeare_char/checkpoints/step-*200/config.json runs/shakespeare_char/checkpoints/step-*200/vocab.json
"$build/examples/lm/lm_sample" --checkpoint runs/shakespeare_char/checkpoints --start "ROMEO:" --max_new_tokens 40 \
  > sample.log 2>&1 || { cat sample.log; exit 1; }
cat sample.log
[ "$(head -c 6 sample.log)" = "ROMEO:" ] && [ "$(wc -c < sample.log)" -gt 40 ] || { echo "FAIL: no sample"; exit 1; }
# Exported to a Hugging Face folder, the model writes the same text.
"$build/tools/export_hf" runs/shakespeare_char/checkpoints hf > export.log 2>&1 || { cat export.log; exit 1; }
"$build/examples/lm/lm_sample" --model hf --start "ROMEO:" --max_new_tokens 40 > sample_hf.log 2>&1 || { cat sample_hf.log; exit 1; }
cmp sample.log sample_hf.log || { echo "FAIL: the exported model writes other text"; exit 1; }
# The LLaMA config under ZeRO-2, lazily initialized, its layers checkpointed: 100 iterations learn as well.
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char_llama.toml" \
  --set plugin.name=low_level_zero --set plugin.stage=2 --set plugin.precision=fp32 --set model.lazy_init=true \
  --set model.gradient_checkpointing=true --no-progress --set train.max_iters=100 --set train.eval_interval=100 --set train.lr_decay_iters=100 --set train.warmup_iters=20 \
  --set train.eval_iters=10 --set data.cache_dir=cache > llama.log 2>&1 || { cat llama.log; exit 1; }
lval=$(grep '"type":"eval"' runs/shakespeare_char_llama/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v v="$lval" 'BEGIN { exit !(v < 3.2) }' || { cat llama.log; echo "FAIL: LLaMA validation loss $lval after 100 iterations"; exit 1; }
# --resume from the middle gives the uninterrupted run's evaluation exactly.
common=(--config "$src/examples/lm/configs/shakespeare_char.toml" --no-progress --set train.max_iters=100
        --set train.eval_interval=50 --set train.lr_decay_iters=100 --set train.warmup_iters=20 --set train.eval_iters=5
        --set data.cache_dir=cache --set checkpoint.every_iters=50 --set checkpoint.keep_last=3 --set run.name=resume)
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" "${common[@]}" > resume_a.log 2>&1 || { cat resume_a.log; exit 1; }
want=$(grep '"type":"eval"' runs/resume/metrics.jsonl | grep '"step":100' | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" "${common[@]}" --resume runs/resume/checkpoints/step-00000050 \
  > resume_b.log 2>&1 || { cat resume_b.log; exit 1; }
got=$(grep '"type":"eval"' runs/resume/metrics.jsonl | grep '"step":100' | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
[ -n "$want" ] && [ "$want" = "$got" ] || { echo "FAIL: resumed run's step-100 validation loss $got, uninterrupted $want"; exit 1; }
# i32 token ids (data.ids_dtype = int32) train the same model as i64 ones: the same validation loss.
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" "${common[@]}" --set data.ids_dtype=int32 --set run.name=resume32 \
  --set checkpoint.every_iters=0 > ids32.log 2>&1 || { cat ids32.log; exit 1; }
got32=$(grep '"type":"eval"' runs/resume32/metrics.jsonl | grep '"step":100' | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
[ "$want" = "$got32" ] || { echo "FAIL: i32 ids' step-100 validation loss $got32, i64 ids' $want"; exit 1; }
refused bad6.log "data.ids_dtype must be int64 or int32, got 'float32'" "float token ids were taken" \
  "$mpiexec" -np 1 "$build/examples/lm/lm_train" "${common[@]}" --set data.ids_dtype=float32
# The 2-rank run's step-50 checkpoint resumed on 1 rank: train.gradient_accumulation 2 keeps
# its global batch, so the step-100 validation loss is the uninterrupted run's (dropout 0: no
# mask hangs on the generators a new world size re-seeds) up to the order the sums ran in.
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" "${common[@]}" --set model.dropout=0 --set run.name=relaid \
  > relaid_a.log 2>&1 || { cat relaid_a.log; exit 1; }
want0=$(grep '"type":"eval"' runs/relaid/metrics.jsonl | grep '"step":100' | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
"$mpiexec" -np 1 "$build/examples/lm/lm_train" "${common[@]}" --set model.dropout=0 --set run.name=relaid1 \
  --resume runs/relaid/checkpoints/step-00000050 > relaid_b.log 2>&1 || { cat relaid_b.log; exit 1; }
grep -q "train.gradient_accumulation 2 (was 1)" relaid_b.log || { cat relaid_b.log; echo "FAIL: 1 rank did not keep the batch"; exit 1; }
got0=$(grep '"type":"eval"' runs/relaid1/metrics.jsonl | grep '"step":100' | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v a="$want0" -v b="$got0" 'BEGIN { d = a - b; exit !(b != "" && d < 1e-3 && d > -1e-3) }' ||
  { echo "FAIL: resumed on 1 rank, step-100 validation loss $got0; the 2-rank run's $want0"; exit 1; }
# GPT-2's byte-level BPE trained on the training split (300 tokens): it learns, and lm_sample
# writes from its checkpoint with the tokenizer.json saved there.
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_bpe.toml" \
  --no-progress --set train.max_iters=100 --set train.eval_interval=100 --set train.lr_decay_iters=100 \
  --set train.warmup_iters=20 --set train.eval_iters=10 --set data.bpe_vocab_size=300 --set data.cache_dir=cache_bpe \
  > bpe.log 2>&1 || { cat bpe.log; exit 1; }
pval=$(grep '"type":"eval"' runs/shakespeare_bpe/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v v="$pval" 'BEGIN { exit !(v < 4.5) }' || { cat bpe.log; echo "FAIL: BPE validation loss $pval (ln 300 = 5.70)"; exit 1; }
"$build/examples/lm/lm_sample" --checkpoint runs/shakespeare_bpe/checkpoints --start "JULIET:" --max_new_tokens 20 \
  > sample_bpe.log 2>&1 || { cat sample_bpe.log; exit 1; }
[ "$(head -c 7 sample_bpe.log)" = "JULIET:" ] || { cat sample_bpe.log; echo "FAIL: no BPE sample"; exit 1; }
# Fine-tuning from the Hugging Face folder export_hf writes of it (its tokenizer.json given):
# 20 more iterations start where it was, far below a new model's loss; the folder with
# another tokenizer is refused naming both vocabularies.
"$build/tools/export_hf" runs/shakespeare_bpe/checkpoints hf_bpe > export_bpe.log 2>&1 || { cat export_bpe.log; exit 1; }
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_bpe.toml" \
  --no-progress --set train.max_iters=20 --set train.eval_interval=20 --set train.lr_decay_iters=20 --set train.warmup_iters=5 \
  --set train.eval_iters=10 --set model.pretrained=hf_bpe --set data.tokenizer_json=hf_bpe/tokenizer.json \
  --set data.cache_dir=cache_ft --set run.name=finetune > ft.log 2>&1 || { cat ft.log; exit 1; }
fval=$(grep '"type":"eval"' runs/finetune/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v v="$fval" 'BEGIN { exit !(v < 4.0) }' || { cat ft.log; echo "FAIL: fine-tuned validation loss $fval"; exit 1; }
refused bad4.log "knows 300 tokens, the text's tokenizer 65" "a pretrained model of another vocabulary was taken" \
  "$mpiexec" -np 1 "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char.toml" \
  --set model.pretrained=hf_bpe --set 'model.activation_function=""' --set data.cache_dir=cache
refused bad5.log "model.activation_function 'gelu_new' cannot change the pretrained model of hf_bpe" "an activation other than the pretrained model's was taken" \
  "$mpiexec" -np 1 "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_bpe.toml" \
  --set model.pretrained=hf_bpe --set data.tokenizer_json=hf_bpe/tokenizer.json --set model.activation_function=gelu_new \
  --set data.cache_dir=cache_ft
# nanoGPT's token files as they are (the cache's train.bin and val.bin are its uint16 format).
"$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char.toml" \
  --no-progress --set train.max_iters=100 --set train.eval_interval=100 --set train.lr_decay_iters=100 \
  --set train.warmup_iters=20 --set train.eval_iters=10 --set data.train_bin=cache/train.bin --set data.val_bin=cache/val.bin \
  --set model.vocab_size=65 --set run.name=bin > bin.log 2>&1 || { cat bin.log; exit 1; }
bval=$(grep '"type":"eval"' runs/bin/metrics.jsonl | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
awk -v v="$bval" 'BEGIN { exit !(v < 3.2) }' || { cat bin.log; echo "FAIL: validation loss $bval on token files"; exit 1; }
refused bad3.log "data.train_bin needs model.vocab_size" "token files without a vocabulary size were taken" \
  "$mpiexec" -np 1 "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char.toml" \
  --set data.train_bin=cache/train.bin --set data.val_bin=cache/val.bin --set data.cache_dir=cache
refused bad.log "train.epochs" "an unknown key was taken" \
  "$mpiexec" -np 1 "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char.toml" --set train.epochs=3
refused bad2.log "model.n_embd is not a key of shakespeare-char-llama" "a GPT-2 key was taken for a LLaMA" \
  "$mpiexec" -np 1 "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char_llama.toml" \
  --set model.n_embd=64 --set data.cache_dir=cache
echo "PASS: validation loss $val after 200 iterations (GPT-2), $lval after 100 (LLaMA), $pval per BPE token after 100, $fval fine-tuned 20 more"
