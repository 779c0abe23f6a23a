#!/bin/bash
# Faults under `strict` on the plugstack line: a planning error refuses the submission cleanly
# instead of failing open. Through a client configuration whose plugstack line is the cluster's
# plus `strict` (same slurmctld, same cli_filter.lua), with the system profile database
# (1) locked by a writer and (2) replaced by a directory: sbatch --tula=auto exits non-zero, no
# later than 2 s after a plain sbatch (a hang check), with exactly one `tula: error:` line that
# names the database and says the job was not submitted, and no job is created. A plain sbatch
# through the same configuration still works (strict concerns only Tula's submissions).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
need_sqlite3
fault_begin
etc=$(dirname "$SLURM_CONF")
strict=$T_WORK/strict
grep -q '^PlugStackConfig=' "$SLURM_CONF" || fail "no PlugStackConfig in $SLURM_CONF"
fault_client_conf "$strict"
sed -i -e 's/[[:space:]]*$/ strict/' "$strict/plugstack.conf"
grep -q 'tula\.so.* strict$' "$strict/plugstack.conf" || fail "cannot make a strict plugstack line" "$(cat "$etc/plugstack.conf")"
export SLURM_CONF=$strict/slurm.conf
export XDG_DATA_HOME=$T_WORK/empty-xdg
mkdir -p "$XDG_DATA_HOME"

# strict_refused WHAT: the checks above.
strict_refused() {
    local what=$1 t0 plain_ms tula_ms jobs_before jobs_after
    t0=$(_ms)
    run_cmd timeout 30 sbatch --parsable --hold -o /dev/null "$F_SCRIPT"
    plain_ms=$(( $(_ms) - t0 ))
    [ "$T_RC" = 0 ] || fail "$what: plain sbatch through the strict configuration failed (exit $T_RC)" "$(_excerpt "$T_ERR")"
    scancel "${T_OUT%%;*}" 2>/dev/null
    jobs_before=$(squeue -h -o %i | sort)
    t0=$(_ms)
    run_cmd timeout 30 sbatch --parsable --hold --tula=auto --tula-workload="$T_WORKLOAD" -o /dev/null "$F_SCRIPT"
    tula_ms=$(( $(_ms) - t0 ))
    jobs_after=$(squeue -h -o %i | sort)
    note "$what: sbatch --tula=auto exited $T_RC after $tula_ms ms (plain sbatch $plain_ms ms); it said: $T_ERR"
    [ "$T_RC" != 124 ] || fail "$what: sbatch --tula=auto hung (killed after 30 s)"
    [ "$T_RC" != 0 ] || { scancel "${T_OUT%%;*}" 2>/dev/null; fail "$what: strict sbatch --tula=auto submitted job ${T_OUT%%;*}; expected a refusal"; }
    [ $((tula_ms - plain_ms)) -le 2000 ] || fail "$what: the refusal took $tula_ms ms, more than 2 s over plain sbatch ($plain_ms ms)"
    assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "$what: number of 'tula:' lines on sbatch's stderr"
    assert_match "$T_ERR" '^tula: error: .*job not submitted' "$what: the tula: line is a strict refusal"
    assert_contains "$T_ERR" "$F_DB" "$what: the refusal names the database"
    assert_eq "$jobs_before" "$jobs_after" "$what: jobs in the queue before and after the refused submission"
}

# (1) locked by a writer (as test_fault_locked_db.sh)
start_locking_writer "$F_DB" "UPDATE workload SET updated = updated;"
strict_refused "strict, database locked"
assert_contains "$T_ERR" "held by another process" "strict, database locked: the refusal says it was locked"
printf '%s\n' "ROLLBACK;" ".quit" >&7
exec 7>&-
wait "$WRITER_PID"

# (2) a directory in the database's place
fault_replace "$F_DB"
mkdir "$F_DB" || fail "cannot create the directory $F_DB"
strict_refused "strict, database path is a directory"
note "ok: strict -> a locked or unreadable database refuses the submission cleanly"
