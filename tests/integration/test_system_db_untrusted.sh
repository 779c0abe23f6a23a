#!/bin/bash
# An untrusted system database is not used (security review, finding c). The system profile
# database steers every user's plan (and, through the plan, node counts and time limits); one
# that a group or every user can write is an unprivileged user's way to steer them all. A
# system database not owned by root (or tula.conf's admin_uid) or with group/other write
# permission on the file, its directory, its -wal or -shm must be skipped with one warning.
#
# A copy of the cluster's profiled system database in a directory of its own, a copy of the
# cluster's tula.conf with system_db pointing at it (`tula plan --conf`), and an empty user
# database directory (XDG_DATA_HOME), so that the system database is the only source:
#   1. modes 0644 file / 0755 directory: the plan uses it (status=ok, exit 0, no warning
#      naming it): the copy is good, so the later refusals are the modes';
#   2. file g+w (0664);  3. directory o+w (0757);  4. an empty -wal file g+w (0664):
#      each time exactly one warning naming the database (or its directory, for 3) says
#      "writable" (a `warning=` line of --format kv, or a `tula: warning:` line), and the plan
#      does not use the database: no status=ok (there is no other profile), non-zero exit;
#   5. modes restored (0644, 0755, -wal removed): used again, status=ok, no warning.
# The test runs as root, so the copy is owned by root (the trusted owner).
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA"
need_sqlite3
[ "$(id -u)" = 0 ] || skip "needs root (the database copy must be owned by root to be trusted)"
make_workdir
ensure_profile

dir=$T_WORK/sysdb
db=$dir/profiles.db
conf=$T_WORK/tula.conf
mkdir "$dir" || fail "cannot create $dir"
sqlite3 "$TULA_CLUSTER_DIR/system.db" ".backup '$db'" || fail "cannot copy the system database to $db"
# rollback journal: no -wal/-shm appear by themselves (case 4 makes one on purpose)
sqlite3 "$db" "PRAGMA journal_mode=DELETE" >/dev/null || fail "cannot set the journal mode of $db"
grep -vE '^[[:space:]]*system_db[[:space:]]*=' "$TULA_CONF" > "$conf" || fail "cannot copy $TULA_CONF"
echo "system_db = $db" >> "$conf"
export XDG_DATA_HOME=$T_WORK/empty-xdg
mkdir -p "$XDG_DATA_HOME"

plan() { run_cmd timeout 30 "$TULA" plan --conf "$conf" --workload "$T_WORKLOAD" --format kv; }

# trusted WHAT: the plan uses the database.
trusted() {
    plan
    note "$1: exit $T_RC; $(kv_get "$T_OUT" status); stderr: $T_ERR"
    [ "$T_RC" = 0 ] || fail "$1: tula plan exited $T_RC; expected a plan from $db" "stdout:" "$(_excerpt "$T_OUT")" "stderr:" "$(_excerpt "$T_ERR")"
    assert_eq ok "$(kv_get "$T_OUT" status)" "$1: status of tula plan"
    assert_eq 0 "$(printf '%s\n%s\n' "$T_OUT" "$T_ERR" | grep -c 'writable')" "$1: lines of tula plan's output that say 'writable'"
}

# untrusted WHAT NAMED: one warning naming NAMED says "writable"; the database is not used.
untrusted() {
    local lines
    plan
    note "$1: exit $T_RC; stdout: $(tr '\n' ' ' <<<"$T_OUT"); stderr: $T_ERR"
    crashed "$T_RC" && fail "$1: tula plan crashed or hung (exit $T_RC)" "$(_excerpt "$T_ERR")"
    # --format kv carries warnings as warning= lines on stdout (cli_filter.lua prints them as
    # tula: lines); other formats print tula: lines on stderr: one of them, once, in all.
    lines=$(printf '%s\n%s\n' "$T_OUT" "$T_ERR" | grep -F -- "$2" | grep 'writable')
    assert_eq 1 "$(count_lines "$lines" .)" "$1: lines of tula plan's output (stdout and stderr) naming $2 and saying 'writable'"
    assert_match "$lines" '^(tula: warning: |warning=)' "$1: the warning is a tula: warning line or a kv warning= line"
    assert_ne ok "$(kv_get "$T_OUT" status)" "$1: status of tula plan (the only profiles are in the untrusted database)"
    assert_ne 0 "$T_RC" "$1: exit status of tula plan without a usable profile"
}

chmod 0755 "$dir" && chmod 0644 "$db" || fail "cannot set the modes of $dir, $db"
trusted "0644 database in a 0755 directory"

chmod 0664 "$db" || fail "chmod $db"
untrusted "group-writable database (0664)" "$db"
chmod 0644 "$db"

chmod 0757 "$dir" || fail "chmod $dir"
untrusted "other-writable directory (0757)" "$dir"
chmod 0755 "$dir"

: > "$db-wal" && chmod 0664 "$db-wal" || fail "cannot make $db-wal"
untrusted "group-writable -wal file (0664)" "$db"
rm -f "$db-wal" "$db-shm"

trusted "modes restored (0644 database, 0755 directory, no -wal)"
note "ok: a group-writable database, an other-writable directory and a group-writable -wal are each refused with one warning; restored, the database is used"
