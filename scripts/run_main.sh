#!/usr/bin/env bash
# Builds booster-cpp and runs the main job. Until the ViT example lands this is the
# core op benchmark (linear at ViT-B shapes against the raw oneDNN matmul ceiling).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}" ./build/bench/core_bench --benchmark_min_time=0.5 "$@"
