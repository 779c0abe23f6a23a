#!/bin/bash
# sbatch --tula=auto on the real cluster: the cli_filter applies the planned node count and time
# limit (scontrol show job NumNodes, TimeLimit equal `tula plan --format kv` for the same
# script), the SPANK plugin gives the tasks TULA_BATCH_SIZE / TULA_NODES for the nodes actually
# allocated, and tula-train trains with that global batch on that many ranks; the run is recorded,
# and `tula explain JOB` gives its nodes, global batch, measured and predicted seconds.
. "$(dirname "$0")/lib.sh"
begin_train_test
script=$T_SCRIPT

# What Slurm does without Tula, and what Tula plans for this script.
default_job "$script"
expect_ok "tula plan" "$TULA" plan --script "$script" --format kv
plan=$T_OUT
note "plan:" $plan
assert_eq ok "$(kv_get "$plan" status)" "tula plan status"
p_nodes=$(kv_get "$plan" nodes)
p_batch=$(kv_get "$plan" global_batch)
p_limit=$(kv_get "$plan" time_limit)
p_secs=$(kv_get "$plan" predicted_seconds)
assert_int "planned nodes" "$p_nodes"
assert_int "planned global batch" "$p_batch"
assert_int "planned time limit (minutes)" "$p_limit"
assert_number "predicted seconds" "$p_secs"
max_nodes=$(sed -n 's/^[[:space:]]*max_nodes[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$TULA_CONF" | tail -n 1)
[ "$p_nodes" -ge 1 ] && [ "$p_nodes" -le "${max_nodes:-4}" ] ||
    fail "planned node count out of range" "expected 1..${max_nodes:-4} (max_nodes of $TULA_CONF)" "seen: $p_nodes"
[ $((p_batch % p_nodes)) = 0 ] || fail "planned global batch not divisible by the node count" "seen: batch $p_batch on $p_nodes nodes"

# Submit with Tula.
submit --tula=auto -o "$T_WORK/%j.out" "$script"
job=$T_JOB out=$T_WORK/$job.out
note "job $job; sbatch said:" "$T_ERR"
assert_eq "$p_nodes" "$(job_nodes "$job")" "NumNodes of job $job (scontrol) vs the plan"
limit=$(job_field "$job" TimeLimit)
assert_eq "$p_limit" "$(minutes_of "$limit")" "TimeLimit of job $job ($limit) in minutes vs the plan's time_limit"
assert_ne "$T_DEF_TIME" "$limit" "TimeLimit of job $job vs a job submitted without --tula"

wait_job "$job" 240
expect_completed "$job" "$out"

# The tasks' environment: the batch for the nodes actually allocated, used by tula-train.
check_tula_job "$job" "$out"
assert_eq "$p_nodes" "$T_ALLOC" "nodes allocated to job $job vs the plan"
assert_eq "$p_batch" "$T_BATCH" "TULA_BATCH_SIZE in job $job vs the plan's global_batch for $p_nodes node(s)"
note "ok: job $job ran on $T_ALLOC node(s) with global batch $T_BATCH, time limit $limit"

# The run recorded by the job, as tula explain shows it.
expect_ok "tula explain $job" "$TULA" explain "$job" --format kv
ex=$T_OUT
note "explain:" $ex
assert_eq "$job" "$(kv_get "$ex" job_id)" "tula explain's job_id"
assert_eq "$p_nodes" "$(kv_get "$ex" nodes)" "tula explain's nodes vs the plan"
assert_eq "$p_batch" "$(kv_get "$ex" global_batch)" "tula explain's global_batch vs the plan"
assert_number "tula explain's measured_seconds" "$(kv_get "$ex" measured_seconds)"
assert_number "tula explain's predicted_seconds" "$(kv_get "$ex" predicted_seconds)"
