#!/usr/bin/env bash
# The fits of the runs are made once per evidence (tula(1), TULA_CACHE_DIR): a workload with a
# compute profile, a 2-node allreduce profile and finished runs on 1 and 2 nodes, imported with
# tula db import, is planned and predicted twice. The second time reads its fits from the cache
# directory and writes nothing, and both say exactly what they say without the cache
# (TULA_FIT_CACHE=0) and with a cache directory that cannot be made; one more run makes the
# next plan fit again.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
export XDG_DATA_HOME=$T_WORK/xdg
local_conf 8

# doc.py N > doc.json: the workload, its compute samples, 2-node allreduce samples and N runs
# (1 and 2 nodes, 1 and 2 ranks per node, local batch 32 and 64), steps 20 % to 40 % above the
# profile's.
cat >doc.py <<'PY'
import json, sys
n = int(sys.argv[1])
w = "cnn@data"
step = lambda b: 0.01 + 0.0004 * b
compute = [{"workload": w, "host": "n1", "local_batch": b, "threads": 1, "seconds_per_iter": step(b), "iters": 16,
            "created": 1700000000.0, "ranks": 1, "ranks_per_node": 1} for b in (16, 32, 64, 128)]
allreduce = [{"host": "n1", "nodes": 2, "bytes": m, "seconds": 1e-4 + m / 1e9, "created": 1700000000.0}
             for m in (1 << 20, 1 << 24)]
runs = []
for i in range(n):
    K, R, b = 1 + i % 2, 1 + (i // 2) % 2, (32, 64)[(i // 4) % 2]
    B = K * R * b
    steps = 60000 // B
    runs.append({"job_id": "r%d" % i, "workload": w, "nodes": K, "ranks_per_node": R, "global_batch": B, "epochs": 1,
                 "measured_seconds": steps * step(b) * (1.2 + 0.02 * (i % 11)) + (0.004 * steps if K > 1 else 0),
                 "predicted_seconds": 0, "test_accuracy": 0.5, "created": 1700000100.0 + i, "epoch_rows": []})
json.dump({"format": "tula-profiles", "schema_version": 7,
           "workloads": [{"name": w, "model": "cnn", "dataset": "data", "params": 1000000, "train_examples": 60000,
                          "test_examples": 0}],
           "compute": compute, "allreduce": allreduce, "runs": runs}, sys.stdout)
PY
python3 doc.py 16 >doc.json
expect_ok "tula db import" "$TULA" db import --db "$T_WORK/p.db" doc.json

# plan_and_predict OUT: the plan's and the prediction's JSON, concatenated into OUT.
plan_and_predict() {
    "$TULA" plan --conf tula.conf --db "$T_WORK/p.db" --workload cnn@data --format json >"$1" ||
        fail "tula plan failed" "$(cat "$1")"
    "$TULA" predict --conf tula.conf --db "$T_WORK/p.db" --workload cnn@data --nodes 4 --ranks-per-node 2 \
        --global-batch 512 --format json >>"$1" || fail "tula predict failed" "$(cat "$1")"
}

export TULA_CACHE_DIR=$T_WORK/cache
plan_and_predict first.json
files=$(find cache/fits -name '*.json' | wc -l)
[ "$files" -ge 2 ] || fail "the first plan kept $files fits in cache/fits; expected the overlap and the step model at least"
mode=$(stat -c %a cache/fits)
assert_eq 700 "$mode" "mode of cache/fits"
touch -d '-1 min' marker
find cache/fits -type f -exec touch -d '-2 min' {} +
plan_and_predict second.json
assert_eq "$files" "$(find cache/fits -type f | wc -l)" "files in cache/fits after the second plan"
assert_eq 0 "$(find cache/fits -type f -newer marker | wc -l)" "files the second plan wrote"
cmp -s first.json second.json || fail "the second plan, from the cache, differs from the first" "$(diff first.json second.json | head -20)"

TULA_FIT_CACHE=0 plan_and_predict plain.json
cmp -s first.json plain.json || fail "the plan without the cache differs" "$(diff first.json plain.json | head -20)"
: >not-a-dir
TULA_CACHE_DIR=$T_WORK/not-a-dir plan_and_predict unwritable.json
cmp -s first.json unwritable.json || fail "the plan with a cache directory that cannot be made differs" \
    "$(diff first.json unwritable.json | head -20)"

# one more run: the evidence changed, so the next plan fits again
python3 doc.py 17 >doc17.json
expect_ok "tula db import (17 runs)" "$TULA" db import --db "$T_WORK/p.db" doc17.json
plan_and_predict third.json
[ "$(find cache/fits -type f -newer marker | wc -l)" -ge 1 ] || fail "a plan after a new run wrote no fit"
note "ok"
