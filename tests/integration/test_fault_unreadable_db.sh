#!/bin/bash
# Fault: the system profile database cannot be read. The tests run as root, who can read any
# file whatever its mode, so the database path is made unreadable in ways that hold for root
# too: (1) a directory in its place, (2) a named pipe in its place (opening it to read would
# block). Each time sbatch --tula=auto submits
# the job unchanged with one warning naming the database, no later than 2 s after a plain
# sbatch; the job completes and no node is drained (fault.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
fault_replace "$F_DB"

mkdir "$F_DB" || fail "cannot create the directory $F_DB"
fault_submit "database path is a directory"
fault_warned "database path is a directory" "$F_DB"
rmdir "$F_DB" || fail "cannot remove the directory $F_DB"

# a named pipe: a reader that opened it would block until someone writes
mkfifo "$F_DB" || fail "cannot create the named pipe $F_DB"
fault_submit "database path is a named pipe"
fault_warned "database path is a named pipe" "$F_DB"
note "ok: unreadable database -> job submitted unchanged with one warning"
