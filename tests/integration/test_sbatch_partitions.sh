#!/bin/bash
# Planning what a site has, on the testbed's two partitions (cpu: n1-n4, 2 CPUs; fast: n5-n6,
# 1 CPU and one GPU by count), with a tula.conf that describes both ([partition] sections; fast
# of another hardware class, predicted from cpu's profile by published figures, 8x faster):
#   1. idle cluster: tula plan --policy time chooses fast; a long job holding
#      fast's nodes makes cpu's expected finish earlier, and Tula chooses cpu and says why
#      (slurm_job_will_run2); once fast is free again, fast;
#   2. Slurm's limits, read from slurmctld: MaxNodes=1 on cpu gives no 2-node cpu plan; a MaxTime
#      on fast below every prediction leaves fast out with the reason; a partition this user may
#      not use (AllowGroups) is left out;
#   3. what the user gave is kept: -p fast, -N 1-2, --ntasks-per-node=2 and --nodelist;
#   4. a job planned on cpu runs 2 ranks on each node (--ntasks-per-node set by cli_filter) and
#      trains the global batch of the plan for those ranks; a job planned on fast gets
#      --gpus-per-node=1 and GPU-hours in its cost, and measures its step there (TULA_PROFILE=1:
#      fast's class has no profile of its own); the next plan on fast is made from what it
#      measured (own_profile=yes, no longer scaled from cpu);
#   5. slurmctld stopped (SIGSTOP): tula plan still answers within queue_timeout and says the
#      queue is not known; sbatch itself needs slurmctld, so that part is checked on tula plan.
# Every change to the cluster (tula.conf, partition limits, jobs) is undone at exit.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
sinfo -h -p fast -o %G 2>/dev/null | grep -q gpu || skip "the cluster has no fast partition with GPUs (the isolated testbed has; this is the shared cluster)"
ensure_profile

conf=$TULA_CLUSTER_DIR/etc/tula.conf
cp "$conf" "$T_WORK/tula.conf.orig" || fail "cannot save $conf"
on_exit "cp '$T_WORK/tula.conf.orig' '$conf'"
{
    grep -vE '^[[:space:]]*max_nodes[[:space:]]*=' "$T_WORK/tula.conf.orig"
    cat <<'EOF'
queue_timeout = 1.5
[partition cpu]
nodes = 4
cpus_per_node = 2
ranks_per_node = 2
price_per_node_hour = 1.0
hardware_class = testbed
peak_flops = 1e9
memory_bandwidth = 1e9
[partition fast]
nodes = 2
cpus_per_node = 1
gpus_per_node = 1
price_per_node_hour = 1.0
price_per_gpu_hour = 0.5
hardware_class = testbed-fast
peak_flops = 8e9
memory_bandwidth = 8e9
EOF
} > "$conf"

# A training script that runs one rank per task of the job (SLURM_NTASKS), as the example does.
script=$T_WORK/train.sbatch
{
    echo '#!/bin/bash'
    echo 'echo "alloc: SLURM_JOB_NUM_NODES=$SLURM_JOB_NUM_NODES SLURM_NTASKS=${SLURM_NTASKS:-} SLURM_JOB_PARTITION=$SLURM_JOB_PARTITION"'
    echo 'env | grep ^TULA_ | sort'
    echo 'export SLURM_EXPORT_ENV=ALL'
    echo 'mpirun --allow-run-as-root --oversubscribe -np "${SLURM_NTASKS:-$SLURM_JOB_NUM_NODES}" --map-by slot --bind-to none \'
    echo '    tula-train --model lenet5 --data fashion-mnist --epochs 1 --limit-train 2048 --limit-test 512'
} > "$script"

plan() { expect_ok "tula plan $*" "$TULA" plan --script "$script" --format kv "$@"; }

# ---- 1. the queue ------------------------------------------------------------------------------
plan --policy time
assert_eq fast "$(kv_get "$T_OUT" partition)" "partition chosen by policy time on an idle cluster"
assert_eq 1 "$(kv_get "$T_OUT" gpus_per_node)" "GPUs per node of fast"
assert_eq 0 "$(kv_get "$T_OUT" queue_wait_seconds)" "expected wait on an idle cluster"
fast_s=$(kv_get "$T_OUT" predicted_seconds)

