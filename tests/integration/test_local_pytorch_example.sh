#!/usr/bin/env bash
# examples/pytorch_fmnist.py with two local ranks (torchrun's WORLD_SIZE/RANK, gloo on
# 127.0.0.1): both train, rank 0 writes a metrics file as tula-jobs(7) says (a header with the
# workload and the recipe, one step line per global batch, consecutive epoch lines) and the
# done line; Tula's plan (TULA_BATCH_SIZE, TULA_EPOCHS) is followed; --profile writes profile
# lines for TULA_PROFILE_BATCHES; TULA_PROFILE measures before training without changing the
# training (same loss and accuracy at the same seed). SKIP without PyTorch for the Python it runs.
. "$(dirname "$0")/lib.sh"
PY=${TULA_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "no $PY (set TULA_PYTHON)"
"$PY" -c 'import torch' 2>/dev/null || skip "PyTorch is not installed for $PY (scripts/install-deps --torch)"
[ -f "$T_DATA_DIR/train-images-idx3-ubyte.gz" ] || skip "no Fashion-MNIST in $T_DATA_DIR (apt-get install dataset-fashion-mnist)"
make_workdir
cd "$T_WORK" || fail "cd $T_WORK"
unset SLURM_NTASKS SLURM_PROCID SLURM_JOB_ID SLURM_JOB_NUM_NODES SLURM_STEP_NUM_NODES
ex=$REPO/examples/pytorch_fmnist.py
port=$(( 30000 + $$ % 20000 ))

# Tula's plan: global batch 32 over 2 ranks, 2 epochs; 128 examples: 4 steps an epoch.
for r in 0 1; do
    TULA_BATCH_SIZE=32 TULA_EPOCHS=2 WORLD_SIZE=2 RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        TULA_METRICS=$T_WORK/m.jsonl timeout 240 "$PY" "$ex" --limit-train 128 --limit-test 200 \
        --data-dir "$T_DATA_DIR" >"out.$r" 2>&1 &
done
wait %1; rc0=$?
wait %2; rc1=$?
[ "$rc0" = 0 ] && [ "$rc1" = 0 ] || fail "the two ranks exit 0 (exit $rc0 and $rc1)" "$(cat out.0 out.1)"
assert_match "$(cat out.0)" '^pytorch_fmnist: done: train_seconds=[0-9.]+ test_accuracy=[0-9.]+ global_batch=32 nodes=1 ranks=2 epochs=2$' \
    "rank 0's done line"
assert_eq "" "$(cat out.1)" "rank 1 prints nothing"
check=$("$PY" - "$T_WORK/m.jsonl" <<'PY'
import json, math, sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
assert lines[-1] == b"", "the file ends with a newline"
objs = [json.loads(x) for x in lines[:-1]]
h = objs[0]
assert h["type"] == "run" and h["workload"] == "torch-fmnist-cnn@fashion-mnist", h
assert (h["nodes"], h["ranks"], h["global_batch"], h["epochs"], h["optimizer"]) == (1, 2, 32, 2, "sgd"), h
assert h["train_examples"] == 128 and h["test_examples"] == 200 and h["params"] > 800000, h
steps = [o for o in objs if o["type"] == "step"]
assert [o["step"] for o in steps] == list(range(8)), steps
assert all(o["examples"] == 32 and o["seconds"] > 0 for o in steps), steps
epochs = [o for o in objs if o["type"] == "epoch"]
assert [o["epoch"] for o in epochs] == [1, 2], epochs
assert all(o["seconds"] > 0 and 0 <= o["test_accuracy"] <= 1 and math.isfinite(o["train_loss"]) for o in epochs)
print("ok")
PY
)
assert_eq ok "$check" "metrics file of the 2-rank run"

# --profile: one profile line per local batch of TULA_PROFILE_BATCHES
TULA_PROFILE_BATCHES=4,8 TULA_PROFILE_MIN_SECONDS=0.05 TULA_METRICS=$T_WORK/p.jsonl \
    expect_ok "pytorch_fmnist.py --profile" timeout 120 "$PY" "$ex" --profile --data-dir "$T_DATA_DIR"
check=$("$PY" -c '
import json, sys
objs = [json.loads(x) for x in open(sys.argv[1])]
assert objs[0]["type"] == "run" and objs[0]["workload"] == "torch-fmnist-cnn@fashion-mnist"
assert [(o["type"], o["local_batch"]) for o in objs[1:]] == [("profile", 4), ("profile", 8)], objs
assert all(o["seconds"] > 0 and o["steps"] >= 5 for o in objs[1:])
print("ok")' "$T_WORK/p.jsonl")
assert_eq ok "$check" "profile lines of --profile"

# TULA_PROFILE (a first job that measures itself): one rank, the same seed with and without it:
# the same loss and accuracy; the profile file holds local batches 4, 8, 16 and 32 (b = 16),
# recorded by the tula command on $PATH into the test's own user database
run_one_rank() {
    TULA_BATCH_SIZE=16 TULA_EPOCHS=1 TULA_METRICS=$T_WORK/$1.jsonl XDG_DATA_HOME=$T_WORK/xdg \
        timeout 240 "$PY" "$ex" --limit-train 128 --limit-test 200 --data-dir "$T_DATA_DIR" "${@:2}"
}
expect_ok "one rank without TULA_PROFILE" run_one_rank plain
plain=$(grep '^pytorch_fmnist: epoch 1/1' <<<"$T_OUT" | sed 's/.*s, train loss/train loss/')
TULA_PROFILE=1 expect_ok "one rank with TULA_PROFILE=1" run_one_rank measured
measured=$(grep '^pytorch_fmnist: epoch 1/1' <<<"$T_OUT" | sed 's/.*s, train loss/train loss/')
[ -n "$plain" ] || fail "no epoch line without TULA_PROFILE"
assert_eq "$plain" "$measured" "the epoch's loss and accuracy with and without the measurement (same seed)"
assert_contains "$T_ERR" "tula: measured 4 local batch(es)" "the measurement's line"
assert_contains "$T_ERR" "into $T_WORK/measured.profile.jsonl, recorded; training starts" "the measurement is recorded"
check=$("$PY" -c '
import json, sys
objs = [json.loads(x) for x in open(sys.argv[1])]
assert objs[0]["type"] == "run" and objs[0]["workload"] == "torch-fmnist-cnn@fashion-mnist" and "global_batch" not in objs[0]
assert [o["local_batch"] for o in objs if o["type"] == "profile"] == [4, 8, 16, 32], objs
print("ok")' "$T_WORK/measured.profile.jsonl")
assert_eq ok "$check" "profile lines of the measurement"
