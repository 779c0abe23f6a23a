#!/bin/bash
# tula-train's header line states the Local SGD settings (no cluster, one rank, 256 images):
#  1. by default the batch test is norm with EMA weight 0.9 and the growth capped at x2 per
#     averaging round (the default cap; tula-train(1) gives the measurement behind it);
#  2. --max-batch-growth 0 says "growth unlimited", --max-batch-growth 3 "at most x3";
#  3. --batch-test none says the batch is fixed; a run without --local-steps says nothing of it.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
make_workdir
run=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --epochs 1 --limit-train 256 --limit-test 64
     --batch-size 64 --no-db --threads 1)
# header ARGS...: the run's header line (the one naming the optimizer)
header() {
    expect_ok "tula-train $*" "$TULA_TRAIN" "${run[@]}" "$@"
    grep -m 1 '; optimizer ' <<<"$T_OUT"
}
h=$(header --local-steps 2)
assert_contains "$h" "; Local SGD: 2 local steps per averaging round, batch test norm (EMA weight 0.9, growth at most x2 per round)" "the defaults"
assert_contains "$(header --local-steps 2 --max-batch-growth 0)" "growth unlimited)" "no cap"
assert_contains "$(header --local-steps 2 --max-batch-growth 3 --batch-test-beta 0.5)" "(EMA weight 0.5, growth at most x3 per round)" "a cap of 3"
assert_contains "$(header --local-steps 2 --batch-test none)" "batch test none (fixed batch)" "fixed batch"
assert_not_contains "$(header)" "Local SGD" "synchronous SGD"
note "ok"
