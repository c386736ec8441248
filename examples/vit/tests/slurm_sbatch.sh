#!/usr/bin/env bash
# The main job's model under SLURM, for real: a one-node cluster (munged, slurmctld, slurmd
# configured in a temporary folder on free ports, stopped after) runs vit_train with sbatch
# on 2 tasks, started by srun (Open MPI under SLURM's PMIx, dist::launch_from_slurm) and by
# mpirun inside the allocation; both end with the weights the plain mpirun run has. Then
# launch_from_slurm's refusal where SLURM's task count is not MPI's world. Exits 77
# (skipped) naming the reason where SLURM's daemons cannot start.
# Usage: slurm_sbatch.sh MPIEXEC BUILD_DIR
set -uo pipefail
mpiexec=$1 build=$2
skip() { echo "SKIPPED: $*"; exit 77; }
for b in munged slurmctld slurmd sbatch srun sinfo; do
  command -v "$b" >/dev/null || skip "$b is not installed (Debian's slurmctld, slurmd, slurm-client, munge)"
done
work=$(mktemp -d)
cleanup() {
  for p in "$work"/run/*.pid; do [ -f "$p" ] && kill "$(cat "$p")" 2>/dev/null; done
  sleep 1
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
cd "$work" && mkdir -p state spool log run munge
export SLURM_CONF="$work/slurm.conf"
# Two free ports for slurmctld and slurmd.
read -r p1 p2 < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
host=$(hostname -s) cpus=$(nproc --all) mem=$(awk '/MemTotal/{print int($2/1024/2)}' /proc/meminfo)
[ "$cpus" -ge 2 ] || skip "2 tasks need 2 CPUs; this node has $cpus"
dd if=/dev/urandom of=munge/munge.key bs=1024 count=1 2>/dev/null && chmod 400 munge/munge.key
munged --key-file="$work/munge/munge.key" --socket="$work/munge/sock" --pid-file="$work/run/munged.pid" \
  --log-file="$work/log/munged.log" --seed-file="$work/munge/seed" -f || skip "munged does not start"
cat > slurm.conf <<EOF
ClusterName=booster_test
SlurmctldHost=$host
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
AuthInfo=socket=$work/munge/sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
SlurmctldPort=$p1
SlurmdPort=$p2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=pmix
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
slurmctld -f "$SLURM_CONF" || skip "slurmctld does not start: $(tail -n 3 log/slurmctld.log 2>/dev/null)"
slurmd -f "$SLURM_CONF" || skip "slurmd does not start: $(tail -n 3 log/slurmd.log 2>/dev/null)"
for _ in $(seq 30); do sinfo -h -o %t 2>/dev/null | grep -q idle && break; sleep 1; done
sinfo -h -o %t | grep -q idle || skip "the node does not come up: $(tail -n 3 log/slurmd.log log/slurmctld.log)"

cat > run.toml <<'T'
[plugin]
name = "torch_ddp"
[model]
image_size = 32
[train]
epochs = 1
batch_size = 4
[data]
limit = 32
T
train="$build/examples/vit/vit_train --config $work/run.toml --no-progress"
export OMP_NUM_THREADS=1
"$mpiexec" -np 2 --oversubscribe $train --set run.name=mpirun > mpirun.log 2>&1 || { cat mpirun.log; echo "FAIL: mpirun run"; exit 1; }
# srun starts the ranks (launch_from_slurm reads SLURM_PROCID and SLURM_NPROCS).
timeout 180 sbatch --wait --time=5 -n 2 -o srun.log --wrap "srun --mpi=pmix $train --set run.name=srun" > /dev/null ||
  { cat srun.log log/slurmd.log; echo "FAIL: sbatch with srun"; exit 1; }
grep -q "launched by srun" srun.log || { cat srun.log; echo "FAIL: the srun ranks did not launch from SLURM"; exit 1; }
# mpirun inside the allocation takes its hosts and slots from it.
timeout 180 sbatch --wait --time=5 -n 2 -o inside.log --wrap "$mpiexec --allow-run-as-root $train --set run.name=inside" > /dev/null ||
  { cat inside.log; echo "FAIL: sbatch with mpirun inside"; exit 1; }
final() { ls -d runs/$1/checkpoints/step-* | tail -1; }
for run in srun inside; do
  "$build/tools/checkpoint_compare" "$(final mpirun)/model" "$(final $run)/model" ||
    { echo "FAIL: the $run run's weights differ from mpirun's"; exit 1; }
done
# SLURM's task count not MPI's world (a task's SLURM_NPROCS says 2 where srun started one):
# launch_from_slurm refuses, saying why.
timeout 180 sbatch --wait --time=5 -n 2 -o alone.log --wrap "srun -n 1 --mpi=pmix env SLURM_NPROCS=2 $train --set run.name=alone" > /dev/null &&
  { cat alone.log; echo "FAIL: a world of 1 where SLURM counts 2 tasks was not refused"; exit 1; }
grep -q "SLURM started task 0 of 2" alone.log || { cat alone.log; echo "FAIL: the refusal does not say why"; exit 1; }
echo PASS
