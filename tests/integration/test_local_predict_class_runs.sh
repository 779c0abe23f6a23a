#!/usr/bin/env bash
# tula predict --with class-runs (tula(1), docs/models.md "Runs of other workloads on the class"):
# a workload run on one node only, beside another workload whose runs on 1 and 2 nodes measured
# an exchange three times its allreduce profile. By default the other workload's runs change
# nothing; with class-runs the exchange of the first on 2 nodes moves at least half way toward
# three times its profile's, and its 1-node step stays.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
export XDG_DATA_HOME=$T_WORK/xdg TULA_FIT_CACHE=0
local_conf 4

cat >doc.py <<'PY'
import json, sys
step = lambda b: 0.01 + 0.0004 * b                 # w's and v's compute, seconds per step
allreduce = lambda n: 1e-4 + n / 1e9               # the 2-node profile, seconds
workloads = [{"name": w, "model": w.split("@")[0], "dataset": "data", "params": p, "train_examples": 60000,
              "test_examples": 0} for w, p in (("w@data", 1000000), ("v@data", 4000000))]
compute = [{"workload": "w@data", "host": "n1", "local_batch": b, "threads": 1, "seconds_per_iter": step(b),
            "iters": 16, "created": 1700000000.0, "ranks": 1, "ranks_per_node": 1} for b in (16, 32, 64, 128)]
prof = [{"host": "n1", "nodes": 2, "bytes": n, "seconds": allreduce(n), "created": 1700000000.0}
        for n in (1 << 20, 1 << 24)]
runs = []
def run(w, K, b, seconds_per_step):
    B = K * b
    runs.append({"job_id": "r%d" % len(runs), "workload": w, "nodes": K, "ranks_per_node": 1, "global_batch": B,
                 "epochs": 1, "measured_seconds": (60000 // B) * seconds_per_step, "predicted_seconds": 0,
                 "test_accuracy": 0.5, "created": 1700000100.0 + len(runs), "epoch_rows": []})
for b in (32, 64):
    run("w@data", 1, b, step(b))
    run("v@data", 1, b, step(b))
    run("v@data", 2, b, step(b) + 3 * allreduce(16e6))
json.dump({"format": "tula-profiles", "schema_version": 7, "workloads": workloads, "compute": compute,
           "allreduce": prof, "runs": runs}, sys.stdout)
PY
python3 doc.py >doc.json
expect_ok "tula db import" "$TULA" db import --db "$T_WORK/p.db" doc.json

# step NODES [ARGS...]: the predicted step of w@data on NODES nodes at local batch 32, seconds
step() {
    local k=$1
    shift
    "$TULA" predict --conf tula.conf --db "$T_WORK/p.db" --workload w@data --nodes "$k" --global-batch $((32 * k)) \
        --format json "$@" >out.json || fail "tula predict $k $* failed" "$(cat out.json)"
    python3 -c 'import json, sys; print(repr(json.load(open("out.json"))["step"]["seconds"]))'
}

plain=$(step 2)
off=$(step 2 --without class-runs)
on=$(step 2 --with class-runs)
assert_eq "$plain" "$off" "the 2-node step by default and --without class-runs"
one=$(step 1)
assert_eq "$one" "$(step 1 --with class-runs)" "the 1-node step with and without class-runs"
# the exchange (2-node step less the 1-node step) moves from the profile's toward 3 times it:
# at least half way, and not beyond
python3 -c "import sys; r = ($on - $one) / ($plain - $one); sys.exit(0 if 2.0 <= r <= 3.0 else 1)" ||
    fail "--with class-runs: the exchange is not 2 to 3 times the profile's" "one $one default $plain class-runs $on"
out=$("$TULA" predict --conf tula.conf --db "$T_WORK/p.db" --workload w@data --nodes 2 --global-batch 64 \
    --with class-run 2>&1) && fail "tula predict --with class-run succeeded" "$out"
case "$out" in *class-runs*) ;; *) fail "the unknown correction's message does not name class-runs" "$out" ;; esac
note "ok: 2-node step $plain s by default, $on s with class-runs"
