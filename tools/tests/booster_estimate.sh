#!/usr/bin/env bash
# booster_estimate end to end, small: this machine profiled (the hardware, and one ViT-S layer
# at 4 images a rank), then every plugin's example config estimated and measured on 2 ranks
# (bench/memory_estimate_check.py: vit_benchmark's allocator peak over two steps), each
# estimate within 5 % of the measured peak; Gemini and FSDP also with the whole model one
# unit; then the same for nanoGPT's baby GPT (lm_train's config, lm_benchmark measuring), and
# some of both in bf16. Bad
# input is refused by name: a wrong key, a model or an image size the profile is not of, a
# missing profile, a tensor mode the cost model does not model.
# Usage: booster_estimate.sh MPIEXEC BUILD_DIR SOURCE_DIR [fp32|bf16]: one precision's rows
# (two ctests, side by side; fp32 also checks the readable form and the refusals), or both.
set -euo pipefail
mpiexec=$1 build=$2 src=$3 part=${4:-all}
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
run2() { "$mpiexec" -np 2 --oversubscribe "$@"; }
run2 "$build/tools/galvatron_profile_hardware" --out "$work/P" --mb 1 --iters 2 > "$work/hw.log" 2>&1 || { cat "$work/hw.log"; exit 1; }
E="$src/examples/vit/configs"
cd "$src"
L="$src/examples/lm/configs/shakespeare_char_baby.toml"
if [ "$part" != bf16 ]; then
  run2 "$build/tools/galvatron_profile_model" --model vit-small --batch 4 --precision fp32 --iters 2 --rounds 1 \
    --out "$work/P" > "$work/model.log" 2>&1 || { cat "$work/model.log"; exit 1; }
  python3 bench/memory_estimate_check.py --build "$build" --world 2 --batch 4 --profiles "$work/P" --max-error 0.05 \
    "$E/torch_ddp.toml" "$E/low_level_zero.toml" "$E/low_level_zero.toml:stage=1" \
    "$E/gemini.toml" "$E/gemini.toml:min_chunk_size_m=32" \
    "$E/torch_fsdp.toml" "$E/torch_fsdp.toml:auto_wrap_policy=\"\"" "$E/torch_fsdp.toml:sharding_strategy=\"SHARD_GRAD_OP\"" \
    "$E/hybrid_parallel.toml" "$E/pipeline.toml" "$E/galvatron.toml"
  # The same for a language model: nanoGPT's baby GPT (L: its vocabulary of the text's
  # characters, block 256, dropout 0.2), each row's [plugin] on it.
  run2 "$build/tools/galvatron_profile_model" --config "$L" --set "data.cache_dir=\"$work/cache\"" --batch 4 \
    --precision fp32 --iters 2 --rounds 1 --out "$work/P" > "$work/lm_model.log" 2>&1 || { cat "$work/lm_model.log"; exit 1; }
  python3 bench/memory_estimate_check.py --build "$build" --world 2 --batch 4 --profiles "$work/P" --max-error 0.05 \
    --lm-config "$L" "$E/torch_ddp.toml" "$E/low_level_zero.toml" "$E/gemini.toml" "$E/gemini.toml:min_chunk_size_m=32" \
    "$E/torch_fsdp.toml" "$E/torch_fsdp.toml:auto_wrap_policy=\"\"" "$E/hybrid_parallel.toml" "$E/pipeline.toml" \
    "$E/galvatron.toml:galvatron_config_path=\"\",sdp=true" \
    "$E/galvatron.toml:galvatron_config_path=\"\",global_tp_deg=2,global_checkpoint=true"
fi
if [ "$part" != fp32 ]; then
  # bf16 (profiles of their own: the refusal in fp32's part needs P without them): the rows
  # that differ from fp32 in what they hold (DDP's buckets beside the masters; ZeRO-1's whole
  # gradients beside the bf16 reduce-scatter's buffers), ViT and baby GPT.
  mkdir -p "$work/B" && cp "$work"/P/*bandwidth* "$work"/P/overlap_coefficient.json "$work/B/"
  run2 "$build/tools/galvatron_profile_model" --model vit-small --batch 4 --precision bf16 --iters 2 --rounds 1 \
    --out "$work/B" > "$work/bf16.log" 2>&1 || { cat "$work/bf16.log"; exit 1; }
  python3 bench/memory_estimate_check.py --build "$build" --world 2 --batch 4 --precision bf16 --profiles "$work/B" \
    --max-error 0.05 "$E/torch_ddp.toml" "$E/low_level_zero.toml" "$E/low_level_zero.toml:stage=1" "$E/gemini.toml" \
    "$E/hybrid_parallel.toml" "$E/pipeline.toml"
  run2 "$build/tools/galvatron_profile_model" --config "$L" --set "data.cache_dir=\"$work/cache\"" --batch 4 \
    --precision bf16 --iters 2 --rounds 1 --out "$work/B" > "$work/lm_bf16.log" 2>&1 || { cat "$work/lm_bf16.log"; exit 1; }
  python3 bench/memory_estimate_check.py --build "$build" --world 2 --batch 4 --precision bf16 --profiles "$work/B" \
    --max-error 0.05 --lm-config "$L" "$E/torch_ddp.toml" "$E/low_level_zero.toml:stage=1" "$E/hybrid_parallel.toml"
fi
[ "$part" = bf16 ] && { echo "booster_estimate bf16: OK"; exit 0; }
# The human-readable form: a line a part.
"$build/tools/booster_estimate" --config "$E/gemini.toml" --world 2 --profiles "$work/P" --set model.preset=vit-small \
  --set plugin.precision=fp32 --set train.batch_size=4 | tee "$work/est.txt"
for line in parameters gradients masters "optimizer states" activations buffers communication; do
  grep -q "^ *$line .* MB$" "$work/est.txt" || { echo "FAIL: no '$line' line"; exit 1; }
done
refused() {  # refused WHAT EXPECTED ARGS...: exit status 1 and a message holding EXPECTED
  local what=$1 expected=$2; shift 2
  if "$build/tools/booster_estimate" "$@" > "$work/out.txt" 2>&1; then echo "FAIL: $what accepted"; exit 1; fi
  grep -q -- "$expected" "$work/out.txt" || { echo "FAIL: $what:"; cat "$work/out.txt"; exit 1; }
  echo "refused ($what): $(head -c 300 "$work/out.txt")"
}
refused "a wrong key" "plugin.stagee" --config "$E/low_level_zero.toml" --world 2 --profiles "$work/P" \
  --set plugin.stagee=2 --set model.preset=vit-small
refused "another model" "profile this model" --config "$E/torch_ddp.toml" --world 2 --profiles "$work/P" \
  --set model.preset=vit-small --set model.hidden_size=192 --set booster.mixed_precision=fp32
refused "another image size" "197 tokens" --config "$E/torch_ddp.toml" --world 2 --profiles "$work/P" \
  --set model.preset=vit-small --set model.image_size=384 --set booster.mixed_precision=fp32
refused "no profile of the precision" "bf16" --config "$E/torch_ddp.toml" --world 2 --profiles "$work/P" \
  --set model.preset=vit-small --set booster.mixed_precision=bf16
refused "a mode it does not model" "plugin.tp_mode" --config "$E/hybrid_parallel.toml" --world 4 --profiles "$work/P" \
  --set model.preset=vit-small --set plugin.tp_mode=2d --set plugin.tp_size=4
echo "booster_estimate: OK"
