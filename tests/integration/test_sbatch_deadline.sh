#!/bin/bash
# sbatch --tula-deadline=HH:MM:SS (without --tula) on the real cluster: Tula is on, the job is
# submitted with exactly one tula: line, the policy reaches the job as
# SLURM_SPANK_TULA_POLICY=deadline=HH:MM:SS, the tasks get a batch size for the nodes
# allocated, and the plugstack settings handed to cli_filter.lua inside sbatch
# (TULA_PLUGSTACK_*) never reach the job's environment. A malformed deadline is refused by
# sbatch with a message naming HH:MM:SS.
. "$(dirname "$0")/lib.sh"
begin_train_test
script=$T_SCRIPT
{ head -n -2 "$script"; echo 'env | grep -E "^(SLURM_SPANK_TULA|TULA_PLUGSTACK)" | sort'; tail -n 2 "$script"; } > "$T_WORK/t2"
mv "$T_WORK/t2" "$script"

submit --tula-deadline=01:00:00 -o "$T_WORK/%j.out" "$script"
job=$T_JOB
note "sbatch said: $T_ERR"
assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "number of tula: lines on sbatch's stderr"
wait_job "$job" 240
expect_completed "$job" "$T_WORK/$job.out"
out=$(cat "$T_WORK/$job.out")
assert_contains "$out" "SLURM_SPANK_TULA_POLICY=deadline=01:00:00" "the job's environment"
assert_not_contains "$out" "TULA_PLUGSTACK_" "the job's environment (site settings must stay in sbatch)"
check_tula_job "$job" "$T_WORK/$job.out"

expect_fail "malformed deadline" sbatch --parsable --hold -o /dev/null --tula-deadline=2h "$script"
assert_contains "$T_ERR" "HH:MM:SS" "sbatch's message for --tula-deadline=2h"
note "ok: --tula-deadline plans, reaches the job, and site settings stay in sbatch"
