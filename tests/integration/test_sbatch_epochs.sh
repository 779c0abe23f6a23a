#!/bin/bash
# The job trains what it was ranked on: the script's --epochs define the accuracy target at its
# own batch (tula-train's default 64 here), the plan gives each global batch the whole epochs it
# needs to reach it (E(B), rounded up), and the job trains those:
#   - sbatch --tula=auto: TULA_EPOCHS is the plan's `epochs`, tula-train trains them and says so
#     in its header when they differ from --epochs ("N at batch 64 -> M at batch B, tula plan");
#   - each candidate of `tula plan --format json` trains ceil(E(B)) epochs, checked against the
#     formula with the plan's B_noise;
#   - sbatch --tula=auto --tula-epochs=fixed: the script's epochs at the batch `tula plan
#     --fixed-epochs` picks;
#   - a bad --tula-epochs value: sbatch refuses the job with one message naming the valid values.
. "$(dirname "$0")/lib.sh"
begin_train_test
script=$T_SCRIPT   # --epochs 1, no --batch-size

expect_ok "tula plan" "$TULA" plan --script "$script" --format kv
p_epochs=$(kv_get "$T_OUT" epochs)
p_batch=$(kv_get "$T_OUT" global_batch)
assert_eq 1 "$(kv_get "$T_OUT" requested_epochs)" "the script's epochs (requested_epochs)"
assert_eq 64 "$(kv_get "$T_OUT" reference_batch)" "the reference batch of a script without --batch-size"
assert_int "planned epochs" "$p_epochs"
expect_ok "tula plan --format json" "$TULA" plan --script "$script" --format json
why=$(python3 - "$T_OUT" 2>&1 <<'PY'
import json, math, sys
j = json.loads(sys.argv[1])
for c in j["candidates"]:
    e = c["epochs_to_target"]
    want = max(1, math.ceil(e - 1e-9))
    if c["epochs"] != want:
        sys.exit(f"{c['nodes']} x {c['global_batch']}: epochs {c['epochs']}, E(B) {e}")
    job = c["total_seconds"] + c["evaluation_seconds"]
    if abs(c["job_seconds"] - job) > 1e-9 * job:
        sys.exit("job_seconds differs from the training and evaluations of the epochs it trains")
    if abs(c["time_to_target_seconds"] - job) > 1e-9 * job:
        sys.exit("time to target differs from the job of the epochs it trains")
PY
) || fail "a candidate of tula plan does not train ceil(E(B)) epochs" "$why"

submit --tula=auto -o "$T_WORK/%j.out" "$script"
job=$T_JOB
wait_job "$job" 240
expect_completed "$job" "$T_WORK/$job.out"
check_tula_job "$job" "$T_WORK/$job.out"
assert_eq "$p_epochs" "$T_EPOCHS" "TULA_EPOCHS of job $job vs the plan's epochs"
if [ "$T_EPOCHS" != 1 ]; then
    assert_match "$(cat "$T_WORK/$job.out")" "$T_EPOCHS epochs \\(1 at batch 64 -> $T_EPOCHS at batch $T_BATCH, tula plan\\)" \
        "tula-train's header names where its epochs came from"
fi
note "ok: job $job trained $T_EPOCHS epoch(s) at global batch $T_BATCH (plan: $p_epochs at $p_batch)"

# --tula-epochs=fixed: the script's epoch at the batch the fixed-epochs plan picks.
expect_ok "tula plan --fixed-epochs" "$TULA" plan --script "$script" --fixed-epochs --format kv
assert_eq 1 "$(kv_get "$T_OUT" epochs)" "a fixed-epochs plan trains the script's epochs"
f_nodes=$(kv_get "$T_OUT" nodes)
submit --tula=auto --tula-epochs=fixed -o "$T_WORK/%j.out" "$script"
job=$T_JOB
assert_eq "$f_nodes" "$(job_nodes "$job")" "NumNodes of the fixed-epochs job $job vs tula plan --fixed-epochs"
wait_job "$job" 240
expect_completed "$job" "$T_WORK/$job.out"
check_tula_job "$job" "$T_WORK/$job.out"
assert_eq 1 "$T_EPOCHS" "TULA_EPOCHS of the fixed-epochs job $job"

# a bad value: refused at submission, one message
expect_fail "sbatch --tula-epochs=often" sbatch --tula=auto --tula-epochs=often -o /dev/null "$script"
assert_match "$T_ERR" "tula: invalid --tula-epochs value 'often'; valid values: follow" "sbatch's message"
note "ok: --tula-epochs=fixed and a bad value"
