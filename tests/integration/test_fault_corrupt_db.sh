#!/bin/bash
# Fault: the system profile database is garbage (not SQLite). sbatch --tula=auto submits the job
# unchanged with one warning naming the database; nothing hangs, no node drained (fault.sh).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
fault_replace "$F_DB"
head -c 65536 /dev/urandom > "$F_DB"
fault_submit "corrupt database"
fault_warned "corrupt database" "$F_DB"
note "ok: corrupt database -> job submitted unchanged with one warning"
