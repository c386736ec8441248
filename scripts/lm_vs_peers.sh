#!/usr/bin/env bash
# GPT-2 124M training steps, ours against PyTorch (Debian's python3-torch, one process with
# every thread) and llm.c's CPU trainer (train_gpt2.c), in one run on the same settings:
# the same randomly initialized weights (written by lm_benchmark in llm.c's gpt2_124M.bin
# layout), the same tokens (tinyshakespeare's characters in llm.c's token files, consecutive
# batches), llm.c's AdamW (lr 1e-4, no weight decay), batch 4, fp32. Prints each one's median
# step time (the first step left out), tokens/s, the loss after the same steps (they must
# agree: the same work) and peak RSS, at each sequence length; llm.c at --llmc-seqs only
# (at 1,024 it takes about an hour on 2 cores).
# llm.c is built from a checkout you give (git clone https://github.com/karpathy/llm.c): its
# main() takes no arguments, so a temporary copy is patched (B, T, the step count, no
# shuffling, no validation or sampling) and built with its Makefile's flags; nothing of it
# enters this repository.
# Usage: scripts/lm_vs_peers.sh --llmc PATH [--seqs "256 1024"] [--llmc-seqs "256"] [--steps 4]
#                               [--batch 4] [--threads N] [--work DIR] [--json FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
llmc="" seqs="256 1024" llmc_seqs="256" steps=4 batch=4 threads=$(nproc) work="" json=""
while [ $# -gt 0 ]; do
  case $1 in
    --llmc) llmc=$2; shift 2 ;;
    --seqs) seqs=$2; shift 2 ;;
    --llmc-seqs) llmc_seqs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --json) json=$2; shift 2 ;;
    *) echo "unknown argument $1 (see the header of $0)"; exit 2 ;;
  esac
done
[ -n "$llmc" ] && [ -f "$llmc/train_gpt2.c" ] || { echo "--llmc PATH: a checkout of karpathy/llm.c (train_gpt2.c not found in '$llmc')"; exit 2; }
[ "$steps" -ge 2 ] || { echo "--steps must be at least 2 (the first step is left out of the median)"; exit 2; }
bench="$root/build/examples/lm/lm_benchmark"
[ -x "$bench" ] || bash "$root/scripts/build.sh"
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "PyTorch missing: bash scripts/install_deps.sh --peer"; exit 2; }
[ -n "$work" ] || { work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; }
mkdir -p "$work" && cd "$work"
export OMP_NUM_THREADS=$threads OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads, batch $batch, $steps steps"
"$bench" --model gpt2 --write-llmc . --seed 1337
ckpt=$work/gpt2_124M.bin tokens=$work/dev/data/tinyshakespeare/tiny_shakespeare_train.bin

# llm.c, patched in a copy: B, T, the steps, no shuffling, no validation, no sampling.
build_llmc() {  # T -> ./train_gpt2_T
  local t=$1 dir=$work/llmc_src
  rm -rf "$dir" && mkdir -p "$dir" && cp -r "$llmc/train_gpt2.c" "$llmc/llmc" "$dir/"
  /usr/bin/python3 - "$dir/train_gpt2.c" "$batch" "$t" "$steps" <<'PY'
import sys
path, b, t, steps = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
src = open(path).read()
for old, new in [("int B = 4;", f"int B = {b};"), ("int T = 64;", f"int T = {t};"),
                 ("dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 1);",
                  "dataloader_init(&train_loader, train_tokens, B, T, 0, 1, 0);"),
                 ("for (int step = 0; step <= 40; step++) {", f"for (int step = 0; step < {steps}; step++) {{"),
                 ("if (step % 10 == 0) {", "if (0) {"), ("if (step > 0 && step % 20 == 0) {", "if (0) {")]:
    if src.count(old) != 1:
        sys.exit(f"llm.c's train_gpt2.c changed: '{old}' is not found once; update scripts/lm_vs_peers.sh")
    src = src.replace(old, new)
open(path, "w").write(src)
PY
  # llm.c's Makefile: -Ofast -march=native, OpenMP when it finds it.
  gcc -Ofast -Wno-unused-result -march=native -fopenmp -DOMP -I"$dir" "$dir/train_gpt2.c" -lm -o "$work/train_gpt2_$t"
}

# run NAME T COMMAND...: its step lines into NAME_T.log, its peak RSS into NAME_T.rss
run() {
  local name=$1 t=$2
  shift 2
  echo "== $name, T = $t"
  /usr/bin/time -f "%M" -o "${name}_$t.rss" "$@" > "${name}_$t.log" 2>&1 || { cat "${name}_$t.log"; echo "FAIL: $name at T = $t"; exit 1; }
  grep -E '^step [0-9]+: train loss' "${name}_$t.log" || { cat "${name}_$t.log"; echo "FAIL: $name printed no step lines"; exit 1; }
}

for t in $seqs; do
  run ours "$t" "$bench" --init "$ckpt" --tokens "$tokens" --batch "$batch" --seq "$t" --steps "$steps" --print-steps \
    --profile-steps 0 --no-peer
  run pytorch "$t" /usr/bin/python3 "$root/bench/torch_lm_bench.py" --init "$ckpt" --tokens "$tokens" --batch "$batch" \
    --seq "$t" --steps "$steps" --threads "$threads"
  if [[ " $llmc_seqs " == *" $t "* ]]; then
    build_llmc "$t"
    run llmc "$t" "$work/train_gpt2_$t"
  fi
done

/usr/bin/python3 - "$batch" "$steps" "$json" $seqs <<'PY'
import json, os, re, statistics, sys
batch, steps, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
print(f"\n{'impl':8} {'T':>5} | {'ms/step':>10} {'tokens/s':>9} | {'loss 0':>9} {'loss last':>9} {'max |d loss|':>12} | {'peak RSS MB':>11}")
lines = []
for t in map(int, sys.argv[4:]):
    runs = {}
    for name in ("ours", "pytorch", "llmc"):
        if not os.path.exists(f"{name}_{t}.log"):
            continue
        steps_seen = [(int(m[1]), float(m[2]), float(m[3])) for m in
                      re.finditer(r"^step (\d+): train loss ([0-9.]+) \(took ([0-9.]+) ms\)", open(f"{name}_{t}.log").read(), re.M)]
        rss = int(open(f"{name}_{t}.rss").read().split()[-1]) / 1024
        runs[name] = (steps_seen, rss)
    ref = runs["ours"][0]
    for name, (seen, rss) in runs.items():
        ms = statistics.median([s[2] for s in seen[1:]])
        diff = max(abs(a[1] - b[1]) for a, b in zip(seen, ref))
        print(f"{name:8} {t:5d} | {ms:10.1f} {batch * t / ms * 1e3:9.1f} | {seen[0][1]:9.4f} {seen[-1][1]:9.4f} {diff:12.2e} | {rss:11.0f}")
        lines.append({"impl": name, "seq": t, "batch": batch, "steps": len(seen), "ms_per_step": ms,
                      "tokens_per_s": batch * t / ms * 1e3, "losses": [s[1] for s in seen], "peak_rss_mb": rss,
                      "max_loss_diff_vs_ours": diff})
    ours_ms = statistics.median([s[2] for s in ref[1:]])
    for name in ("pytorch", "llmc"):
        if name in runs:
            print(f"  ours / {name} at T = {t}: {statistics.median([s[2] for s in runs[name][0][1:]]) / ours_ms:.2f}x the speed")
if out:
    with open(out, "a") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
PY
