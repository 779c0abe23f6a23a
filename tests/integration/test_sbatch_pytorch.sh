#!/bin/bash
# A PyTorch job under sbatch --tula=auto (tula-jobs(7)): the workload is profiled with
# `tula profile compute --command` running examples/pytorch_fmnist.py --profile; the batch
# script names its workload with a `# tula: workload=...` directive; cli_filter applies the
# planned node count (NumNodes equals `tula plan --format kv`); the example trains with the
# plan's TULA_BATCH_SIZE over DistributedDataParallel (gloo) on every rank of the allocation,
# writes its metrics file, and `tula db record --metrics` records the run, which
# `tula explain JOBID` then shows with the predicted and the measured training time.
# SKIP without PyTorch for /usr/bin/python3 ($TULA_PYTHON).
. "$(dirname "$0")/lib.sh"
PY=${TULA_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "no $PY (set TULA_PYTHON)"
"$PY" -c 'import torch' 2>/dev/null || skip "PyTorch is not installed for $PY (scripts/install-deps --torch)"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile  # the allreduce profile (2 nodes) of the cluster's system database
W=torch-fmnist-cnn@fashion-mnist
sysdb=$TULA_CLUSTER_DIR/system.db

# The compute profile of the PyTorch workload, timed by the example itself.
expect_ok "tula profile compute --command" "$TULA" profile compute --workload "$W" --batch-sizes 16,32,64 \
    --min-seconds 0.3 --command "$PY $REPO/examples/pytorch_fmnist.py --profile --data-dir $T_DATA_DIR" --db "$sysdb"
expect_ok "tula db show" "$TULA" db show "$W" --db "$sysdb"
assert_contains "$T_OUT" "64" "the profile holds local batch 64"

# The example batch script on a small recipe: 1 epoch of 640 examples at batch 64 (a test's
# time), the directive saying so; the rest as shipped.
script=$T_WORK/pytorch.sbatch
sed -e 's/^# tula: workload=.*/# tula: workload=torch-fmnist-cnn@fashion-mnist epochs=1 batch=64 limit_train=640/' \
    -e "s|--limit-train 6400|--limit-train 640 --limit-test 500 --data-dir $T_DATA_DIR|" \
    "$REPO/examples/pytorch-ddp.sbatch" > "$script"
grep -q 'limit_train=640$' "$script" && grep -q -- '--limit-train 640 ' "$script" || fail "could not write $script"
export TULA_REPO=$REPO TULA_PYTHON=$PY

expect_ok "tula plan" "$TULA" plan --script "$script" --format kv
plan=$T_OUT
assert_eq ok "$(kv_get "$plan" status)" "tula plan status"
assert_eq "$W" "$(kv_get "$plan" workload)" "the directive names the workload"
p_nodes=$(kv_get "$plan" nodes)
assert_int "planned nodes" "$p_nodes"

submit --tula=auto -o "$T_WORK/%j.out" "$script"
job=$T_JOB out=$T_WORK/$job.out
assert_eq "$p_nodes" "$(job_nodes "$job")" "NumNodes of job $job vs the plan"
wait_job "$job" 400
expect_completed "$job" "$out"
output=$(cat "$out")
assert_match "$output" '^pytorch_fmnist: done: train_seconds=[0-9.]+ test_accuracy=[0-9.]+ ' "the example's done line"
assert_match "$output" "^tula: recorded run [0-9]+ of $W" "tula db record's line"

expect_ok "tula explain" "$TULA" explain "$job" --format kv
assert_eq "$W" "$(kv_get "$T_OUT" workload)" "explain: workload"
assert_eq "$p_nodes" "$(kv_get "$T_OUT" nodes)" "explain: nodes of the recorded run"
assert_number "explain: measured seconds" "$(kv_get "$T_OUT" measured_seconds)"
assert_number "explain: predicted seconds" "$(kv_get "$T_OUT" predicted_seconds)"
note "ok: job $job ($W) ran on $p_nodes node(s), recorded: $(kv_get "$T_OUT" predicted_seconds) s predicted, $(kv_get "$T_OUT" measured_seconds) s measured"
