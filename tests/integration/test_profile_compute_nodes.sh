#!/bin/bash
# tula profile compute --nodes K: after the profile on this node, one Slurm job on K nodes in
# which the K ranks time the same batch sizes at once; the samples are recorded with ranks = K
# beside the one-rank ones, the model's concurrency factor at each batch size is the 2-rank
# time over the one-rank fit there (recomputed here from the rows sqlite3 reads), a second
# run skips the node count it already has, and tula db show lists the ranks. The same job also
# times the whole synchronized step (synced_seconds_per_iter, NULL for the one-rank rows); with
# an allreduce profile, tula plan on 2 nodes multiplies the modelled step by the sync factor,
# which at a profiled local batch gives back exactly the synced time of the database row, and
# says so. Runs on the local cluster, into a private database.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
need_sqlite3
command -v jq >/dev/null || fail "jq is not installed (Debian: jq)"
db=$T_WORK/c.db
W=lenet5@fashion-mnist
P=(profile compute --workload "$W" --batch-sizes 8,32 --iters 2 --rounds 1 --data-dir "$T_DATA_DIR" --db "$db")
rows() { sqlite3 "$db" "SELECT count(*) FROM compute_profile WHERE ranks = $1"; }

expect_ok "profile with --nodes 2" "$TULA" "${P[@]}" --nodes 2
assert_eq 2 "$(rows 1)" "one-rank samples (2 batch sizes)"
assert_eq 2 "$(rows 2)" "samples of 2 ranks at once (2 batch sizes)"
assert_match "$T_OUT" '^profile compute: 1/1 2 nodes \.\.\. ' "one progress line for the job"
assert_match "$T_OUT" 'slowest of 2 ranks' "the job's output says whose time was kept"
assert_match "$T_OUT" '2 ranks at once: concurrency factor' "the factors are printed"

# The factor at each batch size: the 2-rank time over the one-rank model's time there (2 batch
# sizes: the linear form t0 + t1 b, no interpolation), the time from the database rows and t0,
# t1 from tula db show --format json.
js=$("$TULA" db show "$W" --db "$db" --format json) || fail "tula db show --format json failed"
t0=$(jq '.compute_model.t0_seconds' <<<"$js")
t1=$(jq '.compute_model.t1_seconds_per_example' <<<"$js")
for b in 8 32; do
    t2=$(sqlite3 "$db" "SELECT seconds_per_iter FROM compute_profile WHERE ranks = 2 AND local_batch = $b")
    want=$(awk -v t="$t2" -v a="$t0" -v c="$t1" -v b="$b" 'BEGIN { printf "%.12g", t / (a + c * b) }')
    got=$(jq --argjson b "$b" '.compute_model.concurrency_factors["2"][] | select(.[0] == $b) | .[1]' <<<"$js")
    [ -n "$got" ] || fail "no concurrency factor at local batch $b in tula db show --format json"
    awk -v a="$got" -v b="$want" 'BEGIN { exit !(a / b > 0.999999 && a / b < 1.000001) }' ||
        fail "concurrency factor at local batch $b: tula says $got, the rows and the fit give $want"
done
assert_eq 4 "$(jq '.compute_samples | length' <<<"$js")" "tula db show lists all four samples"
assert_eq 2 "$(jq '[.compute_samples[] | select(.ranks == 2)] | length' <<<"$js")" "with their ranks"

# the synchronized step: measured by the 2 ranks at each batch size, not by one rank alone
assert_eq 2 "$(sqlite3 "$db" "SELECT count(*) FROM compute_profile WHERE ranks = 2 AND synced_seconds_per_iter > 0")" \
    "synced step time of 2 ranks at both batch sizes"
assert_eq 2 "$(sqlite3 "$db" "SELECT count(*) FROM compute_profile WHERE ranks = 1 AND synced_seconds_per_iter IS NULL")" \
    "no synced time for one rank alone"
assert_match "$T_OUT" 'synchronized step with its allreduce [0-9.]+ ms' "the job prints the synchronized step"
expect_ok "allreduce profile on 2 nodes" "$TULA" profile allreduce --nodes 2 --db "$db"
expect_ok "plan on 2 nodes" "$TULA" plan --workload "$W" --db "$db" --nodes 2 --epochs 1 --format json
plan=$T_OUT
synced32=$(sqlite3 "$db" "SELECT synced_seconds_per_iter FROM compute_profile WHERE ranks = 2 AND local_batch = 32")
iter32=$(jq '.candidates[] | select(.local_batch == 32) | .iter_seconds' <<<"$plan")
[ -n "$iter32" ] || fail "no candidate with local batch 32 in the 2-node plan" "$plan"
awk -v a="$iter32" -v b="$synced32" 'BEGIN { exit !(a / b > 0.999999 && a / b < 1.000001) }' ||
    fail "2 nodes x local batch 32: predicted $iter32 s per step, the synchronized profile measured $synced32 s"
assert_eq true "$(jq '[.candidates[] | .synced_profile] | all' <<<"$plan")" "every 2-node candidate uses the sync factor"
expect_ok "plan on 2 nodes, table" "$TULA" plan --workload "$W" --db "$db" --nodes 2 --epochs 1
assert_match "$T_OUT" 'from the synchronized-step profile of 2 ranks at once' "the why line names the sync factor"

expect_ok "the same profile again" "$TULA" "${P[@]}" --nodes 2
assert_match "$T_OUT" '^profile compute: skipping node count 2, already measured' "the measured node count is named"
assert_eq 0 "$(count_lines "$T_OUT" '^profile compute: [0-9]+/[0-9]+ [0-9]+ nodes')" "no job for it"
assert_eq 2 "$(rows 2)" "samples of 2 ranks unchanged"

expect_fail "--nodes 1" "$TULA" "${P[@]}" --nodes 1
assert_eq 2 "$T_RC" "exit status of a usage error"
assert_contains "$T_ERR" "--nodes: 1 is not in 2..100000" "a node count below 2 is a usage error"
note "ok"
