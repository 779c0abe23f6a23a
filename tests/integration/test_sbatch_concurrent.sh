#!/bin/bash
# 50 concurrent `sbatch --tula=auto` (held, then cancelled) while `tula profile compute` keeps
# writing the same system profile database: every submission succeeds, none shows
# `database is locked`, each prints exactly one tula: line, the writer does not fail and its
# rows arrive (the compute rows grow; the exact count is not checked). The writer is
# `tula profile compute`, not trainer jobs.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile
need_sqlite3
db=$TULA_CLUSTER_DIR/system.db
script=$T_WORK/train.sbatch
write_train_script "$script"
table=compute_profile
before=$(sqlite3 "$db" "SELECT count(*) FROM $table") || fail "cannot count $table rows"

# the writer: two profiling runs into the same database while the submissions go on (--force:
# the batch sizes are already profiled, and profile compute skips those otherwise)
( for _ in 1 2; do "$TULA" profile compute --workload "$T_WORKLOAD" --batch-sizes 16,32 --iters 3 --force --db "$db" \
      >> "$T_WORK/writer.out" 2>&1 || echo "writer failed" >> "$T_WORK/writer.out"; done ) &
writer=$!
on_exit "kill $writer 2>/dev/null"
pids=()
for i in $(seq 50); do
    ( sbatch --parsable --hold --tula=auto -o /dev/null "$script" > "$T_WORK/s$i.out" 2> "$T_WORK/s$i.err"
      echo $? > "$T_WORK/s$i.rc" ) &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
wait "$writer"
ok=0
for i in $(seq 50); do
    rc=$(cat "$T_WORK/s$i.rc" 2>/dev/null)
    err=$(cat "$T_WORK/s$i.err")
    [ "$rc" = 0 ] || fail "submission $i exited ${rc:-?}" "$(_excerpt "$err")"
    assert_not_contains "$err" "database is locked" "stderr of submission $i"
    assert_eq 1 "$(count_lines "$err" 'tula:')" "tula: lines of submission $i"
    id=$(tail -n 1 "$T_WORK/s$i.out"); scancel "${id%%;*}" 2>/dev/null
    ok=$((ok + 1))
done
assert_eq 50 "$ok" "submissions that succeeded"
assert_not_contains "$(cat "$T_WORK/writer.out")" "writer failed" "the profiling writer"
after=$(sqlite3 "$db" "SELECT count(*) FROM $table")
[ "$after" -gt "$before" ] || fail "the writer's rows did not arrive ($table: $before before, $after after)"
note "ok: 50 concurrent submissions with a writer: all submitted; $table rows $before -> $after"
