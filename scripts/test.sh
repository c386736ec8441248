#!/usr/bin/env bash
# Builds booster-cpp and runs its test suite (ctest). CI=true skips tests labelled "heavy".
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
args=(--test-dir build --output-on-failure -j 2 --timeout 900)
[ "${CI:-}" = "true" ] && args+=(-LE heavy)
ctest "${args[@]}"
