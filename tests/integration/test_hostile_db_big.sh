#!/bin/bash
# Hostile user database, unbounded reads (security review, finding a, second half): a user's
# own profile database (XDG_DATA_HOME) that makes a reader read without end, in two cases:
#   rows:  compute_profile is a view over an endless WITH RECURSIVE that yields plausible
#          lenet5 compute rows without end;
#   value: the lenet5 workload row's `model` text is 500 MiB (hex(zeroblob(250 MiB)): '0'
#          characters; it takes a few seconds to write here, so the full size is kept).
# A reader must bound what it reads (rows, value length, time), or `tula plan` at every
# submission and, before the plugin stopped planning there, slurmstepd, spin or take the
# memory of the value. For each case:
#   - sbatch --tula=auto returns within the cli_filter's bound (T.PLAN_TIMEOUT (+ T.KILL_AFTER)
#     of the cluster's cli_filter.lua, read from it, + 1 s over a plain sbatch of the same run;
#     under the review's 10 s);
#   - the batch script (it names lenet5 in a tula-train line but only prints "started") starts
#     within 15 s of sbatch returning and the job COMPLETES;
#   - `tula plan --workload lenet5@fashion-mnist --format kv --timeout 10` on that database
#     (cluster environment) has a peak resident set (GNU time's "Maximum resident set size")
#     under 200 MiB (the review's bound; the same plan on an intact copy of the database is
#     measured and shown beside it), and it answers (a status= line) before its own --timeout
#     ends it: a read that runs until SIGALRM is not a bounded read.
# Both cases run even when the first fails; the test fails if either does.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA"
need_sqlite3
[ -x /usr/bin/time ] || fail "this test needs GNU time (/usr/bin/time, Debian package time)"
make_workdir
ensure_profile

RSS_LIMIT_KB=$((200 * 1024))
VALUE_BYTES=$((500 * 1024 * 1024))

# new_user_db DIR: a real user database under DIR/tula/profiles.db (a copy of the profiled
# system database: the real schema and rows), rollback journal, path in $UDB.
new_user_db() {
    UDB=$1/tula/profiles.db
    mkdir -p "$1/tula"
    sqlite3 "$TULA_CLUSTER_DIR/system.db" ".backup '$UDB'" || fail "cannot copy the system database to $UDB"
    sqlite3 "$UDB" "PRAGMA journal_mode=DELETE" >/dev/null || fail "cannot set the journal mode of $UDB"
}

# plan_rss WHAT: runs tula plan under GNU time with the current XDG_DATA_HOME; sets PLAN_KB
# (peak RSS, KiB), PLAN_MS, PLAN_OUT, PLAN_ERR.
plan_rss() {
    local t0 tv=$T_WORK/time.$$.txt
    t0=$(now_ms)
    run_cmd timeout -k 5 60 /usr/bin/time -v -o "$tv" "$TULA" plan --workload "$T_WORKLOAD" --format kv --timeout 10
    PLAN_MS=$(( $(now_ms) - t0 ))
    PLAN_OUT=$T_OUT PLAN_ERR=$T_ERR PLAN_RC=$T_RC
    PLAN_KB=$(sed -n 's/^[[:space:]]*Maximum resident set size (kbytes): *//p' "$tv" 2>/dev/null)
    rm -f "$tv"
    assert_int "$1: peak RSS of tula plan (GNU time; tula plan exited $PLAN_RC)" "$PLAN_KB"
}

script=$T_WORK/instant.sbatch
write_instant_script "$script"

# Reference: tula plan on an intact copy.
export XDG_DATA_HOME=$T_WORK/xdg-intact
new_user_db "$XDG_DATA_HOME"
plan_rss "intact user database"
[ "$PLAN_RC" = 0 ] || fail "tula plan on an intact user database exited $PLAN_RC" "$(_excerpt "$PLAN_ERR")"
ref_kb=$PLAN_KB
note "intact user database: tula plan peak RSS $ref_kb KiB, $PLAN_MS ms"
rm -rf "$XDG_DATA_HOME"