# a long job holds both fast nodes for an hour (the test's own user stands in for another one:
# slurmctld's estimate is the same, and a job of user nobody cannot start in this testbed)
run_cmd sbatch --parsable -p fast -N 2 -t 60 -o /dev/null -e /dev/null --wrap 'sleep 3600'
[ "$T_RC" = 0 ] || fail "cannot submit the blocking job" "$T_ERR"
blocker=${T_OUT%%;*}; on_exit "scancel $blocker 2>/dev/null"
for _ in $(seq 60); do [ "$(job_state "$blocker")" = RUNNING ] && break; sleep 0.5; done
assert_eq RUNNING "$(job_state "$blocker")" "state of the blocking job on fast"
plan --policy time
assert_eq cpu "$(kv_get "$T_OUT" partition)" "partition chosen by policy time while fast is busy"
assert_match "$(kv_get "$T_OUT" summary)" 'fast starts in about [0-9]+.*; [0-9] nodes? of cpu start now and finish first' "summary line with fast busy"
assert_match "$(kv_get "$T_OUT" reason)" 'time to result' "reason with fast busy"
# a node range (sbatch -N 1-2) is planned through the same queue: every row on cpu
plan --policy time --node-range 1-2
assert_eq cpu "$(kv_get "$T_OUT" partition)" "partition of a node range chosen by policy time while fast is busy"
scancel "$blocker"
for _ in $(seq 60); do squeue -h -j "$blocker" 2>/dev/null | grep -q . || break; sleep 0.5; done
plan --policy time
assert_eq fast "$(kv_get "$T_OUT" partition)" "partition chosen by policy time once fast is free again"

