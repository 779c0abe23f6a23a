#!/bin/bash
# `tula profile compute --command` with a stub trainer written in shell (tula-jobs(7)): the stub
# reads TULA_PROFILE_BATCHES and writes a header and one "profile" line per local batch to
# TULA_METRICS (its "%r" replaced by the rank). On this node the samples are stored as
# measured (1 rank); with --nodes 2 one Slurm job runs `srun CMD` on 2 nodes and the ranks'
# files are combined at the slowest rank (samples with 2 ranks). A stub that leaves out a batch
# size fails the command and stores nothing.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA"
make_workdir
W=stub-cnn@synthetic
db=$T_WORK/p.db

stub=$T_WORK/stub.sh
cat > "$stub" <<'SH'
#!/bin/sh
# seconds per step: 1 ms per example, +50 % on rank 1 (so that the slowest rank is visible)
set -eu
rank=${SLURM_PROCID:-0}
f=$(printf '%s' "$TULA_METRICS" | sed "s/%r/$rank/g")
printf '{"type":"run","workload":"%s","nodes":1,"ranks":1,"params":1000,"train_examples":6000,"test_examples":1000}\n' \
    "$TULA_WORKLOAD" > "$f"
for b in $(printf '%s' "$TULA_PROFILE_BATCHES" | tr ',' ' '); do
    [ "$b" = "${SKIP_BATCH:-none}" ] && continue
    s=$(awk -v b="$b" -v r="$rank" 'BEGIN { printf "%.6f", b * 0.001 * (r == 1 ? 1.5 : 1) }')
    printf '{"type":"profile","local_batch":%d,"seconds":%s,"steps":7}\n' "$b" "$s" >> "$f"
done
SH

expect_ok "profile --command on this node" "$TULA" profile compute --workload "$W" --batch-sizes 16,32 \
    --rounds 1 --command "sh $stub" --db "$db"
expect_ok "tula db show" "$TULA" db show "$W" --db "$db" --format json
show=$T_OUT
n1=$(python3 -c 'import json,sys; d=json.load(sys.stdin); c=[s for s in d["compute_samples"] if s["ranks"]==1]; print(" ".join("%d:%.1f" % (s["local_batch"], s["seconds_per_iter"]*1000) for s in sorted(c, key=lambda s: s["local_batch"])))' <<<"$show") ||
    fail "cannot read the compute samples" "$(_excerpt "$show")"
assert_eq "16:16.0 32:32.0" "$n1" "one-rank samples (local batch:ms per step) as the stub timed them"

expect_ok "profile --command --nodes 2" "$TULA" profile compute --workload "$W" --batch-sizes 16,32 \
    --rounds 1 --command "sh $stub" --nodes 2 --db "$db" --timeout 120
expect_ok "tula db show" "$TULA" db show "$W" --db "$db" --format json
n2=$(python3 -c 'import json,sys; d=json.load(sys.stdin); c=[s for s in d["compute_samples"] if s["ranks"]==2]; print(" ".join("%d:%.1f" % (s["local_batch"], s["seconds_per_iter"]*1000) for s in sorted(c, key=lambda s: s["local_batch"])))' <<<"$T_OUT")
assert_eq "16:24.0 32:48.0" "$n2" "2-rank samples: the slowest rank's time (rank 1, 1.5 ms per example)"

before=$(python3 -c 'import json,sys; print(len(json.load(sys.stdin)["compute_samples"]))' <<<"$T_OUT")
SKIP_BATCH=32 run_cmd "$TULA" profile compute --workload "$W" --batch-sizes 16,32 --rounds 1 --command "sh $stub" --db "$db"
[ "$T_RC" != 0 ] || fail "a stub without local batch 32 must fail the command"
assert_contains "$T_ERR" "32" "the error names the missing local batch"
expect_ok "tula db show" "$TULA" db show "$W" --db "$db" --format json
after=$(python3 -c 'import json,sys; print(len(json.load(sys.stdin)["compute_samples"]))' <<<"$T_OUT")
assert_eq "$before" "$after" "compute samples after the failed profile (nothing stored)"
note "ok: profile --command stored $n1 (1 rank) and $n2 (2 nodes), and nothing from a stub that left a batch out"
