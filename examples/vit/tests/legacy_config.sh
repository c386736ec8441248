#!/usr/bin/env bash
# A legacy Colossal-AI config in TOML: the model's widths as its globals (HIDDEN_SIZE, DEPTH,
# NUM_HEADS, MLP_RATIO), [parallel] pipeline = 2 with NUM_MICRO_BATCHES, and model.num_chunks
# = 2 selecting the interleaved schedule (legacy's model = dict(num_chunks=2)): it trains on
# 2 ranks under the interleaved schedule (the run's effective config.toml says so), and the checkpoint's config.json has
# the widths asked for. Hugging Face's keys (model.hidden_size, ...) set them too; the two
# spellings disagreeing, num_chunks beside [plugin], and widths beside model.pretrained are
# refused by name. Usage: legacy_config.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
cat > legacy.toml <<'TOML'
HIDDEN_SIZE = 64
DEPTH = 4
NUM_HEADS = 4
MLP_RATIO = 2.0
[parallel]
pipeline = 2
num_micro_batches = 2
[model]
num_chunks = 2
image_size = 32
[train]
epochs = 1
batch_size = 4
log_every = 2
[data]
limit = 24
[run]
name = "legacy"
TOML
"$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" --config legacy.toml --no-progress > legacy.log 2>&1 \
  || { cat legacy.log; exit 1; }
grep -q "done: best validation accuracy" legacy.log || { cat legacy.log; exit 1; }
grep -q 'pp_style = "interleaved"' runs/legacy/config.toml && grep -q 'num_model_chunks = 2' runs/legacy/config.toml \
  || { cat runs/legacy/config.toml; echo "FAIL: the run's config has no interleaved schedule"; exit 1; }
step=$(ls -d runs/legacy/checkpoints/step-* | tail -1)
python3 - "$step/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
got = (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["intermediate_size"])
assert got == (64, 4, 4, 128), got
print("widths from the legacy globals:", got)
PY
refused() {
  local pattern=$1
  shift
  if "$build/examples/vit/vit_train" "$@" > bad.log 2>&1; then cat bad.log; echo "FAIL: accepted: $*"; exit 1; fi
  grep -q -- "$pattern" bad.log || { cat bad.log; echo "FAIL: not named: $pattern"; exit 1; }
}
refused "HIDDEN_SIZE = 64 and model.hidden_size = 96 disagree" --config legacy.toml --set model.hidden_size=96
printf '[plugin]\nname = "torch_ddp"\n[model]\nnum_chunks = 2\n' > plugin.toml
refused "model.num_chunks is legacy Colossal-AI's" --config plugin.toml
refused "model.hidden_size with model.pretrained" --set model.pretrained=nowhere --set model.hidden_size=64 --set data.limit=6
echo PASS
