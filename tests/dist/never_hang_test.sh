#!/usr/bin/env bash
# The job must end non-zero within 10 s, with the message, when one rank throws (throw)
# or never reaches a collective (stall). Usage: never_hang_test.sh MPIEXEC BINARY MODE PATTERN
set -u
mpiexec=$1 bin=$2 mode=$3 pattern=$4
start=$(date +%s%N)
out=$(timeout 30 "$mpiexec" -np 2 --oversubscribe "$bin" "$mode" 2>&1)
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
echo "$out" | tail -n 20
echo "exit=$rc elapsed=${elapsed_ms} ms"
[ "$rc" -ne 0 ] || { echo "FAIL: job exited 0"; exit 1; }
[ "$rc" -ne 124 ] || { echo "FAIL: job hung (killed by timeout)"; exit 1; }
echo "$out" | grep -q -- "$pattern" || { echo "FAIL: output lacks '$pattern'"; exit 1; }
[ "$elapsed_ms" -lt 10000 ] || { echo "FAIL: took ${elapsed_ms} ms (limit 10 s)"; exit 1; }
echo PASS
