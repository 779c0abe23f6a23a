#!/bin/bash
# tula-train's --val-split and --target-accuracy from the command line (no cluster needed):
# a run with a validation split prints val-acc on every epoch line and val_accuracy= in the
# done line (and in each epoch record of --metrics), and says how many training examples it
# holds out; --val-split as large as the training set is one clear 'tula-train: ' error with
# exit status 2; a run whose target is the first epoch's own test accuracy (read from a run
# without a target, less half the last printed digit) stops after that epoch and says so
# (stopped_at_target=1, epochs_trained=1), while a target above every epoch's accuracy trains
# all epochs (stopped_at_target=0).
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
make_workdir
small=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --limit-train 1024 --limit-test 256 --no-db
       --batch-size 64 --seed 3 --prefetch off)

# validation split: 256 of the 1,024 held out
expect_ok "run with --val-split 256" timeout 300 "$TULA_TRAIN" "${small[@]}" --epochs 2 --val-split 256 --metrics m.jsonl
assert_contains "$T_OUT" "768 training / 256 test examples" "the header counts the training examples left"
assert_contains "$T_OUT" "256 training examples held out for validation" "the header names the split"
[ "$(count_lines "$T_OUT" '^epoch [0-9]+/2 .* val-acc [0-9.]+')" = 2 ] ||
    fail "expected val-acc on both epoch lines" "$(_excerpt "$T_OUT")"
assert_match "$T_OUT" '^tula-train: done: .* val_accuracy=[0-9.]+' "done line with val_accuracy"
[ "$(grep -c '"type":"epoch".*"val_accuracy":' m.jsonl)" = 2 ] || fail "expected val_accuracy in both epoch records" "$(_excerpt "$(cat m.jsonl)")"

# a split that leaves nothing to train on
run_cmd timeout 120 "$TULA_TRAIN" "${small[@]}" --epochs 1 --val-split 1024
[ "$T_RC" = 2 ] || fail "--val-split 1024 of 1024: exit $T_RC, expected 2" "$(_excerpt "$T_ERR")"
[ "$(count_lines "$T_ERR" '^tula-train: ')" = 1 ] || fail "expected one tula-train: message" "$(_excerpt "$T_ERR")"
assert_contains "$T_ERR" "--val-split" "the message names the option"

# target accuracy: the reference run trains 3 epochs; its first epoch's accuracy is the target
expect_ok "reference run" timeout 300 "$TULA_TRAIN" "${small[@]}" --epochs 3
acc1=$(sed -n 's/^epoch 1\/3 .* test-acc \([0-9.]*\).*/\1/p' <<<"$T_OUT")
assert_number "epoch 1 test accuracy" "$acc1"
# the epoch line rounds to 3 decimals: half a unit below it is at or below the accuracy itself
target=$(awk -v a="$acc1" 'BEGIN { printf "%.4f", a - 0.0005 }')
expect_ok "run with --target-accuracy $target" timeout 300 "$TULA_TRAIN" "${small[@]}" --epochs 3 --target-accuracy "$target"
[ "$(count_lines "$T_OUT" '^epoch [0-9]+/3 ')" = 1 ] || fail "expected 1 epoch before stopping" "$(_excerpt "$T_OUT")"
assert_match "$T_OUT" '^tula-train: test accuracy .* reached the target .* after epoch 1 of 3; stopping' "the stop is said"
assert_match "$T_OUT" '^tula-train: done: .* epochs=3 epochs_trained=1 stopped_at_target=1' "done line of a stopped run"
expect_ok "run with an unreachable target" timeout 300 "$TULA_TRAIN" "${small[@]}" --epochs 3 --target-accuracy 1
assert_match "$T_OUT" '^tula-train: done: .* epochs_trained=3 stopped_at_target=0' "done line of a run that did not stop"
note "ok: --val-split and --target-accuracy"
