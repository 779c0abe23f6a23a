#!/bin/bash
# A workload with no profile reaches the job as TULA_PROFILE=1 (tula-jobs(7)): on this Slurm
# release, cli_filter.lua's --export=ALL,TULA_PROFILE=1 keeps the submitting environment and adds
# the variable. A plain script (no trainer: nothing is measured) named by --tula-workload, with
# an empty user database and the cluster's profiled system database; also what a job with its
# own --export keeps. Quick enough for every release of the matrix (tests/run --tier matrix).
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA"
make_workdir
ensure_profile
empty_user_database
plain=$T_WORK/plain.sbatch
write_plain_script "$plain"
echo 'echo "marker=${TULA_TEST_MARKER:-unset}"' >> "$plain"
export TULA_TEST_MARKER=kept

submit --tula=auto --tula-workload=nosuchnet@fashion-mnist -o "$T_WORK/%j.out" "$plain"
job=$T_JOB
assert_eq 1 "$(count_lines "$T_ERR" '^tula:')" "tula: lines"
assert_contains "$T_ERR" "tula: no profile of nosuchnet@fashion-mnist yet" "the line says the job measures itself"
wait_job "$job" 120
expect_completed "$job" "$T_WORK/$job.out"
out=$(cat "$T_WORK/$job.out")
assert_contains "$out" "TULA_PROFILE=1" "the job's environment"
assert_contains "$out" "marker=kept" "the submitting environment still reaches the job (ALL)"

# the user's own --export is kept: no TULA_PROFILE, one warning that says what to add
submit --tula=auto --tula-workload=nosuchnet@fashion-mnist --export=ALL -o "$T_WORK/%j.out" "$plain"
job=$T_JOB
assert_eq 1 "$(count_lines "$T_ERR" '^tula:')" "tula: lines with --export"
assert_match "$T_ERR" '^tula: warning: .*add TULA_PROFILE=1 to --export.*job submitted unchanged' "the warning with --export"
wait_job "$job" 120
expect_completed "$job" "$T_WORK/$job.out"
assert_not_contains "$(cat "$T_WORK/$job.out")" "TULA_PROFILE=" "the environment of the job with its own --export"
note "ok: TULA_PROFILE reaches the first job; an explicit --export is kept"
