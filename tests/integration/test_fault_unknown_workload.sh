#!/bin/bash
# Fault: Tula cannot tell what to plan for. With a profile database present, sbatch --tula=auto
#   (a) with --tula-workload naming a workload that was never profiled,
#   (b) with a script whose tula-train line trains a model that has no profile,
#   (c) with a script that has no tula-train line and no `# tula: workload=` directive (the
#       warning names the directive, so that a PyTorch user learns how to name the workload),
#   (d) with a script whose directive names a workload that was never profiled,
# submits the job unchanged (default node count and time limit) with exactly one `tula:` line:
# for (a), (b) and (d), a workload with no profile, that the job measures itself (its tasks get
# TULA_PROFILE=1 and no TULA_BATCH_SIZE: shown for (a)); for (c) a warning that says why.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile
empty_user_database  # only the system database: earlier jobs' runs must not supply a profile

train=$T_WORK/train.sbatch
write_train_script "$train"
other=$T_WORK/other-model.sbatch
sed 's/--model lenet5/--model fmnist-cnn/' "$train" > "$other"
grep -q -- '--model fmnist-cnn' "$other" || fail "could not write $other"
plain=$T_WORK/plain.sbatch
write_plain_script "$plain"
default_job "$train"

# check_unchanged WHAT ARGS...: submits (held unless RUN=1), checks rc 0, one tula: line, unchanged.
check_unchanged() {
    local what=$1 hold=(--hold); shift
    [ "${RUN:-}" = 1 ] && hold=()
    run_cmd timeout 60 sbatch --parsable "${hold[@]}" -o "$T_WORK/%j.out" --tula=auto "$@"
    expect_submitted "$what"
    job=$JOB
    assert_eq "$T_DEF_NODES" "$(job_nodes "$job")" "$what: NumNodes of job $job"
    assert_eq "$T_DEF_TIME" "$(job_field "$job" TimeLimit)" "$what: TimeLimit of job $job"
}

RUN=1 check_unchanged "unknown --tula-workload" --tula-workload=nosuchnet@fashion-mnist "$train"
assert_contains "$T_ERR" "tula: no profile of nosuchnet@fashion-mnist yet: the job runs as submitted and measures" \
    "the line names the unknown workload and says the job measures itself"
wait_job "$job" 240
expect_completed "$job" "$T_WORK/$job.out"
output=$(cat "$T_WORK/$job.out")
assert_not_contains "$output" "TULA_BATCH_SIZE=" "environment of the job with an unknown workload"
assert_contains "$output" "TULA_PROFILE=1" "environment of the job with an unknown workload"

RUN=0 check_unchanged "model without a profile" "$other"
assert_contains "$T_ERR" "tula: no profile of fmnist-cnn@fashion-mnist yet" "the line names the workload without a profile"
scancel "$job"

RUN=0 check_unchanged "script without tula-train" "$plain"
assert_contains "$T_ERR" "# tula: workload=MODEL@DATASET" "the warning names the directive"
scancel "$job"

directive=$T_WORK/directive.sbatch
{ printf '#!/bin/sh\n# tula: workload=nosuchtorch@fashion-mnist epochs=2\n'; tail -n +2 "$plain"; } > "$directive"
RUN=0 check_unchanged "directive naming an unprofiled workload" "$directive"
assert_contains "$T_ERR" "tula: no profile of nosuchtorch@fashion-mnist yet" "the line names the directive's workload"
scancel "$job"
note "ok: unknown workloads leave the job unchanged with one line (a measurement where a workload is named)"
