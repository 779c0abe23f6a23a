#!/bin/bash
# Fault: another process holds the system profile database with a writer's exclusive lock for
# 10 s (sqlite3 in exclusive locking mode inside BEGIN EXCLUSIVE with a pending insert, so that
# no reader can get in, not even in WAL mode). sbatch --tula=auto submits the job unchanged
# with one warning naming the database, no later than 2 s after a plain sbatch (the read-only
# opens of one `tula plan` share one lock-wait budget, 1 s by default, instead of waiting once
# per open); the writer's row is neither read nor lost (fault.sh has the common checks).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
need_sqlite3
fault_begin
before=$(sqlite3 "$F_DB" "SELECT count(*) FROM allreduce_profile") || fail "cannot count the rows of $F_DB"
assert_int "allreduce rows before" "$before"

# The writer: takes the lock, inserts one row, holds it for 10 s, then commits.
locked_at=$(_ms)
start_locking_writer "$F_DB" \
    "INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created) VALUES('locked-db-test', 2, 4, 0.001, 0);"
# A reader that does not wait must be refused now: the lock is real.
run_cmd sqlite3 "$F_DB" "SELECT count(*) FROM allreduce_profile"
[ "$T_RC" != 0 ] || fail "a reader could still read $F_DB: the writer's lock does not hold it"

fault_submit "database locked by a writer"
kill -0 "$WRITER_PID" 2>/dev/null || fail "the writer ended early" "$(_excerpt "$(cat "$T_WORK/writer.out")")"
assert_match "$F_ERR" '^tula: warning: .*job submitted unchanged' "locked database: the tula: line is a fail-open warning"
assert_contains "$F_ERR" "$F_DB" "locked database: the warning names the database"
assert_contains "$F_ERR" "held by another process" "locked database: the warning says it was locked"

# The writer commits after its 10 s: its row is there, nothing was lost, the database is sound.
left=$(( 10000 - ($(_ms) - locked_at) ))
[ "$left" -le 0 ] || sleep "$(awk -v l="$left" 'BEGIN {printf "%.3f", l / 1000}')"
printf '%s\n' "COMMIT;" ".quit" >&7
exec 7>&-
wait "$WRITER_PID" || fail "the writer failed to commit" "$(_excerpt "$(cat "$T_WORK/writer.out")")"
assert_eq "$((before + 1))" "$(sqlite3 "$F_DB" "SELECT count(*) FROM allreduce_profile")" "allreduce rows after the writer committed"
assert_eq ok "$(sqlite3 "$F_DB" "PRAGMA integrity_check")" "integrity of $F_DB after the lock"
sqlite3 "$F_DB" "DELETE FROM allreduce_profile WHERE host = 'locked-db-test'" || fail "cannot remove the test row"
note "ok: database locked for 10 s -> job submitted unchanged with one warning"
