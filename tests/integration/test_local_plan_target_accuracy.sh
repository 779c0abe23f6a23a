#!/usr/bin/env bash
# tula plan --target-accuracy A with a run history imported by tula db import: an
# epochs-to-target table drawn here from McCandlish et al.'s E(B) = E_min (1 + B/B_crit) with
# noise becomes runs whose per-epoch test accuracy first reaches A at the table's epoch; the
# runs' workload (resnet50@imagenet) exists only in the hardware file. Each candidate's
# epochs_to_target (json) must match the generating model: within 7 % at the table's batches,
# and within 20 % at 32K and above when only the batches up to 13K were imported. The same for
# a profiled workload (lenet5) without --hardware. Without --target-accuracy, the target is what
# --epochs reach at --batch-size in the history. Bad targets are one usage line.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg
: >empty.conf
HW=$REPO/etc/hardware-h100-512.json
now=$(date +%s)

# table.py WORKLOAD E_MIN B_CRIT MAX_BATCH BATCHES... > export.json: one run per batch (two at
# some), 4 % log-normal noise, seeded; the epochs rounded up as a per-epoch test sees them.
cat >table.py <<'PY'
import json, math, random, sys
wl, e_min, b_crit, max_b = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
batches = [int(b) for b in sys.argv[5:]]
rng = random.Random(20181214)
target = 0.759
runs = []
for i, b in enumerate(batches):
    for k in range(1 if i % 2 else 2):
        hit = math.ceil(e_min * (1 + b / b_crit) * math.exp(rng.gauss(0, 0.04)))
        if b > max_b:
            continue
        acc = [round(target - 0.3 * (hit - e) / hit - 0.001, 6) if e < hit else round(target + 0.0005 * (e - hit), 6)
               for e in range(1, hit + 3)]
        runs.append({"job_id": "t%d-%d" % (b, k), "workload": wl, "nodes": max(1, b // 256), "global_batch": b,
                     "epochs": len(acc), "predicted_seconds": 0, "measured_seconds": 1000.0 + b + k,
                     "test_accuracy": acc[-1], "created": 1700000000 + 10 * i + k, "optimizer": "lars",
                     "epoch_rows": [{"epoch": e + 1, "seconds": None, "train_loss": None, "test_accuracy": a}
                                    for e, a in enumerate(acc)]})
json.dump({"format": "tula-profiles", "schema_version": 7, "runs": runs}, sys.stdout)
PY
BATCHES="1600 2048 3200 4096 6400 8192 12800 16384 32768 49152 65536 68000"

# check.py PLAN_JSON E_MIN B_CRIT MIN_BATCH TOL: every candidate at a batch >= MIN_BATCH has
# epochs_to_target within TOL of E_min (1 + B/B_crit); prints how many were checked.
cat >check.py <<'PY'
import json, sys
j = json.loads(open(sys.argv[1]).read())
e_min, b_crit, lo, tol = float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
assert j["status"] == "ok", j
assert j["target_accuracy"] == 0.759 and j["noise_scale_source"] == "fit", (j["target_accuracy"], j["noise_scale_source"])
assert j["convergence_fit_optimizer"] == "lars" and j["convergence_fit_batches"] >= 2, j["convergence_fit_batches"]
n = 0
for c in j["candidates"]:
    if c["global_batch"] < lo:
        continue
    want = e_min * (1 + c["global_batch"] / b_crit)
    got = c["epochs_to_target"]
    assert abs(got / want - 1) <= tol, (c["global_batch"], got, want)
    assert c["epochs_to_target_low"] <= got <= c["epochs_to_target_high"], c
    n += 1
assert n > 0, "no candidate checked"
print(n)
PY

python3 table.py resnet50@imagenet 30 12000 1000000 $BATCHES >all.json || fail "cannot write the table"
expect_ok "import a history of a hardware-file workload" "$TULA" db import --db all.db all.json
assert_contains "$T_OUT" "0 workloads, 0 compute samples, 0 allreduce samples, 18 runs" "import counts"
expect_ok "plan --hardware --db --target-accuracy" "$TULA" plan --conf empty.conf --hardware "$HW" --db all.db \
    --target-accuracy 0.759 --format json
printf '%s\n' "$T_OUT" >plan-all.json
n=$(python3 check.py plan-all.json 30 12000 1 0.07) || fail "epochs_to_target off the generating model (all batches)"
note "$n candidates within 7 % of E(B)"

python3 table.py resnet50@imagenet 30 12000 13000 $BATCHES >small.json || fail "cannot write the small table"
expect_ok "import batches up to 13K" "$TULA" db import --db small.db small.json
expect_ok "plan from batches up to 13K" "$TULA" plan --conf empty.conf --hardware "$HW" --db small.db \
    --target-accuracy 0.759 --format json
printf '%s\n' "$T_OUT" >plan-small.json
n=$(python3 check.py plan-small.json 30 12000 32000 0.20) || fail "epochs at 32K and above beyond 20 % (fit up to 13K)"
note "$n candidates at 32K and above within 20 %"

expect_ok "table names the target" "$TULA" plan --conf empty.conf --hardware "$HW" --db all.db --target-accuracy 0.759
assert_contains "$T_OUT" "to reach test accuracy 0.759" "table line"
assert_contains "$T_OUT" "fitted to 18 runs at 12 batches (optimizer lars)" "table origin"

# A profiled workload, planned from the databases (no --hardware).
python3 - "$now" >lenet.json <<'PY' || fail "cannot write the lenet5 profile"
import json, sys
w = "lenet5@fashion-mnist"
json.dump({"format": "tula-profiles", "schema_version": 7,
           "workloads": [{"name": w, "model": "lenet5", "dataset": "fashion-mnist", "params": 61706,
                          "train_examples": 60000, "test_examples": 10000}],
           "compute": [{"workload": w, "host": "n1", "local_batch": b, "threads": 1, "seconds_per_iter": t,
                        "iters": 5, "created": int(sys.argv[1])} for b, t in ((16, 0.0038), (64, 0.012), (256, 0.045))]},
          sys.stdout)
PY
expect_ok "import lenet5 profile" "$TULA" db import --db lenet.db lenet.json
python3 table.py lenet5@fashion-mnist 10 400 1000000 32 64 128 256 512 >lenet-runs.json || fail "cannot write lenet5 runs"
expect_ok "import lenet5 runs" "$TULA" db import --db lenet.db lenet-runs.json
expect_ok "plan --db --target-accuracy" "$TULA" plan --conf empty.conf --workload lenet5@fashion-mnist --db lenet.db \
    --target-accuracy 0.759 --max-nodes 1 --format json
printf '%s\n' "$T_OUT" >plan-lenet.json
python3 check.py plan-lenet.json 10 400 1 0.15 >/dev/null || fail "lenet5 epochs_to_target off the generating model"

# Without a target: what --epochs reach at --batch-size in the history is the target, B_crit is
# fitted to it, and that batch keeps the requested epochs.
expect_ok "target from the reference batch" "$TULA" plan --conf empty.conf --workload lenet5@fashion-mnist --db lenet.db \
    --epochs 14 --batch-size 64 --max-nodes 1 --format json
python3 - "$T_OUT" <<'PY' || fail "the derived target's fit"
import json, sys
j = json.loads(sys.argv[1])
assert j["noise_scale_source"] == "fit" and j["target_accuracy"] is not None and j["e_min"] is None, j
assert j["convergence_fit_batches"] == 5, j["convergence_fit_batches"]
at = [c for c in j["candidates"] if c["global_batch"] == 64]
assert at and all(abs(c["epochs_to_target"] - 14) < 1e-9 for c in at), at
big = [c for c in j["candidates"] if c["global_batch"] == 512]
assert big and all(c["epochs_to_target"] > 14 for c in big), big
PY
# No run at the reference batch: the prior (the hardware file's B_noise), no target.
expect_ok "no target" "$TULA" plan --conf empty.conf --hardware "$HW" --db all.db --format json
assert_contains "$T_OUT" '"target_accuracy": null' "no target in the json"
assert_contains "$T_OUT" '"noise_scale_source": "hardware file"' "the prior"
# A bad target is one usage line.
for bad in 0 1.5 -0.2 nan; do
    expect_fail "target $bad" "$TULA" plan --conf empty.conf --hardware "$HW" --target-accuracy "$bad"
    assert_eq 2 "$T_RC" "target $bad: usage error"
    assert_match "$T_ERR" "^tula: " "target $bad: a tula: line"
done
note "ok"
