#!/usr/bin/env bash
# lm_benchmark on tiny models: one JSON line a configuration (no plugin and DDP on 2 ranks;
# LLaMA too) with tokens/s, shares of the ceiling in (0, 1.5) and the peak RSS; then llm.c's
# folder written (gpt2_124M.bin and tinyshakespeare's tokens) and trained from it, printing
# llm.c's step lines, the loss falling from the uniform guess's ln 65. Where Debian's
# python3-torch is installed, DDP on 2 ranks beside PyTorch's DDP over gloo (2 processes).
# Usage: lm_benchmark_smoke.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
bench="$build/examples/lm/lm_benchmark"
printf '[plugin]\nname = "torch_ddp"\n' > ddp.toml
"$mpiexec" -np 2 --oversubscribe "$bench" --model gpt2-tiny --batch 2 --seq 32 --steps 2 --no-peer --configs none,ddp.toml \
  --profile-steps 1 --json out.json > run.log 2>&1 || { cat run.log; exit 1; }
cat run.log
"$mpiexec" -np 1 "$bench" --model llama-tiny --batch 2 --seq 32 --steps 1 --no-peer --profile-steps 1 --json out.json \
  > llama.log 2>&1 || { cat llama.log; exit 1; }
cat llama.log
[ "$(wc -l < out.json)" = 3 ] || { echo "FAIL: three JSON lines expected"; cat out.json; exit 1; }
python3 - out.json <<'PY'
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    for k in ("tokens_per_s", "peak_rss_mb"):
        assert j[k] > 0, (k, j)
    for k in ("ceiling_share", "attention_ceiling_share"):
        assert 0 < j[k] < 1.5, (k, j)
    assert j["parts"]["attention_ms"] > 0 and j["parts"]["linears_ms"] > 0 and j["parts"]["optimizer_ms"] > 0, j
print("json lines ok")
PY
"$bench" --model gpt2-tiny --write-llmc llmc > write.log 2>&1 || { cat write.log; exit 1; }
ls llmc/gpt2_124M.bin llmc/dev/data/tinyshakespeare/tiny_shakespeare_train.bin llmc/dev/data/tinyshakespeare/tiny_shakespeare_val.bin
"$bench" --init llmc/gpt2_124M.bin --tokens llmc/dev/data/tinyshakespeare/tiny_shakespeare_train.bin --batch 4 --seq 32 \
  --steps 30 --print-steps --profile-steps 0 --no-peer > steps.log 2>&1 || { cat steps.log; exit 1; }
cat steps.log
[ "$(grep -c '^step [0-9]*: train loss [0-9.]* (took [0-9.]* ms)$' steps.log)" = 30 ] || { echo "FAIL: 30 step lines expected"; exit 1; }
first=$(grep '^step 0:' steps.log | awk '{print $5}') last=$(grep '^step 29:' steps.log | awk '{print $5}')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 3.9 && a < 4.4 && b < a - 0.1) }' || { echo "FAIL: loss $first -> $last"; exit 1; }
echo "PASS: loss $first -> $last over 30 steps from llm.c's files"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  "$mpiexec" -np 2 --oversubscribe "$bench" --model gpt2-tiny --batch 2 --seq 32 --steps 2 --configs ddp.toml \
    --profile-steps 0 --json peer.json > peer.log 2>&1 || { cat peer.log; exit 1; }
  cat peer.log
  python3 - peer.json <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert [r["peer"] for r in rows] == ["pytorch", "ours"], rows
assert rows[0]["tokens_per_s"] > 0 and rows[1]["ratio_per_process"] > 0, rows
print("PASS: DDP beside PyTorch's DDP (gloo):", rows[1]["ratio_per_process"])
PY
else
  echo "python3-torch not installed: the DDP peer run skipped"
fi
