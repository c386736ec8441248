#!/usr/bin/env bash
# nanoGPT's shakespeare_char CPU recipe, ours against PyTorch's in one run: builds, trains
# examples/lm/configs/shakespeare_char.toml on 2 ranks under DDP (1 thread each), then
# bench/torch_shakespeare_char.py (the same model, data, schedule and optimizer, one
# process with every thread), for each seed of SEEDS (default "1337"), and prints the runs
# side by side with their means: the best evaluation (20 batches, as nanoGPT reports it),
# the final model over 200 batches (an estimate that moves less), and the median time an
# iteration. --llama runs the LLaMA config against a PyTorch LLaMA. Installs python3-torch
# when missing.
# Usage: [SEEDS="1337 1 2"] scripts/shakespeare_vs_peer.sh [--llama] [--set key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --peer
config=examples/lm/configs/shakespeare_char.toml model=gpt2
[ "${1:-}" = "--llama" ] && { config=examples/lm/configs/shakespeare_char_llama.toml model=llama; shift; }
[ -x build/examples/lm/lm_train ] || bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out=$(mktemp -d)
for seed in ${SEEDS:-1337}; do
  OMP_NUM_THREADS=1 mpirun -np 2 --oversubscribe build/examples/lm/lm_train --config "$config" --no-progress \
    --set run.output_dir="$out" --set run.name="seed$seed" --set train.seed="$seed" "$@" | tee -a "$out/ours.log"
  grep -h '"type":"final"' "$out/seed$seed/metrics.jsonl" >> "$out/ours.json"
  OMP_NUM_THREADS=$(nproc) /usr/bin/python3 bench/torch_shakespeare_char.py --model "$model" --seed "$seed" \
    --json "$out/peer.json" | tee -a "$out/peer.log"
done
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
/usr/bin/python3 - "$out/ours.json" "$out/peer.json" "$cpu" "$config" "${SEEDS:-1337}" <<'PY'
import json, statistics, sys
ours = [json.loads(l) for l in open(sys.argv[1])]
peer = [json.loads(l) for l in open(sys.argv[2])]
cpu, config, seeds = sys.argv[3], sys.argv[4], sys.argv[5].split()
print(f"\n{config} on {cpu}: ours on 2 ranks x 1 thread (DDP), PyTorch one process x {peer[0]['threads']} threads")
print(f"{'seed':>6}{'best val (20 b.)':>20}{'final val (200 b.)':>22}{'ms / iteration':>18}")
print(f"{'':6}{'ours':>10}{'pytorch':>10}{'ours':>11}{'pytorch':>11}{'ours':>9}{'pytorch':>9}")
rows = list(zip(seeds, ours, peer))
for s, o, p in rows:
    print(f"{s:>6}{o['best_val_loss']:10.4f}{p['best_val_loss']:10.4f}{o['final_val_loss']:11.4f}"
          f"{p['final_val_loss']:11.4f}{o['ms_per_iter']:9.1f}{p['ms_per_iter']:9.1f}")
m = lambda xs, k: statistics.mean(x[k] for x in xs)  # noqa: E731
print(f"{'mean':>6}{m(ours, 'best_val_loss'):10.4f}{m(peer, 'best_val_loss'):10.4f}{m(ours, 'final_val_loss'):11.4f}"
      f"{m(peer, 'final_val_loss'):11.4f}{m(ours, 'ms_per_iter'):9.1f}{m(peer, 'ms_per_iter'):9.1f}")
print(f"speed: ours {m(peer, 'ms_per_iter') / m(ours, 'ms_per_iter'):.2f}x the peer's iterations a second")
PY
