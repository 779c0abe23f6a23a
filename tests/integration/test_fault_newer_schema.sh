#!/bin/bash
# Fault: the system profile database comes from a newer Tula (PRAGMA user_version above the
# one this build knows). sbatch --tula=auto submits the job unchanged with one warning naming
# the database; nothing hangs, no node drained (fault.sh). The original is restored at exit.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
need_sqlite3
cp "$F_DB" "$T_WORK/copy.db" || fail "cannot copy $F_DB"
v=$(sqlite3 "$T_WORK/copy.db" 'PRAGMA user_version') || fail "cannot read user_version"
assert_int "user_version of the profile database" "$v"
sqlite3 "$T_WORK/copy.db" "PRAGMA journal_mode=DELETE; PRAGMA user_version=$((v + 1000));" >/dev/null ||
    fail "cannot raise user_version"
fault_replace "$F_DB"
mv "$T_WORK/copy.db" "$F_DB"
fault_submit "newer schema"
fault_warned "newer schema" "$F_DB"
note "ok: database from a newer schema -> job submitted unchanged with one warning"
