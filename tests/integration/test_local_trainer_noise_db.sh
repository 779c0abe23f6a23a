#!/bin/bash
# tula-train records its measured gradient noise scale in the run row of the profile database,
# and `tula plan` then uses it as B_noise. No cluster needed; small CPU runs (2,048 images).
#   1. lenet5, 1 epoch of 32 steps at global batch 64, --noise-scale-every 2: the run row has
#      noise_observations = 16 (steps 0, 2, ..., 30: counted here from the step count) and a
#      finite noise_scale > 0 of the same order as the B_simple the --metrics file logged for
#      the epoch (the final EMA; the database holds the median over the epoch);
#      The workload row has lenet5's activation size per example, 15,386 floats (counted here
#      from its layer shapes: input, every layer's output);
#      the run row's optimizer is sgd (the default);
#   2. the same with --noise-scale-every 0 and --optimizer auto: noise_scale NULL,
#      noise_observations 0, optimizer sgd (what auto resolves to at batch 64);
#   3. after `tula profile compute`, `tula plan --json` reports noise_scale_source "measured",
#      noise_scale_runs 1 and noise_scale equal to the stored value, and the table says
#      "measured in 1 run".
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN" "$TULA"
need_sqlite3
make_workdir
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -r "$T_DATA_DIR/$f" ] || fail "missing $T_DATA_DIR/$f (apt-get install dataset-fashion-mnist)"
done
db=$T_WORK/p.db
small=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --epochs 1 --limit-train 2048 --limit-test 256
    --batch-size 64 --threads 1 --db "$db")

expect_ok "training with --noise-scale-every 2" timeout 240 "$TULA_TRAIN" "${small[@]}" --noise-scale-every 2 \
    --metrics "$T_WORK/m.jsonl"
assert_match "$T_OUT" '^tula-train: noise scale B_simple' "the noise-scale line"
assert_match "$T_OUT" '^tula: recorded run [0-9]+ of lenet5@fashion-mnist' "tula db record's line"
row=$(sqlite3 "$db" "SELECT typeof(noise_scale), noise_scale, noise_observations FROM run ORDER BY id DESC LIMIT 1")
IFS='|' read -r type ns obs <<<"$row"
steps=$((2048 / 64))
assert_eq $(((steps + 1) / 2)) "$obs" "noise_observations (steps 0, 2, ... of $steps)"
assert_eq real "$type" "type of the stored noise scale"
awk -v v="$ns" 'BEGIN { exit !(v > 0 && v < 1e12) }' || fail "stored noise scale is not a finite number > 0: '$ns'"
logged=$(python3 -c '
import json, sys
print([o for o in map(json.loads, open(sys.argv[1])) if o.get("type") == "epoch"][-1]["noise_scale"])' "$T_WORK/m.jsonl")
assert_number "noise_scale of the metrics file's epoch line" "$logged"
awk -v a="$ns" -v b="$logged" 'BEGIN { exit !(b > 0 && a / b > 0.1 && a / b < 10) }' ||
    fail "stored noise scale $ns is not within a factor 10 of the logged epoch value $logged"

assert_eq $((784 + 2 * 6 * 28 * 28 + 6 * 14 * 14 + 2 * 16 * 10 * 10 + 16 * 5 * 5 + 2 * 120 + 2 * 84 + 10)) \
    "$(sqlite3 "$db" "SELECT activation_floats FROM workload WHERE model = 'lenet5'")" "activation floats per example"

assert_eq sgd "$(sqlite3 "$db" "SELECT optimizer FROM run ORDER BY id DESC LIMIT 1")" "the optimizer of the run (default sgd)"

expect_ok "training with --noise-scale-every 0" timeout 240 "$TULA_TRAIN" "${small[@]}" --noise-scale-every 0 --optimizer auto
assert_eq "null|0" "$(sqlite3 "$db" "SELECT coalesce(noise_scale, 'null'), noise_observations FROM run ORDER BY id DESC LIMIT 1")" \
    "run without noise estimation"
assert_eq sgd "$(sqlite3 "$db" "SELECT optimizer FROM run ORDER BY id DESC LIMIT 1")" \
    "the optimizer --optimizer auto resolved to at batch 64 (sgd up to 4 x --lr-base-batch)"

expect_ok "profile compute" timeout 240 "$TULA" profile compute --workload "$T_WORKLOAD" --batch-sizes 16,32,64 --iters 3 \
    --data-dir "$T_DATA_DIR" --db "$db"
printf 'global_batches = 16,32,64,128\nmax_nodes = 1\nnoise_scale = 4096\n' >"$T_WORK/tula.conf"
expect_ok "plan --json" "$TULA" plan --conf "$T_WORK/tula.conf" --workload "$T_WORKLOAD" --epochs 2 --db "$db" --json
json=$T_OUT
check=$(cat <<'PY'
import json, sys
j = json.load(sys.stdin)
stored = float(sys.argv[1])
assert j["noise_scale_source"] == "measured", j["noise_scale_source"]
assert j["noise_scale_runs"] == 1, j["noise_scale_runs"]
assert abs(j["noise_scale"] - stored) <= 1e-9 * stored, (j["noise_scale"], stored)
bn, ref = j["noise_scale"], j["reference_batch"]
for c in j["candidates"]:  # E(B) = E_min (1 + B/B_noise), McCandlish et al. 2018
    want = 2 * (1 + c["global_batch"] / bn) / (1 + ref / bn)
    assert abs(c["epochs_to_target"] - want) <= 1e-9 * want, (c, want)
PY
)
python3 -c "$check" "$ns" <<<"$json" || fail "tula plan --json does not report the measured noise scale" "$(_excerpt "$json" 40)"
expect_ok "plan (table)" "$TULA" plan --conf "$T_WORK/tula.conf" --workload "$T_WORKLOAD" --epochs 2 --db "$db"
assert_match "$T_OUT" '^noise scale: B_noise [0-9.]+ examples \(measured in 1 run\)' "the table names the measured B_noise"
exit 0
