#!/usr/bin/env bash
# tula plan --hardware with a file of several partitions (etc/hardware-site-h100-a100.json: H100
# and A100 nodes, 8 GPUs each, different prices and link rates): planned across both without a
# profile database, labelled SIMULATED; the table has a partition column; kv and JSON name the
# chosen partition, its ranks and GPUs per node; every candidate's cost is at its own
# partition's price (checked from the file by hand); each partition's candidates equal those of
# a one-partition file cut from it; --partition plans only the partitions it names, and one the
# file lacks is refused; --ranks-per-node R plans R GPUs per node, as a file whose gpus_per_node is
# R does, and more than the file's GPUs per node is refused; bad partition lists give one `tula:`
# line naming the key.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg  # no profile database anywhere
: >empty.conf
HW=$REPO/etc/hardware-site-h100-a100.json
P=("$TULA" plan --conf empty.conf)

expect_ok "table" "${P[@]}" --hardware "$HW"
assert_contains "$T_OUT" "SIMULATED plan" "the table is labelled"
assert_contains "$T_OUT" "partitions h100 1024 nodes x 8 devices, a100 1024 nodes x 8 devices" "both partitions named"
assert_match "$T_OUT" "partition +ranks/node +nodes" "partition column"
assert_match "$T_OUT" "^chosen \(simulated\): [0-9]+ nodes? of (h100|a100) x global batch" "the choice names its partition"
assert_eq "" "$T_ERR" "no warnings without databases"

expect_ok "kv" "${P[@]}" --hardware "$HW" --format kv
assert_eq 1 "$(kv_get "$T_OUT" simulated)" "kv simulated"
part=$(kv_get "$T_OUT" partition)
case "$part" in h100|a100) ;; *) fail "kv partition '$part' is not h100 or a100" ;; esac
assert_eq 8 "$(kv_get "$T_OUT" gpus_per_node)" "kv gpus_per_node"
assert_int "kv ranks_per_node" "$(kv_get "$T_OUT" ranks_per_node)"

expect_ok "json" "${P[@]}" --hardware "$HW" --json
printf '%s' "$T_OUT" >site.json
# each partition alone, as a one-partition hardware file cut from the site's
python3 - "$HW" <<'PY' || fail "cutting the partitions failed"
import json, sys
site = json.load(open(sys.argv[1]))
for p in site["partitions"]:
    one = {k: v for k, v in site.items() if k != "partitions"}
    one.update({k: v for k, v in p.items() if k != "name"})
    json.dump(one, open(p["name"] + ".json", "w"))
PY
for p in h100 a100; do
    expect_ok "$p alone" "${P[@]}" --hardware "$p.json" --json
    printf '%s' "$T_OUT" >"$p-alone.json"
done
python3 - "$HW" <<'PY' || fail "json check failed"
import json, sys
hw = json.load(open(sys.argv[1]))
parts = {p["name"]: p for p in hw["partitions"]}
j = json.load(open("site.json"))
assert j["status"] == "ok" and j["simulated"] is True
seen = set()
for c in j["candidates"]:
    p = parts[c["partition"]]
    seen.add(c["partition"])
    assert c["gpus_per_node"] == p["gpus_per_node"] and c["nodes"] <= p["nodes"], c
    nh = c["nodes"] * (c["total_seconds"] + c["evaluation_seconds"]) / 3600  # the job: training and evaluations
    assert abs(c["cost"] - nh * p["price_per_node_hour"]) <= 1e-9 * max(1, c["cost"]), c
    assert abs(c["energy_kwh"] - nh * p["watts_per_node"] / 1000) <= 1e-9 * max(1, c["energy_kwh"]), c
assert seen == set(parts), seen
assert sum(c["chosen"] for c in j["candidates"]) == 1
ch = j["candidates"][j["chosen"]]
assert ch["pareto"] is True
# the chosen one is not dominated by any candidate of either partition
for c in j["candidates"]:
    assert not (c["time_to_target_seconds"] < ch["time_to_target_seconds"] and c["cost_to_target"] < ch["cost_to_target"]), c
