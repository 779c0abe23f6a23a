#!/bin/bash
# test-timeout: 600
# The PyTorch example interrupted once (tula-jobs(7), TIME LIMIT, CHECKPOINT AND REQUEUE): the
# example batch script submitted with --requeue trains 2 epochs of 1,280 examples at batch 64
# (40 steps); once it has taken a few steps, its step gets SIGUSR1 (`scancel --signal=USR1`, as
# --signal=USR1@S would send it before the limit). tula.Requeue finishes the step, saves the
# checkpoint, asks slurmctld to requeue the job and exits 3; the requeued job resumes from the
# checkpoint and ends with the same 40 steps, each once, in one metrics file of two parts (its
# summary gives the training seconds of each); the run is recorded once. SKIP without PyTorch for /usr/bin/python3 ($TULA_PYTHON).
. "$(dirname "$0")/lib.sh"
PY=${TULA_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "no $PY (set TULA_PYTHON)"
"$PY" -c 'import torch' 2>/dev/null || skip "PyTorch is not installed for $PY (scripts/install-deps --torch)"
need_cluster
need_bin "$TULA"
make_workdir

script=$T_WORK/pytorch.sbatch
sed -e "s|--limit-train 6400|--limit-train 1280 --limit-test 500 --data-dir $T_DATA_DIR|" \
    "$REPO/examples/pytorch-ddp.sbatch" > "$script"
grep -q -- '--limit-train 1280 ' "$script" || fail "could not write $script"
export TULA_REPO=$REPO TULA_PYTHON=$PY

submit -N 1 --requeue -o "$T_WORK/%j.out" "$script"
job=$T_JOB out=$T_WORK/$job.out metrics=$T_WORK/tula-metrics-$job.jsonl
on_exit "scancel $job 2>/dev/null"
# SIGUSR1 once the metrics file holds a few steps
waited=0
until [ -f "$metrics" ] && [ "$(grep -c '"type": *"step"' "$metrics")" -ge 3 ]; do
    [ "$waited" -lt 600 ] || fail "job $job wrote no steps in 300 s (state $(job_state "$job"))" "$(cat "$out" 2>/dev/null | tail -n 20)"
    sleep 0.5; waited=$((waited + 1))
done
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job failed"
wait_job "$job" 480
expect_completed "$job" "$out"
output=$(cat "$out")
assert_eq 1 "$(job_field "$job" Restarts)" "Restarts of job $job"
# (scontrol requeue ends the first part's batch script at once: tula.Requeue's lines are its last)
assert_contains "$output" "tula: job $job requeued; it resumes from tula-ckpt-$job.pt" "the first part's line"
assert_eq 1 "$(count_lines "$output" '^pytorch_fmnist: done:')" "done lines of job $job"
assert_eq 1 "$(count_lines "$output" '^tula: recorded run [0-9]+ of torch-fmnist-cnn@fashion-mnist')" "runs recorded by job $job"
check=$("$PY" - "$metrics" <<'PY'
import json, sys
objs = [json.loads(x) for x in open(sys.argv[1])]
heads = [o for o in objs if o["type"] == "run"]
assert len(heads) == 2, "two parts, two headers: %d" % len(heads)
steps = sorted(o["step"] for o in objs if o["type"] == "step")
assert steps == list(range(40)), steps
assert [o["epoch"] for o in objs if o["type"] == "epoch"] == [1, 2]
summary = [o for o in objs if o["type"] == "summary"][-1]
assert summary["parts"] == 2 and len(summary["part_seconds"]) == 2, summary
assert all(x > 0 for x in summary["part_seconds"]), summary
print("ok")
PY
)
assert_eq ok "$check" "the metrics file of job $job"
note "ok: job $job interrupted once, resumed, 40 steps each once, recorded once"
