#!/bin/bash
# sbatch --tula=auto never cuts what the user asked for explicitly. Tula may fill in what was
# left open, but an explicit time limit (--time on the command line, in an #SBATCH line, or in
# SBATCH_TIMELIMIT) is kept as it is, and sbatch's line says "kept"; an explicit -N N stays N
# nodes (the plan table's row for N reaches the job, even above tula.conf's max_nodes); a
# range -N LO-HI stays a range. Before this rule, --time=02:00:00 was cut to the plan's few
# minutes ("time limit 120 min -> 3 min"), and a job killed at a wrong prediction lost its work.
. "$(dirname "$0")/lib.sh"
begin_train_test
script=$T_SCRIPT

# (1) --time on the command line
submit --hold --tula=auto --time=02:00:00 -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq 120 "$(minutes_of "$(job_field "$j" TimeLimit)")" "TimeLimit of job $j submitted with --time=02:00:00"
assert_match "$T_ERR" '^tula: .*time limit 120 min kept' "sbatch's tula: line for --time=02:00:00"
assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "number of tula: lines"

# (2) --time in an #SBATCH line
write_train_script "$T_WORK/sbatch-time.sbatch" "--time=1-00:00:00"
submit --hold --tula=auto -o /dev/null "$T_WORK/sbatch-time.sbatch"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq 1440 "$(minutes_of "$(job_field "$j" TimeLimit)")" "TimeLimit of job $j with #SBATCH --time=1-00:00:00"
assert_contains "$T_ERR" "time limit 1440 min kept" "sbatch's tula: line for #SBATCH --time"

# (3) SBATCH_TIMELIMIT in the environment
SBATCH_TIMELIMIT=45 submit --hold --tula=auto -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq 45 "$(minutes_of "$(job_field "$j" TimeLimit)")" "TimeLimit of job $j with SBATCH_TIMELIMIT=45"
assert_contains "$T_ERR" "time limit 45 min kept" "sbatch's tula: line for SBATCH_TIMELIMIT"

# (4) no --time: Tula fills it in from the plan
expect_ok "tula plan" "$TULA" plan --script "$script" --format kv
p_limit=$(kv_get "$T_OUT" time_limit)
submit --hold --tula=auto -o /dev/null "$script"
j=$T_JOB; on_exit "scancel $j 2>/dev/null"
assert_eq "$p_limit" "$(minutes_of "$(job_field "$j" TimeLimit)")" "TimeLimit of job $j without --time vs the plan"
assert_contains "$T_ERR" "time limit default -> $p_limit min" "sbatch's tula: line without --time"

# (5) -N 3 is kept, and the job trains on 3 nodes with the plan table's row for 3
max_nodes=$(sed -n 's/^[[:space:]]*max_nodes[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$TULA_CONF" | tail -n 1)
expect_ok "tula plan --node-range 3-3" "$TULA" plan --script "$script" --node-range 3-3 --format kv
row=$(kv_get "$T_OUT" table); row=${row#*;}
assert_match "$row" '^3:[0-9]+:[0-9]+:[0-9.]+$' "the plan table for -N 3"
submit --tula=auto -N 3 -o "$T_WORK/%j.out" "$script"
j=$T_JOB
assert_eq 3 "$(job_nodes "$j")" "NumNodes of job $j submitted with -N 3 (max_nodes in tula.conf: ${max_nodes:-?})"
assert_contains "$T_ERR" "nodes 3 kept" "sbatch's tula: line for -N 3"
wait_job "$j" 240
expect_completed "$j" "$T_WORK/$j.out"
check_tula_job "$j" "$T_WORK/$j.out"
assert_eq 3 "$T_ALLOC" "nodes of job $j"
b=${row#*:}; b=${b%%:*}
assert_eq "$b" "$T_BATCH" "TULA_BATCH_SIZE of job $j vs the plan table's row for 3 nodes"
note "ok: explicit --time (command line, #SBATCH, SBATCH_TIMELIMIT) and -N kept"
