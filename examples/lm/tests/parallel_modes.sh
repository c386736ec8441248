#!/usr/bin/env bash
# lm_train under each language-model layout of HybridParallelPlugin on 2 ranks, 60 iterations
# each from configs/shakespeare_char_hybrid.toml: tensor parallelism with the vocabulary split
# and split_gather sequence parallelism (the config as it is), the same overlapped (ring),
# tensor parallelism alone with
# whole logits, Ulysses (all_to_all, sp 2), ring attention (ring_attn, sp 2, zigzag token
# shards), and a two-stage pipeline of GPT-2 with its head
# tied across the stages. Each learns (the validation loss under 3.3, from ln 65 = 4.17) and
# its checkpoint writes text through lm_sample at one process.
# Usage: parallel_modes.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
run() {  # name, then --set overrides
  local name=$1
  shift
  "$mpiexec" -np 2 --oversubscribe "$build/examples/lm/lm_train" --config "$src/examples/lm/configs/shakespeare_char_hybrid.toml" \
    --no-progress --set train.max_iters=60 --set train.eval_interval=60 --set train.lr_decay_iters=60 \
    --set train.warmup_iters=10 --set train.eval_iters=10 --set train.final_eval_iters=0 --set sample.max_new_tokens=20 \
    --set data.cache_dir=cache --set checkpoint.every_iters=60 --set run.name="$name" "$@" > "$name.log" 2>&1 \
    || { cat "$name.log"; echo "FAIL: $name"; exit 1; }
  local v
  v=$(grep '"type":"eval"' "runs/$name/metrics.jsonl" | tail -1 | sed -E 's/.*"val_loss":([0-9.eE+-]+).*/\1/')
  awk -v v="$v" 'BEGIN { exit !(v < 3.3) }' || { cat "$name.log"; echo "FAIL: $name validation loss $v"; exit 1; }
  "$build/examples/lm/lm_sample" --checkpoint "runs/$name/checkpoints" --start "ROMEO:" --max_new_tokens 20 \
    > "$name.sample" 2>&1 || { cat "$name.sample"; echo "FAIL: $name sample"; exit 1; }
  [ "$(head -c 6 "$name.sample")" = "ROMEO:" ] || { cat "$name.sample"; echo "FAIL: $name wrote no text"; exit 1; }
  echo "$name: validation loss $v"
}
run tp2_split_gather
run tp2_ring --set plugin.sequence_parallelism_mode=ring
run tp2_whole_logits --set plugin.enable_sequence_parallelism=false --set plugin.parallel_output=false
run ulysses2 --set plugin.tp_size=1 --set plugin.sequence_parallelism_mode=all_to_all --set plugin.sp_size=2
run ring_attn2 --set plugin.tp_size=1 --set plugin.sequence_parallelism_mode=ring_attn --set plugin.sp_size=2
run pp2_tied --set plugin.tp_size=1 --set plugin.enable_sequence_parallelism=false --set plugin.pp_size=2 \
  --set plugin.num_microbatches=2
echo "PASS"
