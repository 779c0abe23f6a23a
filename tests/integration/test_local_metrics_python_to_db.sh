#!/bin/bash
# The two sides of the job contract (tula-jobs(7)) agree: a metrics file written by the Python
# module's tula.Metrics (no torch needed) is recorded by `tula db record --metrics` with the
# values it wrote, including a resumed job's appended header (a run of 2 parts); a file the writer cut short (a
# killed job mid-line) is refused with its line number and nothing is written; and a
# `tula profile compute --command` whose command uses tula.profile() stores its samples.
. "$(dirname "$0")/lib.sh"
PY=${TULA_PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || skip "no $PY (set TULA_PYTHON)"
need_bin "$TULA"
make_workdir
export PYTHONPATH=$REPO/python
unset SLURM_JOB_ID SLURM_PROCID TULA_PREDICTED_SECONDS SLURM_SPANK_TULA_PREDICTED_SECONDS
db=$T_WORK/user.db

expect_ok "write with tula.Metrics" "$PY" - "$T_WORK/run.jsonl" <<'PY'
import sys, tula
path = sys.argv[1]
with tula.Metrics(path, workload="py-cnn@fashion-mnist", nodes=2, ranks=4, global_batch=128, epochs=2,
                  params=5000, train_examples=1280, test_examples=500, dataset_train_examples=60000,
                  dataset_test_examples=10000, optimizer="sgd", predicted_seconds=3.25, job_id="777") as m:
    for s in range(10):
        m.step(s, 0.125, 128)
    m.epoch(1, 1.25, 0.5, train_loss=1.5)
# a resumed job appends its header and continues
with tula.Metrics(path, workload="py-cnn@fashion-mnist", nodes=2, ranks=4, global_batch=128, resume=True,
                  resumed_at_step=10, job_id="777") as m:
    for s in range(10, 20):
        m.step(s, 0.25, 128)
    m.epoch(2, 2.5, 0.75, train_loss=float("nan"))
PY
expect_ok "tula db record" "$TULA" db record --metrics "$T_WORK/run.jsonl" --db "$db"
assert_contains "$T_OUT" "tula: recorded run 1 of py-cnn@fashion-mnist (2 nodes x 2 ranks, global batch 128, 2 epochs, 3.75 s)" \
    "db record's line"
expect_ok "tula explain" "$TULA" explain 777 --db "$db" --format kv
assert_eq "py-cnn@fashion-mnist" "$(kv_get "$T_OUT" workload)" "explain finds the recorded job"
expect_ok "tula db show" "$TULA" db show py-cnn@fashion-mnist --db "$db" --format json
got=$("$PY" -c '
import json, sys
d = json.load(sys.stdin)
r = d["runs"][0]
print(d["train_examples"], r["job_id"], r["epochs"], r["measured_seconds"], r["predicted_seconds"], r["test_accuracy"],
      r["nodes"], r["ranks_per_node"], r["global_batch"], r["parts"], r["part_seconds"])' <<<"$T_OUT") ||
    fail "cannot read db show's JSON" "$(_excerpt "$T_OUT")"
# the data set's size for the workload row; measured 1.25 + 2.5 s; the header's prediction; the last accuracy;
# two parts (the first process and the resumed one), each closed with its summary: the seconds of
# its steps, 10 x 0.125 and 10 x 0.25
assert_eq "60000 777 2 3.75 3.25 0.75 2 2 128 2 [1.25, 2.5]" "$got" "the recorded run and workload row"
expect_ok "tula db show (text)" "$TULA" db show py-cnn@fashion-mnist --db "$db"
assert_contains "$T_OUT" "3.8 s in 2 parts" "db show names the run's parts"

# A job killed while writing a line: refused with the line number, nothing written.
head -c -20 "$T_WORK/run.jsonl" > "$T_WORK/cut.jsonl"
lines=$(wc -l < "$T_WORK/cut.jsonl")
run_cmd "$TULA" db record --metrics "$T_WORK/cut.jsonl" --db "$db" --job 778
[ "$T_RC" = 1 ] || fail "a cut file exits 1 (exit $T_RC)" "$T_ERR"
assert_contains "$T_ERR" "cut.jsonl:$((lines + 1)):" "the message names the cut line"
run_cmd "$TULA" explain 778 --db "$db" --format kv
[ "$T_RC" = 1 ] || fail "nothing of the cut file was recorded (explain 778 exit $T_RC)" "$T_OUT"

# tula.profile() under tula profile compute --command
cmd="$PY -c 'import tula; tula.profile(lambda d: sum(range(d * 100)), lambda b: b, workload=\"py-cnn@fashion-mnist\")'"
expect_ok "profile compute --command with tula.profile" "$TULA" profile compute --workload py-cnn@fashion-mnist \
    --batch-sizes 8,16,32 --rounds 1 --min-seconds 0.05 --command "$cmd" --db "$db"
expect_ok "tula db show" "$TULA" db show py-cnn@fashion-mnist --db "$db" --format json
n=$("$PY" -c 'import json,sys; print(sorted(s["local_batch"] for s in json.load(sys.stdin)["compute_samples"]))' <<<"$T_OUT")
assert_eq "[8, 16, 32]" "$n" "compute samples stored from tula.profile()"
note "ok: tula.Metrics -> tula db record, a cut file refused, tula.profile -> profile compute --command"
