#!/bin/bash
# The isolated testbed (scripts/tula-cluster) is what it says: run on the cluster it started.
#   - partitions cpu (n1-n4, 2 CPUs) and fast (n5-n6, 1 CPU), as sinfo reports them;
#   - a job step on each node sees that node's host name and its own address 10.77.0.(9+i) on
#     eth0, and runs in the node's cgroup with its CPU quota (0.3 core: quota / period);
#   - each node's link is shaped by tbf at the testbed's rate, on both ends of its veth pair;
#   - the machine's own network namespace (that of tula-cluster run) has no address or route of
#     the testbed;
#   - a 2-node MPI job's ranks run on 2 hosts and reach each other over TCP.
# SKIP on the shared cluster (--shared, or where the testbed cannot be made).
. "$(dirname "$0")/lib.sh"
need_cluster
[ "${TULA_TESTBED:-}" = isolated ] || skip "the cluster is the shared one (no isolated testbed on this machine)"
make_workdir
id=$(cat "$TULA_CLUSTER_DIR/run/id") || fail "no testbed id in $TULA_CLUSTER_DIR/run/id"
rate=${TULA_LINK_RATE:-200mbit}
shown=$(sed 's/gbit$/Gbit/; s/mbit$/Mbit/; s/kbit$/Kbit/' <<<"$rate")  # as tc prints it

run_cmd sinfo -h -o '%R %D %c %N'
note "sinfo: $T_OUT"
assert_contains "$T_OUT" "cpu 4 2 n[1-4]" "partition cpu: 4 nodes of 2 CPUs"
assert_contains "$T_OUT" "fast 2 1 n[5-6]" "partition fast: 2 nodes of 1 CPU"

i=0
for n in n1 n2 n3 n4 n5 n6; do
    part=cpu; [ "$n" = n5 ] || [ "$n" = n6 ] && part=fast
    expect_ok "job step on $n" timeout 60 srun -p "$part" -w "$n" -N 1 -n 1 -t 1 bash -c \
        'hostname; ip -4 -o addr show dev eth0 | awk "{print \$4}"; awk -F: "\$2 == \"cpu\" || \$2 == \"cpu,cpuacct\" {print \$3}" /proc/self/cgroup'
    mapfile -t got <<<"$T_OUT"
    assert_eq "$n" "${got[0]}" "host name seen by a job step on $n"
    assert_eq "10.77.0.$((10 + i))/24" "${got[1]}" "address of $n"
    cg=/sys/fs/cgroup/cpu${got[2]}
    assert_eq "/tula/$id/$n" "${got[2]}" "cpu cgroup of a job step on $n"
    q=$(cat "$cg/cpu.cfs_quota_us") p=$(cat "$cg/cpu.cfs_period_us")
    awk -v q="$q" -v p="$p" 'BEGIN { exit !(q >= 1000 && q / p > 0.29 && q / p < 0.31) }' ||
        fail "CPU quota of $n" "expected: 0.3 core, quota >= 1000 us" "seen: quota $q us, period $p us"
    tc_node=$(nsenter --net="/run/netns/tula-$id-$n" tc qdisc show dev eth0)
    tc_port=$(nsenter --net="/run/netns/tula-$id-sw" tc qdisc show dev "p-$n")
    for t in "$tc_node" "$tc_port"; do
        assert_contains "$t" "qdisc tbf" "shaping of $n's link"
        assert_contains "$t" "rate $shown " "rate of $n's link"
    done
    i=$((i + 1))
done

# the launcher (tula-cluster run) stays in the machine's own namespace
host_ns=/proc/${TULA_CLUSTER_LAUNCHER_PID:?not started by tula-cluster run}/ns/net
root_addrs=$(nsenter --net="$host_ns" ip -4 -o addr show && nsenter --net="$host_ns" ip -4 route show) ||
    fail "cannot look into the machine's network namespace through $host_ns"
[ "$(readlink "$host_ns")" != "$(readlink /proc/self/ns/net)" ] || fail "the test runs in the machine's namespace, not the head's"
assert_not_contains "$root_addrs" "10.77.0." "the machine's own namespace (addresses and routes)"

# 2 ranks on 2 nodes: two host names, and an allreduce over the shaped link
cat > "$T_WORK/mpi.sbatch" <<'SB'
#!/bin/bash
mpirun --allow-run-as-root -np 2 --map-by node --bind-to none hostname
SB
expect_ok "2-node MPI job" timeout 120 sbatch --wait -N 2 -p cpu -t 2 -o "$T_WORK/mpi.out" "$T_WORK/mpi.sbatch"
hosts=$(sort -u "$T_WORK/mpi.out" | tr '\n' ' ')
assert_eq 2 "$(sort -u "$T_WORK/mpi.out" | grep -c '^n[1-4]$')" "distinct host names of 2 ranks on 2 nodes ($hosts)"
note "ok: 6 isolated nodes, partitions cpu and fast, links $rate, 0.3-core quotas"
