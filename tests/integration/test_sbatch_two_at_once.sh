#!/bin/bash
# test-timeout: 420
# Two 1-node `sbatch --tula=auto` jobs submitted at once on the cpu partition (2-CPU nodes whose
# CPU quota is the node's): the testbed's tula.conf says exclusive = yes, so the submission adds
# --exclusive ("exclusive default -> whole nodes"), Slurm gives each job a node of its own
# (OverSubscribe=NO, different NodeLists) instead of packing both onto one node, and each job's
# measured training stays within the 95 % interval of its prediction (`tula predict`, its nodes,
# batch and epochs) from a compute profile timed on a node of the partition alone (the cluster's
# shared profile is timed in the head namespace, which has no quota). A job with an explicit
# --oversubscribe keeps it (the line does not set --exclusive).
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile
[ "${TULA_TESTBED:-}" = isolated ] || skip "needs the isolated testbed (its nodes' CPU quotas)"
grep -qE '^[[:space:]]*exclusive[[:space:]]*=[[:space:]]*yes' "$TULA_CONF" ||
    fail "the testbed's $TULA_CONF does not say exclusive = yes" "$(cat "$TULA_CONF")"

script=$T_WORK/one-node.sbatch
cat > "$script" <<JOB
#!/bin/bash
#SBATCH -N 1 --ntasks-per-node=1
export SLURM_EXPORT_ENV=ALL
srun $TULA_TRAIN --model lenet5 --data fashion-mnist --epochs 2 --limit-train 4096 --limit-test 512 --threads 1
JOB
expect_ok "tula plan" "$TULA" plan --script "$script" --nodes 1 --format kv
plan=$T_OUT
assert_eq yes "$(kv_get "$plan" exclusive)" "the plan's exclusive"
assert_eq 1 "$(kv_get "$plan" cpus_per_rank)" "the plan's cpus_per_rank (the script's --threads)"

declare -a jobs
for i in 1 2; do
    submit --tula=auto -o "$T_WORK/two-%j.out" "$script"
    jobs+=("$T_JOB")
    on_exit "scancel $T_JOB 2>/dev/null"
    assert_contains "$T_ERR" "exclusive default -> whole nodes" "sbatch's tula: line (job $T_JOB)"
    assert_eq NO "$(job_field "$T_JOB" OverSubscribe)" "OverSubscribe of job $T_JOB"
done
nodes=()
for j in "${jobs[@]}"; do
    wait_job "$j" 300
    expect_completed "$j" "$T_WORK/two-$j.out"
    nodes+=("$(job_field "$j" NodeList)")
done
assert_ne "${nodes[0]}" "${nodes[1]}" "the nodes of the two jobs submitted at once"

# the speed of a node alone: a compute profile timed on one node of the partition, by itself
node_db=$T_WORK/node.db
expect_ok "profiling compute on a node" srun --quiet -N 1 -n 1 --exclusive -t 10 "$TULA" profile compute \
    --workload "$T_WORKLOAD" --batch-sizes 16,32,64 --iters 5 --db "$node_db"
for j in "${jobs[@]}"; do
    expect_ok "tula explain $j" "$TULA" explain "$j" --format kv
    ex=$T_OUT
    m=$(kv_get "$ex" measured_seconds)
    assert_number "measured_seconds of job $j" "$m"
    expect_ok "tula predict for job $j" "$TULA" predict --workload "$T_WORKLOAD" --nodes 1 \
        --global-batch "$(kv_get "$ex" global_batch)" --epochs "$(kv_get "$ex" epochs)" --limit-train 4096 \
        --limit-test 512 --db "$node_db" --format kv
    pred=$(kv_get "$T_OUT" predicted_seconds) lower=$(kv_get "$T_OUT" lower_seconds) upper=$(kv_get "$T_OUT" upper_seconds)
    assert_number "tula predict's upper_seconds" "$upper"
    report "job $j on ${nodes[$([ "$j" = "${jobs[0]}" ] && echo 0 || echo 1)]}: measured $m s; a node alone predicts $pred s" \
        "(95 % interval $lower to $upper s); the plan the submission used (head-namespace profile) predicted" \
        "$(kv_get "$ex" predicted_seconds) s"
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$m" "$upper" ||
        fail "job $j trained ${m} s, above the interval of a node alone (predicted $pred s, upper $upper s)" \
            "$(tail -n 20 "$T_WORK/two-$j.out")"
done

# an explicit --oversubscribe is kept: no --exclusive is added
submit --hold --tula=auto --oversubscribe -o /dev/null "$script"
on_exit "scancel $T_JOB 2>/dev/null"
assert_not_contains "$T_ERR" "exclusive default" "sbatch's line with --oversubscribe"
scancel "$T_JOB"
note "ok: two jobs at once on nodes ${nodes[*]}, each within the plan's interval"
