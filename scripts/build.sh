#!/usr/bin/env bash
# Configures and builds booster-cpp in build/ (Release), installing dependencies first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release
elif [ ! -f build/build.ninja ] && [ ! -f build/Makefile ]; then
  cmake -S . -B build  # an earlier configure failed half-way: run it again
fi
cmake --build build -j "$(nproc)"