# check_case WHAT: the submission, the job and tula plan's memory, for the user database at
# $XDG_DATA_HOME; runs in a subshell (its failure ends only that case).
check_case() {
    local what=$1 tula_ms job out err
    submit_bound_ms "$script"

    submit_timed "$script"
    tula_ms=$SUBMIT_MS err=$T_ERR job=$JOB
    note "$what: sbatch --tula=auto took $tula_ms ms (bound $T_BOUND_MS ms); it said: $err"
    [ "$T_RC" = 0 ] || fail "$what: sbatch --tula=auto exited $T_RC; expected the job submitted" "$(_excerpt "$err")"
    [ "$tula_ms" -le "$T_BOUND_MS" ] && [ "$tula_ms" -lt 10000 ] ||
        fail "$what: sbatch --tula=auto took $tula_ms ms, over the cli_filter bound" \
            "expected: <= $T_BOUND_MS ms (a plain sbatch + the cli_filter bound + 1 s) and < 10 s" \
            "seen: $tula_ms ms"
    assert_not_contains "$err" "database is locked" "$what: sbatch's stderr"

    expect_started_and_completed "$job" "$what" \
        "job state: $(job_state "$job"); slurmstepd of the job: $(cluster_stepds "$job" | tr '\n' ' ')"

    plan_rss "$what"
    note "$what: tula plan exited $PLAN_RC after $PLAN_MS ms, peak RSS $PLAN_KB KiB (intact: $ref_kb KiB);" \
        "$(grep -E '^(status|warning)=' <<<"$PLAN_OUT" | cut -c1-300)" "stderr: $PLAN_ERR"
    [ "$PLAN_KB" -lt "$RSS_LIMIT_KB" ] ||
        fail "$what: peak resident set of tula plan on the hostile user database" \
            "expected: < $RSS_LIMIT_KB KiB (the same plan on an intact copy: $ref_kb KiB)" "seen: $PLAN_KB KiB"
    # --timeout 10: it must end by itself (SIGALRM at the latest), not run until timeout(1)'s 60 s
    [ "$PLAN_RC" != 124 ] && [ "$PLAN_RC" != 137 ] ||
        fail "$what: tula plan --timeout 10 did not end by itself (timeout(1) stopped it after $PLAN_MS ms)"
    # and with an answer (status=ok or status=error), not cut off by SIGALRM (exit 142) mid-read
    grep -q '^status=' <<<"$PLAN_OUT" ||
        fail "$what: tula plan --timeout 10 gave no answer (no status= line; exit $PLAN_RC after $PLAN_MS ms, 142 = its own SIGALRM): the read is not bounded in time" \
            "stdout:" "$(_excerpt "$PLAN_OUT")" "stderr:" "$(_excerpt "$PLAN_ERR")"
    note "$what: ok"
}

failed=()

# Case rows: compute_profile is an endless view of plausible rows.
export XDG_DATA_HOME=$T_WORK/xdg-rows
new_user_db "$XDG_DATA_HOME"
sqlite3 "$UDB" >/dev/null <<'SQL' || fail "cannot make the endless compute_profile view in $UDB"
DROP TABLE compute_profile;
CREATE VIEW compute_profile AS
  WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r)
  SELECT x AS id, 'lenet5@fashion-mnist' AS workload, 'hostile' AS host, 16 << (x % 3) AS local_batch,
         1 AS threads, 0.01 * (1 + x % 3) AS seconds_per_iter, 5 AS iters, 0.0 AS created, 1 AS ranks,
         NULL AS startup_seconds, NULL AS synced_seconds_per_iter
  FROM r;
PRAGMA user_version=5;
SQL
run_cmd timeout 2 sqlite3 "$UDB" "SELECT count(*) FROM compute_profile"
assert_eq 124 "$T_RC" "a 2 s count of the endless compute_profile view (124: still counting when timeout ended it)"
( _T_EXIT_CMDS=""; check_case "endless compute_profile rows" ) || failed+=("endless compute_profile rows")
rm -rf "$XDG_DATA_HOME"

# Case value: a 500 MiB text in the lenet5 workload row.
export XDG_DATA_HOME=$T_WORK/xdg-value
new_user_db "$XDG_DATA_HOME"
t0=$(now_ms)
sqlite3 "$UDB" "UPDATE workload SET model = hex(zeroblob($VALUE_BYTES / 2)) WHERE name = '$T_WORKLOAD'" ||
    fail "cannot write the $VALUE_BYTES-byte value into $UDB"
note "wrote the $VALUE_BYTES-byte model value in $(( $(now_ms) - t0 )) ms"
assert_eq "$VALUE_BYTES" "$(sqlite3 "$UDB" "SELECT length(model) FROM workload WHERE name = '$T_WORKLOAD'")" \
    "length of the model text of $T_WORKLOAD in $UDB"
( _T_EXIT_CMDS=""; check_case "$VALUE_BYTES-byte model value" ) || failed+=("$VALUE_BYTES-byte model value")
rm -rf "$XDG_DATA_HOME"

[ ${#failed[@]} = 0 ] || fail "hostile user database: ${#failed[@]} of 2 cases failed: ${failed[*]} (see above)"
note "ok: endless rows and a $VALUE_BYTES-byte value in the user database: submissions bounded, jobs completed, tula plan's memory bounded"
