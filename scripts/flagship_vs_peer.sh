#!/usr/bin/env bash
# The main job against PyTorch on the same settings: runs scripts/run_main.sh (same
# arguments, e.g. --set train.epochs=3), then bench/torch_beans_train.py mirroring that
# run (its config.toml: model, image size, global batch, lr, schedule, augmentation,
# precision; one process with all the run's threads), and prints epoch times and accuracy
# side by side. Installs python3-torch and python3-pil when missing. PEER_EPOCHS=N stops
# the peer after N epochs (its schedule keeps the run's length; e.g. where PyTorch has no
# fast bf16 kernel and a whole run would take long).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh --peer
run=beans_small out=runs
for a in "$@"; do
  [[ "$a" == run.name=* ]] && run=${a#run.name=}
  [[ "$a" == run.output_dir=* ]] && out=${a#run.output_dir=}
done
bash scripts/run_main.sh --no-progress "$@"
/usr/bin/python3 bench/torch_beans_train.py --run "$out/$run" --max-epochs "${PEER_EPOCHS:-0}"
