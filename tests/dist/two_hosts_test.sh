#!/usr/bin/env bash
# Two hosts on this machine: two network namespaces joined by a veth pair, each with an
# address of a private test subnet and its own hostname (unshare --uts); Open MPI's rsh
# launcher reaches the second through an agent script that runs the command inside its
# namespace (plm_rsh_agent), over TCP only (pml ob1, btl tcp,self) on the test subnet.
#  1. a short DDP training across the two hosts gives the same losses and final weights as
#     the same job on one host, bit for bit;
#  2. never hang: a rank killed (SIGKILL) on the second host ends the whole job, non-zero,
#     within 30 s.
# The namespaces and their /etc/netns files are removed on exit. Where namespaces cannot be
# made (no root, no CAP_SYS_ADMIN, no ip), the test says so and skips (exit 77).
# Usage: two_hosts_test.sh MPIEXEC RESUME_DRIVER CHECKPOINT_COMPARE ABORT_DRIVER
set -uo pipefail
mpiexec=$1 driver=$2 compare=$3 abort=$4
tag=$$ ns_a=booster_hosta_$$ ns_b=booster_hostb_$$
subnet=10.231.$(( $$ % 200 + 20 ))
work=$(mktemp -d)
cleanup() {
  ip netns del "$ns_a" 2>/dev/null
  ip netns del "$ns_b" 2>/dev/null
  rm -rf "/etc/netns/$ns_a" "/etc/netns/$ns_b" "$work"
}
trap cleanup EXIT
skip() { echo "SKIP: $1"; exit 77; }
command -v ip >/dev/null || skip "no 'ip' command (iproute2) to make network namespaces"
command -v unshare >/dev/null || skip "no 'unshare' to give each namespace its hostname"
ip netns add "$ns_a" 2>"$work/err" || skip "cannot create a network namespace here ($(cat "$work/err")); needs root or CAP_SYS_ADMIN"
ip netns add "$ns_b" || skip "cannot create the second network namespace"
ip link add va netns "$ns_a" type veth peer name vb netns "$ns_b" || skip "cannot create a veth pair"
ip -n "$ns_a" addr add "$subnet.1/24" dev va && ip -n "$ns_b" addr add "$subnet.2/24" dev vb
for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
ip -n "$ns_a" link set va up && ip -n "$ns_b" link set vb up
for ns in "$ns_a" "$ns_b"; do  # ip netns exec binds these over /etc/hosts inside
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n%s.1 hosta\n%s.2 hostb\n' "$subnet" "$subnet" > "/etc/netns/$ns/hosts"
done
# The rsh agent, called as ssh would be: [options] HOST COMMAND...
cat > "$work/agent.sh" <<AGENT
#!/usr/bin/env bash
while [[ "\$1" == -* ]]; do shift; done
host=\$1; shift
case "\$host" in hosta) ns=$ns_a ;; hostb) ns=$ns_b ;; *) echo "agent: unknown host \$host" >&2; exit 1 ;; esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$host; \$*"
AGENT
chmod +x "$work/agent.sh"
across() {  # mpirun on hosta, one rank per host
  ip netns exec "$ns_a" unshare --uts sh -c "hostname hosta; exec \"\$0\" \"\$@\"" \
    "$mpiexec" -np 2 --host hosta:1,hostb:1 --mca plm_rsh_agent "$work/agent.sh" \
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "$subnet.0/24" --mca oob_tcp_if_include "$subnet.0/24" \
    "$@"
}
mkdir -p "$work/one" "$work/two"
"$mpiexec" -np 2 --oversubscribe "$driver" full "$work/one" ddp || { echo "FAIL: the one-host run"; exit 1; }
across "$driver" full "$work/two" ddp || { echo "FAIL: the run across two hosts"; exit 1; }
cmp "$work/one/full.txt" "$work/two/full.txt" || { echo "FAIL: losses differ:"; paste "$work/one/full.txt" "$work/two/full.txt"; exit 1; }
cat "$work/two/full.txt"
"$compare" --atol 0 "$work/one/final_full.ckpt" "$work/two/final_full.ckpt" | tail -1 || { echo "FAIL: weights differ"; exit 1; }
echo "losses and final weights bit for bit equal across two hosts"
start=$(date +%s)
timeout 60 bash -c "$(declare -f across); ns_a=$ns_a subnet=$subnet work=$work mpiexec=$mpiexec across $abort kill" > "$work/kill.log" 2>&1
rc=$?
tail -5 "$work/kill.log"
elapsed=$(( $(date +%s) - start ))
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0 after a rank was killed"; exit 1; }
[ "$rc" -ne 124 ] || { echo "FAIL: the job hung after a rank on hostb was killed"; exit 1; }
[ "$elapsed" -lt 30 ] || { echo "FAIL: took ${elapsed} s to end"; exit 1; }
echo "a rank killed on hostb ended the job (exit $rc) in ${elapsed} s"
echo PASS
