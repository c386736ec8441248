#!/usr/bin/env bash
# Builds booster-cpp and runs the main job: ViT-Ti trained from scratch on the beans
# dataset (../shared/data/beans) with TorchDDPPlugin on 2 ranks, small defaults
# (examples/vit/configs/beans_small.toml). Extra arguments go to vit_train
# (e.g. --set train.epochs=3). The run folder is runs/beans_small.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks=${RANKS:-2}
mpirun -np "$ranks" --oversubscribe build/examples/vit/vit_train --config examples/vit/configs/beans_small.toml "$@"
