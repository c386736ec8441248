#!/usr/bin/env bash
# booster_run restarts a 2-rank vit_train job whose ranks are SIGKILLed from outside twice
# mid-run: it ends with the weights of the run nobody killed. A host lost with the second
# kill (the hostfile shrinks to 1 slot, so the real mpirun cannot start 2 ranks) makes it
# retry once, then continue on 1 rank with the global batch kept (--min-ranks 1): the
# weights within rounding of the 2-rank run. It stops, saying why, when the job dies before
# any checkpoint, and when it dies twice in a row from one checkpoint at --min-ranks.
# Usage: booster_run.sh MPIEXEC BUILD_DIR
set -uo pipefail
mpiexec=$1 build=$2
work=$(mktemp -d) && trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT && cd "$work"
cat > run.toml <<'T'
[plugin]
name = "torch_ddp"
[model]
image_size = 32
[train]
epochs = 3
batch_size = 4
[data]
limit = 96
[checkpoint]
every_steps = 2
keep_last = 3
T
fail() { echo "FAIL: $*"; exit 1; }
train_args() { echo "$build/examples/vit/vit_train --config run.toml --no-progress --set run.name=$1"; }
# SIGKILLs one rank of the run named $1 once its checkpoint step $2 is complete.
kill_rank_at() {
  local name=$1 step ckpt pid
  for step in "${@:2}"; do
    ckpt=runs/$name/checkpoints/step-$(printf %08d "$step")/progress.ckpt
    until [ -f "$ckpt" ]; do sleep 0.02; done
    for pid in $(pgrep -x vit_train); do
      if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "run.name=$name "; then
        kill -9 "$pid" && echo "killed rank pid $pid of $name after step $step" && break
      fi
    done
    [ -n "${shrink:-}" ] && echo "localhost slots=1" > hosts
  done
}
final() { ls -d runs/$1/checkpoints/step-* | tail -1; }
run=("$build/tools/booster_run" --mpirun "$mpiexec" --mpirun-arg=--oversubscribe)

"$mpiexec" -np 2 --oversubscribe $(train_args full) > full.log 2>&1 || { cat full.log; fail "uninterrupted run"; }

# Two kills, the same 2 ranks each time: the same weights, bit for bit.
kill_rank_at killed 4 14 > killer.log 2>&1 &
"${run[@]}" --np 2 --max-restarts 3 --checkpoints runs/killed/checkpoints -- $(train_args killed) > killed.log 2>&1 ||
  { cat killed.log; fail "booster_run did not finish the killed job"; }
wait
cat killer.log
[ "$(grep -c 'booster_run: start' killed.log)" = 3 ] || { cat killed.log; fail "three starts expected"; }
grep -q "SIGKILL\|signal" killed.log || { cat killed.log; fail "the cause of death is not logged"; }
grep -q "finished after .* (start 3, 2 restart(s))" killed.log || { cat killed.log; fail "no finish line"; }
"$build/tools/checkpoint_compare" "$(final full)/model" "$(final killed)/model" | tail -1 || fail "the restarted job's weights differ"

# A host gone with the second kill: 2 ranks no longer start; on 1 the global batch is kept.
printf 'localhost slots=2\n' > hosts
shrink=1 kill_rank_at shrunk 6 > killer2.log 2>&1 &
run_h=("$build/tools/booster_run" --mpirun "$mpiexec" --mpirun-arg=--hostfile --mpirun-arg=hosts)
"${run_h[@]}" --np 2 --min-ranks 1 --max-restarts 4 --checkpoints runs/shrunk/checkpoints -- $(train_args shrunk) \
  > shrunk.log 2>&1 || { cat shrunk.log; fail "booster_run did not finish on fewer ranks"; }
wait
grep -q "restarting on 1 rank(s)" shrunk.log || { cat shrunk.log; fail "it did not shrink to 1 rank"; }
grep -q "its global batch is kept" shrunk.log || { cat shrunk.log; fail "1 rank did not keep the global batch"; }
"$build/tools/checkpoint_compare" --atol 2e-5 --atol-for attention.key.bias=2.5e-2 "$(final full)/model" "$(final shrunk)/model" |
  tail -1 || fail "the shrunk job's weights are not the 2-rank run's"

# Restarts that cannot succeed stop, saying which.
"${run[@]}" --np 2 --checkpoints runs/bad/checkpoints -- $(train_args bad) --set train.no_such_key=1 > bad.log 2>&1 &&
  fail "a job that cannot start was reported finished"
grep -q "stopping: it saved no complete checkpoint" bad.log || { cat bad.log; fail "no-checkpoint stop"; }
[ "$(grep -c 'booster_run: start' bad.log)" = 1 ] || fail "a job with no checkpoint was restarted"
"${run[@]}" --np 2 --max-restarts 5 --checkpoints runs/again/checkpoints -- $(train_args again) \
  --set train.kill_after_steps=5 > again.log 2>&1 && fail "a job that dies at the same step each time was reported finished"
grep -q "died twice in a row from .*step-00000004 without saving a newer checkpoint, on 2 rank(s)" again.log ||
  { cat again.log; fail "same-death stop"; }
[ "$(grep -c 'booster_run: start' again.log)" = 3 ] || { cat again.log; fail "three starts expected before stopping"; }
echo PASS
