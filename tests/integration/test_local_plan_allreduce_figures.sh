#!/usr/bin/env bash
# A partition whose class has a compute profile and no allreduce profile across nodes (tula.conf(5),
# docs/models.md "An allreduce from the published figures"): with link_bandwidth in tula.conf,
# `tula predict` on 2 and 4 nodes gives the 1-node step plus the ring's 2 (K-1)/K n / bandwidth
# for the 4 x params gradient bytes n, and warns where the allreduce came from; `tula plan`
# considers several nodes. Without link_bandwidth both stay on one node, with the message to
# profile the allreduce.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
make_workdir
export XDG_DATA_HOME=$T_WORK/xdg TULA_FIT_CACHE=0

cat >doc.py <<'PY'
import json, sys
workloads = [{"name": "w@data", "model": "w", "dataset": "data", "params": 1000000, "train_examples": 60000,
              "test_examples": 0}]
compute = [{"workload": "w@data", "host": "n1", "local_batch": b, "threads": 1, "seconds_per_iter": 0.01 + 0.0004 * b,
            "iters": 16, "created": 1700000000.0, "ranks": 1, "ranks_per_node": 1} for b in (16, 32, 64, 128)]
json.dump({"format": "tula-profiles", "schema_version": 7, "workloads": workloads, "compute": compute,
           "allreduce": [], "runs": []}, sys.stdout)
PY
python3 doc.py >doc.json
expect_ok "tula db import" "$TULA" db import --db "$T_WORK/p.db" doc.json

# conf [LINK_BANDWIDTH]: tula.conf of one partition of 4 nodes, with link_bandwidth when given
conf() {
    printf '%s\n' "system_db = /nonexistent/tula-system.db" "queue_estimate = no" "max_nodes = 4" \
        "[partition p]" "nodes = 4" ${1:+"link_bandwidth = $1"} >tula.conf
}
# predict NODES: tula predict of w@data at local batch 32 on NODES nodes, JSON in out.json
predict() {
    run_cmd "$TULA" predict --conf tula.conf --db "$T_WORK/p.db" --workload w@data --nodes "$1" \
        --global-batch $((32 * $1)) --format json
    printf '%s' "$T_OUT" >out.json
}
step_of() { python3 -c 'import json; print(repr(json.load(open("out.json"))["step"]["seconds"]))'; }

conf 1e9
predict 1
[ "$T_RC" = 0 ] || fail "tula predict on 1 node failed" "$T_ERR"
one=$(step_of)
for k in 2 4; do
    predict "$k"
    [ "$T_RC" = 0 ] || fail "tula predict on $k nodes with link_bandwidth failed" "$T_ERR"
    assert_contains "$T_OUT$T_ERR" "no across-node allreduce profile; the allreduce is taken from tula.conf's link_bandwidth of partition p" \
        "tula predict's warning on $k nodes"
    got=$(step_of)
    python3 -c "import sys; want = $one + 2 * ($k - 1) / $k * 4e6 / 1e9; sys.exit(0 if abs($got - want) <= 1e-9 * want else 1)" ||
        fail "the $k-node step is not the 1-node step plus the ring at link_bandwidth" "1 node $one, $k nodes $got"
done
expect_ok "tula plan" "$TULA" plan --conf tula.conf --db "$T_WORK/p.db" --workload w@data --epochs 1 --format json
most=$(python3 -c 'import json, sys; print(max(c["nodes"] for c in json.load(sys.stdin)["candidates"]))' <<<"$T_OUT")
[ "$most" -ge 2 ] || fail "tula plan with link_bandwidth considers $most node(s) at most"

conf
predict 2
[ "$T_RC" != 0 ] || fail "tula predict on 2 nodes without link_bandwidth or allreduce profile succeeded" "$T_OUT"
assert_contains "$T_ERR" "cannot predict 2 nodes: there is no allreduce profile; run \`tula profile allreduce\` or give the partition's link_bandwidth in tula.conf" \
    "tula predict's message on 2 nodes without link_bandwidth"
expect_ok "tula plan" "$TULA" plan --conf tula.conf --db "$T_WORK/p.db" --workload w@data --epochs 1 --format json
most=$(python3 -c 'import json, sys; print(max(c["nodes"] for c in json.load(sys.stdin)["candidates"]))' <<<"$T_OUT")
assert_eq 1 "$most" "the most nodes tula plan considers without link_bandwidth"
note "ok: the ring at link_bandwidth on 2 and 4 nodes, with its warning; one node without it"