# ---- 2. Slurm's limits ---------------------------------------------------------------------------
scontrol update PartitionName=cpu MaxNodes=1 || fail "scontrol update MaxNodes failed"
on_exit "scontrol update PartitionName=cpu MaxNodes=UNLIMITED"
expect_ok "tula plan --format json (MaxNodes=1 on cpu)" "$TULA" plan --script "$script" --format json --partition cpu
why=$(python3 -c '
import json, sys
j = json.loads(sys.argv[1])
bad = [c for c in j["candidates"] if c["partition"] == "cpu" and c["nodes"] > 1]
print("ok" if j["candidates"] and not bad else "candidates on more than 1 cpu node: %d" % len(bad))' "$T_OUT")
assert_eq ok "$why" "no cpu candidate above MaxNodes=1"
scontrol update PartitionName=cpu MaxNodes=UNLIMITED
scontrol update PartitionName=fast MaxTime=1 || fail "scontrol update MaxTime failed"
on_exit "scontrol update PartitionName=fast MaxTime=UNLIMITED"
plan --epochs 100000 --policy time
assert_eq cpu "$(kv_get "$T_OUT" partition)" "partition with fast's MaxTime=1 below every 100000-epoch prediction"
assert_match "$(kv_get "$T_OUT" left_out)" '^fast: .*MaxTime of 1 min' "fast left out for its MaxTime"
scontrol update PartitionName=fast MaxTime=UNLIMITED
scontrol update PartitionName=fast AllowGroups=nogroup-tula-test || fail "scontrol update AllowGroups failed"
on_exit "scontrol update PartitionName=fast AllowGroups=ALL"
plan --policy time
assert_eq cpu "$(kv_get "$T_OUT" partition)" "partition when fast allows only another group"
assert_match "$(kv_get "$T_OUT" left_out)" '^fast: AllowGroups=nogroup-tula-test' "fast left out for AllowGroups"
scontrol update PartitionName=fast AllowGroups=ALL

# ---- 3. what the user gave is kept ---------------------------------------------------------------
submit --hold --tula=auto -p fast -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq fast "$(job_field "$j" Partition)" "Partition of a job submitted with -p fast"
assert_not_contains "$T_ERR" "partition default" "sbatch's line with -p fast"
assert_not_contains "$T_ERR" "warning" "sbatch's line with -p fast"
assert_match "$T_ERR" '^tula: lenet5@fashion-mnist: [0-9] nodes? of fast' "sbatch's line with -p fast names the partition"
scancel "$j"
submit --hold --tula=auto -N 1-2 -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq 1-2 "$(job_field "$j" NumNodes)" "NumNodes of a job submitted with -N 1-2"
assert_contains "$T_ERR" "nodes 1-2 kept" "sbatch's line with -N 1-2"
scancel "$j"
submit --hold --tula=auto -p cpu --ntasks-per-node=1 -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_match "$(scontrol show job "$j")" 'NtasksPerN:B:S:C=1:' "tasks per node of a job submitted with --ntasks-per-node=1"
assert_not_contains "$T_ERR" "ntasks-per-node default" "sbatch's line with --ntasks-per-node=1"
scancel "$j"
submit --hold --tula=auto --nodelist=n2 -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq n2 "$(job_field "$j" ReqNodeList)" "ReqNodeList of a job submitted with --nodelist=n2"
assert_not_contains "$T_ERR" "partition default" "sbatch's line with --nodelist: no partition set"
scancel "$j"

# ---- 4. ranks per node and GPUs, in jobs that run ------------------------------------------------
submit --tula=auto -p cpu -o "$T_WORK/%j.out" "$script"
j=$T_JOB
assert_contains "$T_ERR" "ntasks-per-node default -> 2" "sbatch's line for a cpu job"
assert_not_contains "$T_ERR" "TULA_PROFILE" "sbatch's line for a cpu job (its class was profiled)"
# fast's class has no profile of its own (its step is cpu's scaled, or the profile of unknown
# class that the head namespace measured): the job measures it there, into this test's own user
# database, and the next plan on fast is made from that measurement, not scaled
empty_user_database
expect_ok "tula plan --partition fast (before the fast job)" "$TULA" plan --script "$script" --format kv --partition fast
assert_eq no "$(kv_get "$T_OUT" own_profile)" "own_profile of fast before a job ran there"
assert_eq testbed "$(kv_get "$T_OUT" scaled_from)" "scaled_from of fast before a job ran there"
submit --tula=auto -p fast -o "$T_WORK/%j.out" "$script"
jf=$T_JOB; on_exit "scancel $jf 2>/dev/null"
assert_contains "$(job_field "$jf" TresPerNode)" "gpu:1" "TresPerNode of a job planned on fast"
assert_contains "$T_ERR" "gpus-per-node default -> 1" "sbatch's line for a fast job"
assert_contains "$T_ERR" "measures its step here (TULA_PROFILE=1)" "sbatch's line for a job planned on fast, a class without a profile"
wait_job "$j" 300
expect_completed "$j" "$T_WORK/$j.out"
out=$(cat "$T_WORK/$j.out")
nodes=$(sed -n 's/^alloc: SLURM_JOB_NUM_NODES=\([0-9]*\) .*/\1/p' <<<"$out")
ntasks=$(sed -n 's/^alloc: .*SLURM_NTASKS=\([0-9]*\) .*/\1/p' <<<"$out")
assert_int "nodes of job $j" "$nodes"
assert_eq $((2 * nodes)) "$ntasks" "tasks of job $j: 2 per node"
batch=$(sed -n 's/^TULA_BATCH_SIZE=//p' <<<"$out")
done_line=$(grep '^tula-train: done:' <<<"$out" | tail -n 1)
assert_match "$done_line" "global_batch=$batch( |\$)" "tula-train's global batch in job $j vs TULA_BATCH_SIZE"
assert_match "$(grep -m1 '^tula-train: lenet5' <<<"$out")" "= $ntasks ranks x $((batch / ntasks));" "tula-train's ranks in job $j"

wait_job "$jf" 300
expect_completed "$jf" "$T_WORK/$jf.out"
assert_match "$(cat "$T_WORK/$jf.out")" '^tula-train: measured [0-9]+ local batch\(es\) in [0-9.]+ s, recorded as compute samples' \
    "the fast job's measurement"
expect_ok "tula plan --partition fast (after the fast job)" "$TULA" plan --script "$script" --format kv --partition fast
assert_eq yes "$(kv_get "$T_OUT" own_profile)" "own_profile of fast after its job measured the step there"
assert_eq "" "$(kv_get "$T_OUT" scaled_from)" "scaled_from of fast after its job measured the step there"
expect_ok "tula plan --partition fast --format json" "$TULA" plan --script "$script" --format json --partition fast
why=$(python3 -c '
import json, sys
j = json.loads(sys.argv[1])
bad = [c for c in j["candidates"] if not (c["gpu_hours"] > 0 and abs(c["gpu_hours"] - c["node_hours"]) <= 1e-12 + 1e-9 * c["node_hours"])]
print("ok" if j["candidates"] and not bad else "%d candidates without GPU-hours = node-hours x 1 GPU" % len(bad))' "$T_OUT")
assert_eq ok "$why" "GPU-hours of the candidates on fast (1 GPU per node)"

# ---- 5. slurmctld stopped ------------------------------------------------------------------------
ctld=$(pgrep -f "slurmctld.*$TULA_CLUSTER_DIR" | head -n 1)
[ -n "$ctld" ] || ctld=$(for p in $(pgrep -x slurmctld); do tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" && echo "$p"; done | head -n 1)
assert_int "slurmctld's pid" "$ctld"
kill -STOP "$ctld"; on_exit "kill -CONT $ctld"
t0=$(now_ms)
plan --policy time
dt=$(( $(now_ms) - t0 ))
kill -CONT "$ctld"
[ "$dt" -lt 4000 ] || fail "tula plan took $dt ms with slurmctld stopped (queue_timeout 1.5 s)"
assert_match "$(kv_get "$T_OUT" summary)" 'the queue is not known \(slurmctld did not answer within 1.5 s\): planned as if it were empty' "summary with slurmctld stopped"
note "ok: partitions, the queue, Slurm's limits and the user's shape (plan with slurmctld stopped: $dt ms)"
