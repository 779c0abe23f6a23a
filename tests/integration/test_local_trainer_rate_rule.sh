#!/bin/bash
# tula-train --ags-rate-rule (AGS's noise-scale rate rule; no cluster, one rank, 2,048 images,
# 4 epochs of 8 steps at a constant schedule, a noise-scale estimate every 10 steps):
#  1. first: the rate of every epoch after the first estimate is the first estimate's, although
#     the later estimates differ; the header says the rate is held;
#  2. linear (the default): the rate follows the later estimates, so it is not the same in
#     every epoch;
#  3. an unknown rule: exit status 2 and one message naming the valid ones.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
make_workdir
run=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --epochs 4 --limit-train 2048 --limit-test 256
     --batch-size 256 --schedule constant --optimizer ags --no-db --threads 1)
# rates: the last run's epoch lines' "noise-scale N lr R" pairs, one per line
rates() { grep '^epoch ' <<<"$T_OUT" | grep -o 'noise-scale [0-9.]*  lr [0-9.]*'; }
expect_ok "tula-train --ags-rate-rule first" "$TULA_TRAIN" "${run[@]}" --ags-rate-rule first
first=$(rates)
assert_contains "$T_OUT" "then the noise-scale rule (held at the first estimate)" "the header names the rule"
assert_eq 4 "$(count_lines "$first" '^noise-scale')" "every epoch has a noise scale and a rate"
assert_eq 1 "$(awk '{ print $4 }' <<<"$first" | sort -u | wc -l)" "one rate in every epoch (held): $first"
[ "$(awk '{ print $2 }' <<<"$first" | sort -u | wc -l)" -gt 1 ] || fail "the noise-scale estimates did not change, so nothing was held" "$first"
expect_ok "tula-train --ags-rate-rule linear" "$TULA_TRAIN" "${run[@]}" --ags-rate-rule linear
linear=$(rates)
assert_not_contains "$T_OUT" "held at the first estimate" "the default's header"
[ "$(awk '{ print $4 }' <<<"$linear" | sort -u | wc -l)" -gt 1 ] || fail "the linear rule's rate did not follow the estimates" "$linear"
run_cmd "$TULA_TRAIN" "${run[@]}" --ags-rate-rule fancy
assert_eq 2 "$T_RC" "unknown rule: exit status"
assert_match "$T_ERR$T_OUT" "tula-train: unknown --ags-rate-rule 'fancy'; valid: linear, sqrt, first" "unknown rule: the message"
note "ok"
