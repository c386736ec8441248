#!/usr/bin/env bash
# Builds the checkpoint fuzz target with clang (libFuzzer + ASan on the readers, linked
# against the project's libraries in BUILD) and runs it for SECONDS seconds.
# Usage: run_fuzz.sh SOURCE_DIR BUILD_DIR SECONDS
set -euo pipefail
src=$1 build=$2 secs=${3:-60}
command -v clang++ >/dev/null || { echo "clang++ not installed (apt-get install clang libclang-rt-14-dev)"; exit 1; }
out=$build/fuzz && mkdir -p "$out/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$src" -I"$build" $(mpicxx --showme:compile) \
  "$src/tests/fuzz/checkpoint_fuzz.cpp" "$src"/booster/checkpoint/{tensor_store,container,reader,records,writer}.cpp \
  "$build/booster/libbooster_booster.a" "$build/proto/libbooster_proto.a" "$build/core/libbooster_core.a" \
  -lprotobuf -lxxhash -ldnnl -lspdlog -lfmt $(mpicxx --showme:link) -fopenmp -o "$out/checkpoint_fuzz"
# Seed the corpus with a real checkpoint so the fuzzer starts from valid structure.
"$out/checkpoint_fuzz" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 "$out/corpus"
