#!/bin/bash
# scripts/eval (make eval) refuses bad settings before it starts a cluster: an unknown model (the
# reference list is tula-train --list-models), a non-numeric or zero EVAL_EPOCHS, a negative
# EVAL_LIMIT_TRAIN, an EVAL_TARGET outside (0, 1), an empty EVAL_MODELS, an EVAL_TUNE_LR that is
# empty or lists something other than rate multipliers in (0, 16]. Each gives exit status
# 2, exactly one line on stderr starting with `tula: eval: ` that names the setting, and no
# cluster directory. No cluster needed.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
export TMPDIR=$T_WORK   # a cluster, if one were started, would leave tula-cluster.* here
bdir=$(dirname "$(dirname "$TULA")")
models=$("$TULA_TRAIN" --list-models --data fashion-mnist | awk 'NR > 1 { print $1 }')
assert_contains "$models" lenet5 "tula-train --list-models names lenet5"

# refuse WHAT NEEDLE VAR=VALUE...
refuse() {
    local what=$1 needle=$2; shift 2
    run_cmd env TULA_BUILD_DIR="$bdir" EVAL_OUT="$T_WORK/out" "$@" timeout 60 "$REPO/scripts/eval"
    assert_eq 2 "$T_RC" "$what: exit status"
    assert_eq 1 "$(count_lines "$T_ERR" .)" "$what: one line on stderr"
    assert_match "$T_ERR" '^tula: eval: ' "$what: message prefix"
    assert_contains "$T_ERR" "$needle" "$what: the message names the setting"
    [ -z "$(ls -d "$T_WORK"/tula-cluster.* 2>/dev/null)" ] || fail "$what: a cluster directory was created"
    [ ! -e "$T_WORK/out" ] || fail "$what: the output directory was created"
}
refuse "unknown model" "nosuchnet" EVAL_MODELS="lenet5 nosuchnet"
assert_contains "$T_ERR" "$(awk 'NR == 2' <<<"$models")" "the unknown-model message lists tula-train's models"
refuse "empty model list" EVAL_MODELS EVAL_MODELS=" "
refuse "epochs not a number" EVAL_EPOCHS EVAL_EPOCHS=four
refuse "zero epochs" EVAL_EPOCHS EVAL_EPOCHS=0
refuse "negative training subset" EVAL_LIMIT_TRAIN EVAL_LIMIT_TRAIN=-5
refuse "target above 1" EVAL_TARGET EVAL_TARGET=1.5
refuse "target not a number" EVAL_TARGET EVAL_TARGET=high
refuse "rate multiplier not a number" EVAL_TUNE_LR EVAL_TUNE_LR="1 half"
refuse "rate multiplier zero" EVAL_TUNE_LR EVAL_TUNE_LR="0"
refuse "no rate multiplier" EVAL_TUNE_LR EVAL_TUNE_LR=" "
note "ok"
