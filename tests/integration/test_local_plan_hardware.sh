#!/usr/bin/env bash
# tula plan --hardware (simulation mode): plans etc/hardware-h100-512.json without any profile
# database; the output is labelled simulated in table, kv and json; the json carries every
# candidate field; the deadline/budget policies are named with their argument; bad hardware
# files give one `tula:` line naming the problem and a non-zero status, never a crash.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg  # no profile database anywhere
: >empty.conf
HW=$REPO/etc/hardware-h100-512.json
P=("$TULA" plan --conf empty.conf)

expect_ok "simulated table" "${P[@]}" --hardware "$HW"
assert_contains "$T_OUT" "SIMULATED plan" "the table is labelled"
assert_contains "$T_OUT" "chosen (simulated):" "the choice is labelled"
assert_contains "$T_OUT" "resnet50@imagenet: 90 epochs" "workload and epochs come from the file"
assert_eq "" "$T_ERR" "no warnings without databases"
assert_contains "$T_OUT" "GPU-hours  energy (kWh)" "GPU-hours and energy columns (the file gives 8 GPUs and watts)"
assert_match "$T_OUT" "^chosen \(simulated\): .* GPU-hours, .* kWh, cost " "the choice's GPU-hours and energy"


expect_ok "simulated kv" "${P[@]}" --hardware "$HW" --format kv
assert_eq ok "$(kv_get "$T_OUT" status)" "kv status"
assert_eq 1 "$(kv_get "$T_OUT" simulated)" "kv simulated"
assert_contains "$(kv_get "$T_OUT" hardware)" "cluster h100-512, 512 nodes x 8 devices" "kv hardware"
assert_match "$(kv_get "$T_OUT" summary)" "^simulated: resnet50@imagenet: " "kv summary"
nodes=$(kv_get "$T_OUT" nodes)
assert_int "kv nodes" "$nodes"
[ "$nodes" -ge 1 ] && [ "$nodes" -le 512 ] || fail "chosen $nodes nodes, not in 1..512"
for k in predicted_seconds_upper cost_upper memory_bytes epochs_to_target iter_seconds; do
    assert_number "kv $k" "$(kv_get "$T_OUT" "$k")"
done

expect_ok "simulated json" "${P[@]}" --hardware "$HW" --json
python3 - "$T_OUT" "$HW" <<'PY' || fail "json check failed"
import json, sys
j = json.loads(sys.argv[1])
assert j["status"] == "ok" and j["simulated"] is True, j.get("simulated")
keys = {"nodes", "global_batch", "local_batch", "iter_seconds", "epoch_seconds", "startup_seconds", "total_seconds", "node_hours",
        "cost", "pareto", "total_seconds_upper", "cost_upper", "epochs_to_target", "expected_accuracy",
        "memory_bytes", "chosen"}
for c in j["candidates"]:
    missing = keys - set(c)
    assert not missing, missing
    assert c["memory_bytes"] > 0 and c["local_batch"] * c["nodes"] == c["global_batch"]
assert sum(c["chosen"] for c in j["candidates"]) == 1
assert j["candidates"][j["chosen"]]["pareto"] is True
# GPU-hours and energy from the file's gpus_per_node and watts_per_node, checked by hand.
hw = json.load(open(sys.argv[2]))
assert j["gpus_per_node"] == hw["gpus_per_node"] and j["watts_per_node"] == hw["watts_per_node"]
for c in j["candidates"]:
    nh = c["nodes"] * (c["total_seconds"] + c["evaluation_seconds"]) / 3600  # the job: training and evaluations
    assert abs(c["gpu_hours"] - nh * hw["gpus_per_node"]) <= 1e-9 * max(1, nh * 8), c
    assert abs(c["energy_kwh"] - nh * hw["watts_per_node"] / 1000) <= 1e-9 * max(1, nh * 1e4), c
    assert abs(c["cost"] - nh * hw["price_per_node_hour"]) <= 1e-9 * max(1, nh * 100), c
PY

# Policies with an argument are named with it.
expect_ok "deadline" "${P[@]}" --hardware "$HW" --policy deadline=01:30:00
assert_contains "$T_OUT" "policy deadline (cheapest meeting deadline 01:30:00)" "deadline named"
expect_ok "budget" "${P[@]}" --hardware "$HW" --policy budget=100 --format kv
assert_contains "$(kv_get "$T_OUT" policy_phrase)" "fastest within budget 100" "budget named"
assert_eq 100 "$(kv_get "$T_OUT" budget)" "kv budget"

# Bad files and arguments: a clean error naming the problem.
expect_fail "missing file" "${P[@]}" --hardware "$T_WORK/none.json"
assert_eq 1 "$T_RC" "missing file: exit 1"
assert_contains "$T_ERR" "tula: cannot read the hardware file $T_WORK/none.json" "missing file message"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["network"]["bandwidth"]; j["device"]["tflops"]=1; json.dump(j,open("unknown.json","w"))' "$HW"
expect_fail "unknown key" "${P[@]}" --hardware unknown.json
assert_contains "$T_ERR" "unknown key 'device.tflops'" "unknown key named"
assert_eq 1 "$(count_lines "$T_ERR" '^tula: ')" "one tula: line"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["network"]["bandwidth"]; json.dump(j,open("missing.json","w"))' "$HW"
expect_fail "missing key" "${P[@]}" --hardware missing.json --format kv
assert_eq error "$(kv_get "$T_OUT" status)" "kv status on error"
assert_contains "$(kv_get "$T_OUT" message)" "missing key 'network.bandwidth'" "missing key named"
printf '{"nodes": 4,' >broken.json
expect_fail "malformed JSON" "${P[@]}" --hardware broken.json
assert_contains "$T_ERR" "broken.json: not valid JSON" "malformed JSON named"
expect_fail "workload mismatch" "${P[@]}" --hardware "$HW" --workload lenet5@fashion-mnist
assert_eq 2 "$T_RC" "workload mismatch: usage error"
expect_fail "too many nodes" "${P[@]}" --hardware "$HW" --nodes 1000
assert_contains "$T_ERR" "512 nodes" "--nodes beyond the cluster named"
note "ok"
