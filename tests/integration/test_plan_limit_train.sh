#!/bin/bash
# The plan honours the script's `tula-train --limit-train N`: a job training on 6,000 of the
# 60,000 Fashion-MNIST images per epoch is predicted at about a tenth of the full epoch time
# (before, it was predicted as the full 60,000), at the same node count and global batch.
. "$(dirname "$0")/lib.sh"
begin_plan_test
line='mpirun tula-train --model lenet5 --data fashion-mnist --epochs 2'
printf '#!/bin/bash\n%s\n' "$line" > "$T_WORK/full.sbatch"
printf '#!/bin/bash\n%s --limit-train 6000\n' "$line" > "$T_WORK/limited.sbatch"
expect_ok "tula plan (full)" "$TULA" plan --script "$T_WORK/full.sbatch" --nodes 1 --format kv
full=$T_OUT
expect_ok "tula plan (--limit-train 6000)" "$TULA" plan --script "$T_WORK/limited.sbatch" --nodes 1 --format kv
limited=$T_OUT
fs=$(kv_get "$full" predicted_seconds) ls=$(kv_get "$limited" predicted_seconds)
fb=$(kv_get "$full" global_batch) lb=$(kv_get "$limited" global_batch)
note "full: batch $fb, $fs s; limited: batch $lb, $ls s"
assert_number "predicted seconds (full)" "$fs"
assert_number "predicted seconds (limited)" "$ls"
if [ "$fb" = "$lb" ]; then
    # same batch: the step count per epoch is floor(6000 / B) against floor(60000 / B)
    ratio=$(awk -v a="$ls" -v b="$fs" 'BEGIN { printf "%.3f", a / b }')
    awk -v r="$ratio" 'BEGIN { exit !(r > 0.07 && r < 0.13) }' ||
        fail "predicted time with --limit-train 6000 is $ratio of the full one; expected about 0.1" "$(_excerpt "$limited")"
fi
assert_contains "$(kv_get "$limited" reason)" "--limit-train" "the plan's reason names --limit-train"
note "ok: --limit-train 6000 predicted at ${ratio:-?} of the full epoch time"
