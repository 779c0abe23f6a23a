#!/bin/bash
# The first job measures itself (TULA_PROFILE, tula-jobs(7); no cluster needed): tula-train
# with TULA_PROFILE=1 times local batches b/4, b/2, b and 2b before training on a copy of the
# model, records them as compute samples with their start-up, and trains as without it (the
# same epoch line and test accuracy at the same seed); from that database alone `tula predict`
# answers. A budget of a few milliseconds stops after the first batch; a value that is neither
# 1, yes, 0, no nor seconds is one warning and no measurement; the job trains in every case.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
export XDG_DATA_HOME=$T_WORK/xdg
small=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --limit-train 2048 --limit-test 256
       --batch-size 64 --epochs 1 --seed 5 --threads 1 --prefetch off)

expect_ok "run without TULA_PROFILE" timeout 300 "$TULA_TRAIN" "${small[@]}" --db plain.db
# loss, train and test accuracy of the epoch line (not its speed)
epoch_of() { grep -E '^epoch 1/1 ' <<<"$1" | sed -n 's/.*\(loss [0-9.]* *train-acc [0-9.]* *test-acc [0-9.]*\).*/\1/p'; }
plain_epoch=$(epoch_of "$T_OUT")
[ -n "$plain_epoch" ] || fail "no epoch line" "$(_excerpt "$T_OUT")"
plain_acc=$(sed -n 's/^tula-train: done: .* test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$T_OUT")
assert_number "test accuracy without TULA_PROFILE" "$plain_acc"
assert_not_contains "$T_OUT" "measuring the step" "a run without TULA_PROFILE"

expect_ok "run with TULA_PROFILE=1" env TULA_PROFILE=1 timeout 300 "$TULA_TRAIN" "${small[@]}" --db measured.db
assert_contains "$T_OUT" "measuring the step of lenet5@fashion-mnist before training (TULA_PROFILE, at most 60 s): local batches 16, 32, 64, 128" \
    "the measurement is said"
[ "$(count_lines "$T_OUT" '^tula-train: measured local batch [0-9]+: [0-9.]+ ms per step')" = 4 ] ||
    fail "expected 4 measured local batches" "$(_excerpt "$T_OUT" 30)"
assert_contains "$T_OUT" "recorded as compute samples of lenet5@fashion-mnist; training starts" "the samples are recorded"
measured_acc=$(sed -n 's/^tula-train: done: .* test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$T_OUT")
assert_eq "$plain_acc" "$measured_acc" "test accuracy with and without the measurement (seed 5)"
measured_epoch=$(epoch_of "$T_OUT")
assert_eq "$plain_epoch" "$measured_epoch" "the epoch line (loss and accuracy) with and without the measurement"
"$TULA" db export --db measured.db > export.json || fail "tula db export of the measured database"
n=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len([c for c in d["compute"] if c["workload"]=="lenet5@fashion-mnist"]), len(d["runs"]))' export.json)
assert_eq "4 1" "$n" "compute samples and runs of the measured database"
# each sample's start-up: the seconds its warm-up step took beyond a steady one, finite, >= 0
bad=$(python3 -c 'import json, math, sys
d = json.load(open(sys.argv[1]))
for c in d["compute"]:
    s = c.get("startup_seconds")
    if c["workload"] == "lenet5@fashion-mnist" and not (isinstance(s, (int, float)) and math.isfinite(s) and s >= 0):
        print(c["local_batch"], s)' export.json)
[ -z "$bad" ] || fail "compute samples without a start-up (local batch, startup_seconds): $bad"
[ "$(count_lines "$T_OUT" '^tula-train: measured local batch [0-9]+: .*, start-up [0-9.]+ s\)$')" = 4 ] ||
    fail "expected the start-up of the 4 measured local batches" "$(_excerpt "$T_OUT" 30)"

# the second submission's question, answered from what the first job measured
expect_ok "tula predict from the measured database" "$TULA" predict --db measured.db --workload lenet5@fashion-mnist \
    --global-batch 96 --epochs 1 --limit-train 2048 --format kv
assert_match "$T_OUT" '^predicted_seconds=[0-9.]+' "a prediction"

# a budget of 1 ms: the first batch only
expect_ok "run with TULA_PROFILE=0.001" env TULA_PROFILE=0.001 timeout 300 "$TULA_TRAIN" "${small[@]}" --db tiny.db
[ "$(count_lines "$T_OUT" '^tula-train: measured local batch ')" = 1 ] || fail "expected 1 measured batch" "$(_excerpt "$T_OUT" 30)"
assert_contains "$T_OUT" "local batch 32 not measured: it would pass the budget" "the budget is said"

# a bad value: one warning, no measurement, the job trains
expect_ok "run with TULA_PROFILE=soon" env TULA_PROFILE=soon timeout 300 "$TULA_TRAIN" "${small[@]}" --db bad.db
[ "$(count_lines "$T_ERR" "TULA_PROFILE='soon' is not 1, yes, 0, no or seconds")" = 1 ] ||
    fail "expected one warning about TULA_PROFILE" "$(_excerpt "$T_ERR")"
assert_not_contains "$T_OUT" "measuring the step" "a run with a bad TULA_PROFILE"
assert_eq "$plain_acc" "$(sed -n 's/^tula-train: done: .* test_accuracy=\([0-9.]*\) .*/\1/p' <<<"$T_OUT")" \
    "test accuracy with a bad TULA_PROFILE"
note "ok: TULA_PROFILE measures before training, records, and leaves the training as it was"
