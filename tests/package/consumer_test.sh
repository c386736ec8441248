#!/usr/bin/env bash
# The installed package works for another project: installs the build tree into a temporary
# prefix, configures and builds tests/package/consumer against it with
# find_package(booster REQUIRED), and runs it on 2 ranks.
# Usage: consumer_test.sh MPIEXEC BUILD_DIR SOURCE_DIR
set -euo pipefail
mpiexec=$1 build=$2 src=$3
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
test -f "$work/prefix/lib/cmake/booster/boosterConfig.cmake"
test -f "$work/prefix/include/booster/booster/booster.h"
test -f "$work/prefix/include/booster/proto/checkpoint.pb.h"
cmake -S "$src/tests/package/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" || { cat "$work/build.log"; exit 1; }
"$mpiexec" -np 2 --oversubscribe "$work/build/consumer" | tee "$work/run.log"
test "$(grep -c 'one step, loss' "$work/run.log")" = 2
echo PASS
