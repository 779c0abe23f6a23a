#!/bin/bash
# Hostile user database, a FIFO (security review, finding a): the user's profile database path
# ($XDG_DATA_HOME/tula/profiles.db) is swapped for a named pipe part of the time. Opening a FIFO
# for reading blocks until a writer comes, so a reader that opens it (tula plan in the
# cli_filter, or the plugin in slurmstepd) would hang the submission or the job's start.
#
# Five `sbatch --tula=auto` submissions in a row of a script that names lenet5 in a tula-train
# line but only prints "started"; before submissions 2 and 4 the database is replaced by a FIFO
# (and stays one until that job has started), before 1, 3 and 5 the real database is back.
# Checks: every sbatch exits 0 within the cli_filter's bound (T.PLAN_TIMEOUT (+ T.KILL_AFTER)
# of the cluster's cli_filter.lua, read from it, + 1 s over a plain sbatch of the same run) and
# prints one or two tula: lines (the result, perhaps a warning about the FIFO); every job starts
# within 15 s of sbatch returning and COMPLETES; afterwards no process is left blocked opening
# the FIFO (wchan fifo_open / wait_for_partner with our XDG_DATA_HOME) or holding it open.
. "$(dirname "$0")/lib.sh"
need_sqlite3
begin_plan_test

# fifo_blocked PATH: "pid cmdline" of every process blocked opening a FIFO whose environment
# has our XDG_DATA_HOME or that holds PATH open.
fifo_blocked() {
    local p w
    for p in /proc/[0-9]*; do
        p=${p#/proc/}
        w=$(cat "/proc/$p/wchan" 2>/dev/null)
        if [ "$w" = fifo_open ] || [ "$w" = wait_for_partner ]; then
            tr '\0' '\n' 2>/dev/null < "/proc/$p/environ" | grep -qxF "XDG_DATA_HOME=$XDG_DATA_HOME" &&
                echo "$p $(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline") (wchan $w)" && continue
        fi
        ls -l "/proc/$p/fd" 2>/dev/null | grep -qF -- "-> $1" && echo "$p $(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline") (holds it open)"
    done
}

export XDG_DATA_HOME=$T_WORK/xdg
udb=$XDG_DATA_HOME/tula/profiles.db
real=$T_WORK/real-profiles.db
mkdir -p "$XDG_DATA_HOME/tula"
sqlite3 "$TULA_CLUSTER_DIR/system.db" ".backup '$real'" || fail "cannot copy the system database to $real"
sqlite3 "$real" "PRAGMA journal_mode=DELETE" >/dev/null || fail "cannot set the journal mode of $real"
# At exit: open a FIFO left there read-write (a blocked opener of either side goes on), then remove it.
on_exit "[ -p '$udb' ] && { exec 9<>'$udb'; rm -f '$udb'; exec 9>&-; }"

script=$T_WORK/instant.sbatch
write_instant_script "$script"
submit_bound_ms "$script"
bound_ms=$T_BOUND_MS

fifos=0
for i in 1 2 3 4 5; do
    rm -f "$udb"
    if [ $((i % 2)) = 0 ]; then
        mkfifo "$udb" || fail "cannot make a FIFO at $udb"
        [ -p "$udb" ] || fail "$udb is not a FIFO after mkfifo"
        kind=FIFO fifos=$((fifos + 1))
    else
        cp "$real" "$udb" || fail "cannot put the real database back at $udb"
        kind=database
    fi
    submit_timed "$script"
    ms=$SUBMIT_MS err=$T_ERR job=$JOB
    note "submission $i ($kind): sbatch took $ms ms; it said: $err"
    [ "$T_RC" = 0 ] || fail "submission $i ($kind at $udb): sbatch --tula=auto exited $T_RC; expected the job submitted" \
        "$(_excerpt "$err")"
    [ "$ms" -le "$bound_ms" ] ||
        fail "submission $i ($kind at $udb): sbatch --tula=auto took $ms ms, over the cli_filter bound" \
            "expected: <= $bound_ms ms (a plain sbatch + the cli_filter bound + 1 s)" \
            "seen: $ms ms"
    n=$(count_lines "$err" '^tula:')
    [ "$n" -ge 1 ] && [ "$n" -le 2 ] ||
        fail "submission $i ($kind): tula: lines on sbatch's stderr" "expected: 1 or 2" "seen: $n" "$(_excerpt "$err")"
    expect_started_and_completed "$job" "submission $i ($kind at $udb)" \
        "job state: $(job_state "$job"); blocked on the FIFO: $(fifo_blocked "$udb" | tr '\n' ';')"
    # the FIFO stayed a FIFO while the job started: nobody replaced or wrote it
    [ "$kind" = database ] || [ -p "$udb" ] || fail "submission $i: $udb is no longer a FIFO"
    blocked=$(fifo_blocked "$udb")
    assert_eq "" "$blocked" "processes blocked on the FIFO $udb after job $job"
done
assert_eq 2 "$fifos" "submissions made with a FIFO as the user database"
note "ok: 5 submissions, 2 with a FIFO as the user database: every sbatch within $bound_ms ms, every job completed, nothing blocked"
