#!/bin/bash
# Fault: no profile database at all (neither the cluster's system database nor the user's).
# sbatch --tula=auto must still submit the job, promptly (no hang), unchanged (default node
# count and time limit, no TULA_BATCH_SIZE in the tasks), with exactly one `tula:` warning line.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA_TRAIN"
make_workdir
hide_databases
[ ! -e "$TULA_CLUSTER_DIR/system.db" ] || fail "could not hide $TULA_CLUSTER_DIR/system.db"

script=$T_WORK/train.sbatch
write_train_script "$script"
default_job "$script"

# timeout: a hang is a failure, not a stuck test suite.
run_cmd timeout 60 sbatch --parsable --tula=auto -o "$T_WORK/%j.out" "$script"
expect_submitted "no profile database"
job=$JOB
assert_eq "$T_DEF_NODES" "$(job_nodes "$job")" "NumNodes of job $job (no database: unchanged)"
assert_eq "$T_DEF_TIME" "$(job_field "$job" TimeLimit)" "TimeLimit of job $job (no database: unchanged)"

wait_job "$job" 240
expect_completed "$job" "$T_WORK/$job.out"
output=$(cat "$T_WORK/$job.out")
assert_not_contains "$output" "TULA_BATCH_SIZE=" "environment of job $job (no database)"
assert_match "$output" '^tula-train: done:' "training in job $job"
# nothing was drained by the fault
drained=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /drain|down|fail/' | sort -u)
assert_eq "" "$drained" "nodes drained or down after the job"
note "ok: no database -> job submitted unchanged with one warning"
