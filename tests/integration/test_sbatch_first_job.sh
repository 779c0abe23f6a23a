#!/bin/bash
# The first job of a workload nobody profiled measures itself (tula-jobs(7), TULA_PROFILE). With
# the cluster's system database (lenet5 and the allreduce profiled) and an empty user database,
# sbatch --tula=auto of a tula-train script that trains fmnist-cnn keeps the job as submitted
# (the default node count and time limit) with one line that says it measures itself; the job's
# tasks get TULA_PROFILE=1 and no plan, and tula-train measures the step at a few local batches,
# records them and the run, and trains. The second submission of the same script is planned
# from that: the job trains the planned global batch on the planned nodes, and both its plan
# (tula plan) and tula explain of it name the first job as the one that measured the profile
# (profile_jobs). Reports the
# measurement's seconds and the second job's measured training time against its prediction.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile
empty_user_database  # the user's database: empty at first, written by the jobs
script=$T_WORK/first.sbatch
write_train_script "$script"
sed -i 's/--model lenet5/--model fmnist-cnn/' "$script"
grep -q -- '--model fmnist-cnn' "$script" || fail "could not write $script"
default_job "$script"
train_seconds() { sed -n 's/^tula-train: done: train_seconds=\([0-9.]*\) .*/\1/p' <<<"$1" | tail -n 1; }

submit --tula=auto -o "$T_WORK/%j.out" "$script"
job=$T_JOB
note "first job $job; sbatch said:" "$T_ERR"
assert_eq 1 "$(count_lines "$T_ERR" '^tula:')" "tula: lines of the first submission"
assert_contains "$T_ERR" "tula: no profile of fmnist-cnn@fashion-mnist yet: the job runs as submitted and measures its step first" \
    "the first submission's line"
assert_eq "$T_DEF_NODES" "$(job_nodes "$job")" "NumNodes of the first job"
assert_eq "$T_DEF_TIME" "$(job_field "$job" TimeLimit)" "TimeLimit of the first job"
wait_job "$job" 300
expect_completed "$job" "$T_WORK/$job.out"
out=$(cat "$T_WORK/$job.out")
assert_contains "$out" "TULA_PROFILE=1" "the first job's environment"
assert_not_contains "$out" "TULA_BATCH_SIZE=" "the first job's environment (no plan)"
assert_match "$out" '^tula-train: measured [0-9]+ local batch\(es\) in [0-9.]+ s, recorded as compute samples of fmnist-cnn@fashion-mnist; training starts' \
    "the first job's measurement"
measure_s=$(sed -n 's/^tula-train: measured [0-9]* local batch(es) in \([0-9.]*\) s.*/\1/p' <<<"$out")
first_train=$(train_seconds "$out")
assert_number "the first job's training seconds" "$first_train"

# the second submission: planned from what the first job measured
submit --tula=auto -o "$T_WORK/%j.out" "$script"
job2=$T_JOB
note "second job $job2; sbatch said:" "$T_ERR"
assert_eq 1 "$(count_lines "$T_ERR" '^tula:')" "tula: lines of the second submission"
assert_not_contains "$T_ERR" "no profile" "the second submission"
assert_contains "$T_ERR" "fmnist-cnn@fashion-mnist" "the second submission's plan names the workload"
wait_job "$job2" 300
expect_completed "$job2" "$T_WORK/$job2.out"
check_tula_job "$job2" "$T_WORK/$job2.out"
out2=$(cat "$T_WORK/$job2.out")
assert_not_contains "$out2" "TULA_PROFILE=" "the second job's environment"
expect_ok "tula explain $job2" "$TULA" explain "$job2" --format kv
assert_eq "$job" "$(kv_get "$T_OUT" profile_jobs)" "the job that measured the profile the second job was planned from (tula explain)"
expect_ok "tula plan" "$TULA" plan --script "$script" --format kv
assert_eq "$job" "$(kv_get "$T_OUT" profile_jobs)" "the job that measured the profile (tula plan)"
pred=$(sed -n 's/^TULA_PREDICTED_SECONDS=//p' <<<"$out2")
meas=$(train_seconds "$out2")
assert_number "the second job's training seconds" "$meas"
report "first job $job: measured its step in $measure_s s, trained ${first_train} s; second job $job2: $T_ALLOC node(s) x" \
    "global batch $T_BATCH, predicted ${pred} s, measured ${meas} s (measured / predicted" \
    "$(awk -v m="$meas" -v p="$pred" 'BEGIN { if (p > 0) printf "%.2f", m / p; else print "-" }'))"
note "ok: the first job measured itself, the second was planned from it"