# every partition's candidates are those of its one-partition file
for name in parts:
    alone = {(c["nodes"], c["global_batch"]): c for c in json.load(open(name + "-alone.json"))["candidates"]}
    mine = {(c["nodes"], c["global_batch"]): c for c in j["candidates"] if c["partition"] == name}
    assert set(alone) == set(mine), (name, len(alone), len(mine))
    for k, c in mine.items():
        assert abs(c["total_seconds"] - alone[k]["total_seconds"]) <= 1e-9 * c["total_seconds"], (name, k)
PY

# --partition plans only the partitions it names (the faster h100 is not chosen when only a100 is
# asked for); a name the file lacks, or --ranks-per-node, is refused with one line.
for p in a100 h100; do
    expect_ok "--partition $p" "${P[@]}" --hardware "$HW" --partition "$p" --json
    # the plan on standard input: its JSON is longer than one argument may be (128 KiB)
    python3 -c 'import json,sys; j=json.load(sys.stdin); assert {c["partition"] for c in j["candidates"]} == {sys.argv[1]}, sys.argv[1]' \
        "$p" <<<"$T_OUT" || fail "--partition $p: candidates of another partition"
done
expect_fail "--partition x100" "${P[@]}" --hardware "$HW" --partition x100
assert_contains "$T_ERR" "has no such partition (it has: h100, a100)" "the file's partitions listed"
assert_eq 1 "$(count_lines "$T_ERR" '^tula: ')" "one tula: line"
expect_ok "--ranks-per-node 4" "${P[@]}" --hardware "$HW" --partition a100 --ranks-per-node 4 --json
echo "$T_OUT" >rpn4.json
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["partitions"]=[dict(p, gpus_per_node=4) for p in j["partitions"] if p["name"]=="a100"]; json.dump(j,open("a100x4.json","w"))' "$HW"
expect_ok "a100 with 4 GPUs per node" "${P[@]}" --hardware a100x4.json --json
python3 - rpn4.json "$T_OUT" <<'PY' || fail "--ranks-per-node 4 differs from gpus_per_node 4"
import json, sys
a, b = json.load(open(sys.argv[1])), json.loads(sys.argv[2])
key = lambda c: (c["nodes"], c["global_batch"])
ca, cb = {key(c): c for c in a["candidates"]}, {key(c): c for c in b["candidates"]}
assert ca.keys() == cb.keys() and len(ca) > 10, (len(ca), len(cb))
for k in ca:
    for f in ("total_seconds", "cost", "iter_seconds", "gpus_per_node", "memory_bytes"):
        assert abs(ca[k][f] - cb[k][f]) <= 1e-9 * max(1.0, abs(cb[k][f])), (k, f, ca[k][f], cb[k][f])
assert all(c["gpus_per_node"] == 4 for c in a["candidates"])
PY
expect_fail "--ranks-per-node 9" "${P[@]}" --hardware "$HW" --ranks-per-node 9
assert_contains "$T_ERR" "--ranks-per-node 9: the nodes of partition h100" "more ranks than GPUs refused"
assert_eq 1 "$(count_lines "$T_ERR" '^tula: ')" "one tula: line"

# Bad partition lists: one clean message naming the problem.
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["nodes"]=4; json.dump(j,open("top.json","w"))' "$HW"
expect_fail "node key at the top" "${P[@]}" --hardware top.json
assert_contains "$T_ERR" "'nodes' is given at the top level next to 'partitions'" "top-level node key named"
assert_eq 1 "$(count_lines "$T_ERR" '^tula: ')" "one tula: line"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); del j["partitions"][1]["device"]["peak_flops"]; json.dump(j,open("nopeak.json","w"))' "$HW"
expect_fail "missing key in a partition" "${P[@]}" --hardware nopeak.json
assert_contains "$T_ERR" "missing key 'partitions[1].device.peak_flops'" "partition key named"
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); j["partitions"][1]["name"]="h100"; json.dump(j,open("dup.json","w"))' "$HW"
expect_fail "a name twice" "${P[@]}" --hardware dup.json
assert_contains "$T_ERR" "partition 'h100' is described twice" "duplicate named"
note "ok"
