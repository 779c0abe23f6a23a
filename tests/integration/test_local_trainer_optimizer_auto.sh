#!/bin/bash
# tula-train --optimizer auto picks plain SGD for global batches up to --sgd-max-batch (default
# 4 x --lr-base-batch) and AGS above, and says so in its header line. The reference is the
# explicit option: an auto run must train exactly as the rule it names (the same per-epoch loss
# and accuracy lines as --optimizer sgd / ags with the noise scale measured every 10 steps),
# whether the batch comes from --batch-size or $TULA_BATCH_SIZE. A bad --sgd-max-batch is
# rejected with a message. No cluster needed.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
make_workdir
small=(--model lenet5 --data fashion-mnist --epochs 1 --limit-train 512 --limit-test 64 --no-db --threads 1 --seed 3)

# The epoch lines without the timing fields (images/s, epoch-time), which differ run to run.
epochs_of() { grep '^epoch ' <<<"$1" | sed -E 's/ +images\/s [0-9.]+//; s/ +epoch-time [0-9.]+s//'; }

expect_ok "auto at batch 64" timeout 120 "$TULA_TRAIN" "${small[@]}" --batch-size 64 --optimizer auto
assert_contains "$T_ERR$T_OUT" "optimizer sgd (auto: global batch 64 <= 256 = 4 x --lr-base-batch)" "auto header at 64"
auto64=$(epochs_of "$T_OUT")
[ -n "$auto64" ] || fail "auto at batch 64 printed no epoch line" "$(_excerpt "$T_OUT")"
expect_ok "sgd at batch 64" timeout 120 "$TULA_TRAIN" "${small[@]}" --batch-size 64 --optimizer sgd --noise-scale-every 10
assert_eq "$(epochs_of "$T_OUT")" "$auto64" "auto at 64 trains as --optimizer sgd"

# 128 > --sgd-max-batch 64: AGS, the batch from the environment as the Slurm plugin passes it.
TULA_BATCH_SIZE=128 expect_ok "auto at batch 128 from TULA_BATCH_SIZE" timeout 120 "$TULA_TRAIN" "${small[@]}" \
    --optimizer auto --sgd-max-batch 64
assert_contains "$T_ERR$T_OUT" "optimizer ags (auto: global batch 128 > 64 --sgd-max-batch)" "auto header at 128"
auto128=$(epochs_of "$T_OUT")
expect_ok "ags at batch 128" timeout 120 "$TULA_TRAIN" "${small[@]}" --batch-size 128 --optimizer ags
assert_eq "$(epochs_of "$T_OUT")" "$auto128" "auto at 128 (> --sgd-max-batch 64) trains as --optimizer ags"
# and the SGD run at 128 differs from it, so the comparison above can tell the two rules apart
expect_ok "sgd at batch 128" timeout 120 "$TULA_TRAIN" "${small[@]}" --batch-size 128 --optimizer sgd --noise-scale-every 10
assert_ne "$(epochs_of "$T_OUT")" "$auto128" "SGD and AGS at 128 give different epoch lines"

expect_fail "--sgd-max-batch 0" timeout 60 "$TULA_TRAIN" "${small[@]}" --optimizer auto --sgd-max-batch 0
assert_contains "$T_ERR" "--sgd-max-batch must be a positive number of examples" "message for --sgd-max-batch 0"
expect_fail "--optimizer bogus" timeout 60 "$TULA_TRAIN" "${small[@]}" --optimizer bogus
assert_contains "$T_ERR" "valid: sgd, ags, lars, lamb, auto" "message for an unknown optimizer"
note "ok: --optimizer auto chooses SGD or AGS by the global batch and trains as the rule it names"
