#!/usr/bin/env bash
# The disk tier's files go with the run however it ends: a rank SIGKILLed mid-run (mpirun
# then ends the other), and a configuration error raised after the stores opened, each
# leave the offload folder empty, under Gemini (every chunk on disk) and under ZeRO-2 with
# cpu_offload.
# Usage: offload_files_after_kill.sh MPIEXEC BUILD_DIR
set -uo pipefail
mpiexec=$1 build=$2
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
common=(--no-progress --set model.image_size=32 --set train.epochs=2 --set data.limit=48 --set train.batch_size=4
        --set run.output_dir=runs)
gemini=(--set plugin.name=gemini --set plugin.precision=bf16 --set plugin.placement_policy=static
        --set plugin.shard_param_frac=1.0 --set plugin.offload_optim_frac=1.0 --set plugin.offload_param_frac=1.0)
zero=(--set plugin.name=low_level_zero --set plugin.stage=2 --set plugin.cpu_offload=true)
check_empty() {  # folder, what
  local left
  left=$(find "$1" -type f 2>/dev/null)
  [ -z "$left" ] || { echo "FAIL: $2 left offload files behind:"; ls -la "$1"; exit 1; }
  echo "ok: $2 left $1 empty"
}
run() {  # name, expected exit (0 or nonzero), args...
  local name=$1 want=$2
  shift 2
  "$mpiexec" -np 2 --oversubscribe "$build/examples/vit/vit_train" "${common[@]}" --set run.name="$name" \
    --set plugin.offload_dir="$work/off-$name" "$@" > "$name.log" 2>&1
  local rc=$?
  if [ "$want" = 0 ] && [ $rc -ne 0 ]; then cat "$name.log"; echo "FAIL: $name exited $rc"; exit 1; fi
  if [ "$want" != 0 ] && [ $rc -eq 0 ]; then cat "$name.log"; echo "FAIL: $name should have failed"; exit 1; fi
  check_empty "$work/off-$name" "$name (exit $rc)"
}
run gemini_killed 1 "${gemini[@]}" --set train.kill_after_steps=3
run zero_killed 1 "${zero[@]}" --set train.kill_after_steps=3
# A configuration error raised after the stores opened (the cap below what boost needs).
run gemini_cap_error 1 --set plugin.name=gemini --set plugin.placement_policy=auto --set plugin.memory_cap_mb=1
grep -q "memory_cap_mb" gemini_cap_error.log || { cat gemini_cap_error.log; echo "FAIL: the cap error does not name memory_cap_mb"; exit 1; }
# A whole run ends cleanly too.
run gemini_whole 0 "${gemini[@]}" --set train.epochs=1
echo PASS
