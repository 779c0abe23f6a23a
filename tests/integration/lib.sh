# shellcheck shell=bash disable=SC2034
# Helpers for the integration tests (tests/integration/test_*.sh), sourced by each test:
#
#     . "$(dirname "$0")/lib.sh"
#
# A test is a bash script that exits 0 when it passes (77, by skip(): it cannot run here).
# tests/run runs the test_local_*.sh ones without a cluster and every other test_*.sh inside a
# local Slurm cluster started by scripts/tula-cluster (SLURM_CONF, TULA_CONF, XDG_DATA_HOME,
# TULA_CLUSTER_DIR and PATH set from the cluster's env file). A line "# test-timeout: SECONDS" in
# a test's header raises its time limit; "# test-cluster: own" runs it in a second cluster beside
# the first (long scenarios that mostly wait); "# test-alone" runs it before anything runs side
# by side (a test that rebuilds the programs the others run). Run one by hand with
#
#     scripts/tula-cluster run -- tests/integration/test_sbatch_off.sh
#
# The assertions print what was expected and what was seen, then exit 1.
set -uo pipefail

T_NAME=$(basename "$0" .sh)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TULA=${TULA:-$REPO/build/bin/tula}
TULA_TRAIN=${TULA_TRAIN:-$REPO/build/bin/tula-train}
# absolute, since tests cd into their work directory
case "$TULA" in /*) ;; *) TULA=$PWD/$TULA ;; esac
case "$TULA_TRAIN" in /*) ;; *) TULA_TRAIN=$PWD/$TULA_TRAIN ;; esac
# The workload every cluster test profiles and trains: small and fast.
T_WORKLOAD=lenet5@fashion-mnist
T_DATA_DIR=${TULA_TEST_DATA_DIR:-/usr/share/datasets/fashion-mnist}
# tula-train's arguments of a job longer than one 2-minute part, at 30 epochs (T_HOLE_TRAIN and
# long_train_args change the epochs): one rank and one thread, so that a run in parts ends with
# the same test accuracy as the same run whole. An epoch (200 steps and 512 test examples) takes
# about 2.4 times the testbed speed probe's training (100 steps, tests/run), so about 5.6 s times
# TULA_TEST_SPEED on a testbed node.
T_LONG_TRAIN="--model lenet5 --data fashion-mnist --epochs 30 --limit-train 12800 --limit-test 512 --batch-size 64 --threads 1 --seed 7"
# The backfill-hole scenario's job (test_sbatch_hole): a sixth of T_LONG_TRAIN, well under
# a minute on a node, so that its plan gets the shortest --time-min (its limit's half, 2
# minutes) and the hole and the wait behind the reservation are as short as Slurm allows; the
# job ends within the hole (a slow node runs it in two parts, which the test accepts too).
T_HOLE_TRAIN=${T_LONG_TRAIN/--epochs 30/--epochs 5}
# long_train_epochs SECONDS: the fewest epochs of T_LONG_TRAIN that train at least SECONDS on a
# testbed node of this run's speed (5.6 s x TULA_TEST_SPEED an epoch, see above; the speed is
# at least 1, so a faster machine trains at least as long as the reference one would).
long_train_epochs() {
    awk -v s="$1" -v f="${TULA_TEST_SPEED:-1}" 'BEGIN { e = s / (5.6 * f); n = int(e); if (n < e) n++; if (n < 1) n = 1; printf "%d", n }'
}
# long_train_args SECONDS: T_LONG_TRAIN with long_train_epochs SECONDS epochs.
long_train_args() { echo "${T_LONG_TRAIN/--epochs 30/--epochs $(long_train_epochs "$1")}"; }

note() { printf '# %s\n' "$*"; }
# scaled SECONDS: a bound of the test in seconds times the testbed's measured speed in this run
# (tests/run's testbed_speed, TULA_TEST_SPEED; 1 when not measured), rounded.
scaled() { awk -v l="$1" -v f="${TULA_TEST_SPEED:-1}" 'BEGIN { printf "%d", l * f + 0.5 }'; }
# report LINE...: a note that tests/run shows under the test's PASS line too (what a scenario
# measured: its parts, its times against the plan).
report() { printf '# report: %s\n' "$*"; }

# skip WHY: this machine cannot run the test (a kernel feature or a privilege it needs is not
# there); exits 77, which tests/run reports as SKIP with WHY and counts neither passed nor failed.
skip() {
    printf 'SKIP %s: %s\n' "$T_NAME" "$1"
    exit 77
}

fail() {
    printf 'FAIL %s: %s\n' "$T_NAME" "$1" >&2
    shift
    local line
    for line in "$@"; do printf '%s\n' "$line" | sed 's/^/    /' >&2; done
    exit 1
}

# Shows the first lines of a (possibly long) text, indented, for failure messages.
_excerpt() { printf '%s\n' "$1" | head -n "${2:-20}" | sed 's/^/  | /'; }

# crashed RC: true if an exit status means killed by a signal (128+N) or by `timeout` (124).
# (255 is a plain error: sbatch exits 255 when it rejects an option.)
crashed() { [ "$1" = 124 ] || { [ "$1" -gt 128 ] && [ "$1" -le 192 ]; }; }

# assert_eq EXPECTED ACTUAL WHAT
assert_eq() {
    [ "$1" = "$2" ] || fail "$3" "expected: '$1'" "seen:     '$2'"
}

# assert_ne UNEXPECTED ACTUAL WHAT
assert_ne() {
    [ "$1" != "$2" ] || fail "$3" "expected anything but: '$1'" "seen:                   '$2'"
}

# assert_contains TEXT NEEDLE WHAT (fixed string)
assert_contains() {
    grep -qF -- "$2" <<<"$1" || fail "$3" "expected to contain: '$2'" "seen:" "$(_excerpt "$1" 30)"
}

# assert_not_contains TEXT NEEDLE WHAT (fixed string)
assert_not_contains() {
    ! grep -qF -- "$2" <<<"$1" || fail "$3" "expected not to contain: '$2'" "seen:" "$(_excerpt "$1" 30)"
}

# assert_match TEXT ERE WHAT: some line of TEXT matches the extended regular expression.
assert_match() {
    grep -qE -- "$2" <<<"$1" || fail "$3" "expected a line matching: /$2/" "seen:" "$(_excerpt "$1" 30)"
}

# assert_int WHAT VALUE: VALUE is a decimal integer.
assert_int() {
    [[ "$2" =~ ^-?[0-9]+$ ]] || fail "$1" "expected an integer" "seen: '$2'"
}

# assert_number WHAT VALUE: VALUE is a decimal number (integer or fraction, optional exponent).
assert_number() {
    [[ "$2" =~ ^-?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?$ ]] || fail "$1" "expected a number" "seen: '$2'"
}

# run_cmd CMD...: runs CMD, leaving its stdout in $T_OUT, stderr in $T_ERR, status in $T_RC.
# Never exits the test.
run_cmd() {
    local o e
    o=$(mktemp) e=$(mktemp)
    "$@" >"$o" 2>"$e"
    T_RC=$?
    T_OUT=$(cat "$o") T_ERR=$(cat "$e")
    rm -f "$o" "$e"
}

# expect_ok WHAT CMD...: runs CMD (run_cmd) and fails the test unless it exits 0.
expect_ok() {
    local what=$1; shift
    run_cmd "$@"
    [ "$T_RC" = 0 ] || fail "$what: \`$*\` exited $T_RC" "stdout:" "$(_excerpt "$T_OUT")" "stderr:" "$(_excerpt "$T_ERR")"
}

# expect_fail WHAT CMD...: runs CMD (run_cmd) and fails the test if it exits 0 or is killed by
# a signal (status > 128: a crash is not a clean error).
expect_fail() {
    local what=$1; shift
    run_cmd "$@"
    [ "$T_RC" != 0 ] || fail "$what: \`$*\` succeeded but should have failed" "stdout:" "$(_excerpt "$T_OUT")" "stderr:" "$(_excerpt "$T_ERR")"
    ! crashed "$T_RC" || fail "$what: \`$*\` exited $T_RC (crash, signal or timeout), expected a clean error" "stderr:" "$(_excerpt "$T_ERR")"
}

# count_lines TEXT ERE: number of lines of TEXT matching ERE.
count_lines() { grep -cE -- "$2" <<<"$1" || true; }

# kv_get TEXT KEY: the value of the first `KEY=value` line (tula ... --format kv), or "".
kv_get() { sed -n "s/^$2=//p" <<<"$1" | head -n 1; }

# need_bin PATH...: fails the test if a built program is missing (run make first).
need_bin() {
    local b
    for b in "$@"; do [ -x "$b" ] || fail "missing $b (run make first)"; done
}

# need_sqlite3: fails unless the sqlite3 command-line shell is installed.
need_sqlite3() {
    command -v sqlite3 >/dev/null || fail "this test needs the sqlite3 command (Debian package sqlite3)"
}

# need_cluster: fails unless running inside a cluster started by scripts/tula-cluster.
need_cluster() {
    [ -n "${TULA_CLUSTER_DIR:-}" ] && [ -n "${SLURM_CONF:-}" ] ||
        fail "needs a local cluster: scripts/tula-cluster run -- $0"
    sinfo -h >/dev/null 2>&1 || fail "the cluster does not answer (sinfo failed)"
}

# make_workdir: a fresh directory for this test's files ($T_WORK), under the cluster directory
# when there is one; the test cds into it (job output files land there). Removed on exit unless
# TULA_TEST_KEEP=1.
make_workdir() {
    T_WORK=$(mktemp -d "${TULA_CLUSTER_DIR:-${TMPDIR:-/tmp}}/$T_NAME.XXXXXX") || fail "mktemp failed"
    cd "$T_WORK" || fail "cannot cd to $T_WORK"
    if [ "${TULA_TEST_KEEP:-0}" != 1 ]; then
        _t_on_exit "cd /; rm -rf '$T_WORK'"
    fi
}

# local_conf MAX_NODES: in the work directory, a tula.conf of a test without a cluster: no
# system database, no queue estimate, at most MAX_NODES nodes; unsets TULA_CONF.
local_conf() {
    unset TULA_CONF
    printf '%s\n' "system_db = /nonexistent/tula-system.db" "queue_estimate = no" "max_nodes = $1" >tula.conf
}

# _t_on_exit CMD: adds CMD to the commands run at exit (last added runs first).
_T_EXIT_CMDS=""
_t_on_exit() {
    _T_EXIT_CMDS="$1; $_T_EXIT_CMDS"
    trap 'eval "$_T_EXIT_CMDS"' EXIT
}
on_exit() { _t_on_exit "$1"; }

# ---- Slurm -----------------------------------------------------------------------------------

# submit ARGS...: sbatch --parsable ARGS; the job id in $T_JOB (stdout/stderr/rc as run_cmd).
# Fails the test if sbatch fails.
submit() {
    run_cmd sbatch --parsable "$@"
    [ "$T_RC" = 0 ] || fail "sbatch $* exited $T_RC" "stdout:" "$(_excerpt "$T_OUT")" "stderr:" "$(_excerpt "$T_ERR")"
    T_JOB=$(tail -n 1 <<<"$T_OUT")
    T_JOB=${T_JOB%%;*}
    assert_int "job id printed by sbatch --parsable" "$T_JOB"
}

# job_field JOBID KEY: the value of KEY= in `scontrol show job JOBID` (first occurrence).
job_field() {
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# job_nodes JOBID: NumNodes of the job; a pending job's "N-N" (min-max) shows as N, a range
# "A-B" with A != B stays as it is.
job_nodes() {
    local n
    n=$(job_field "$1" NumNodes)
    if [[ "$n" =~ ^([0-9]+)-([0-9]+)$ ]] && [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]; then n=${BASH_REMATCH[1]}; fi
    echo "$n"
}

# job_state JOBID: PENDING, RUNNING, COMPLETED, FAILED, ... or "" if the job is unknown.
job_state() { job_field "$1" JobState; }

# wait_job JOBID [SECONDS]: waits until the job has finished (default at most 240 s, times
# TULA_TEST_SPEED); fails the test on a timeout (cancelling the job). Prints one note of what it
# waits for (the last line a test killed by its own timeout shows); the final state is in
# $T_STATE.
wait_job() {
    local id=$1 limit=${2:-240} waited=0
    limit=$(scaled "$limit")
    note "waiting up to ${limit}s for job $id to finish"
    while :; do
        T_STATE=$(job_state "$id")
        case "$T_STATE" in
            COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) return 0 ;;
            "") squeue -h -j "$id" 2>/dev/null | grep -q . || { T_STATE=GONE; return 0; } ;;
        esac
        if [ "$waited" -ge $((limit * 2)) ]; then
            scancel "$id" 2>/dev/null
            fail "job $id not finished after ${limit}s (state $T_STATE)" "$(scontrol show job "$id" 2>&1 | head -n 12)"
        fi
        sleep 0.5; waited=$((waited + 1))
    done
}

# expect_completed JOBID OUTFILE: the finished job's state is COMPLETED, else fails showing its output.
expect_completed() {
    [ "$T_STATE" = COMPLETED ] || fail "job $1 ended in state $T_STATE, expected COMPLETED" \
        "output ($2):" "$(tail -n 25 "$2" 2>/dev/null | sed 's/^/      | /')"
}

# minutes_of TIMELIMIT: Slurm's [D-]HH:MM:SS / MM:SS / UNLIMITED as whole minutes (rounded up),
# UNLIMITED as "UNLIMITED".
minutes_of() {
    local t=$1 d=0 h=0 m=0 s=0
    case "$t" in UNLIMITED|INFINITE|Partition_Limit) echo "$t"; return ;; esac
    if [[ "$t" == *-* ]]; then d=${t%%-*}; t=${t#*-}; fi
    IFS=: read -r -a p <<<"$t"
    case ${#p[@]} in
        3) h=${p[0]} m=${p[1]} s=${p[2]} ;;
        2) m=${p[0]} s=${p[1]} ;;
        1) m=${p[0]} ;;
    esac
    echo $(( 10#$d * 1440 + 10#$h * 60 + 10#$m + (10#$s > 0 ? 1 : 0) ))
}

# train_command [TRAINER [EXTRA-ARGS]]: the mpirun line of the test batch script: one rank per
# node, lenet5 on a small part of Fashion-MNIST for one epoch.
train_command() {
    printf '%s\n' 'mpirun --allow-run-as-root --oversubscribe -np "$SLURM_JOB_NUM_NODES" --map-by node --bind-to none \' \
        "    ${1:-tula-train} --model lenet5 --data fashion-mnist --epochs 1 --limit-train 2048 --limit-test 512${2:+ $2}"
}

# write_train_script FILE [SBATCH-LINE...]: the batch script the Tula tests submit: prints its
# TULA_* environment and the allocation, then runs train_command. T_TRAINER and T_TRAIN_EXTRA
# (environment) are passed to train_command.
write_train_script() {
    local f=$1 l; shift
    {
        echo '#!/bin/bash'
        for l in "$@"; do echo "#SBATCH $l"; done
        echo '#SBATCH --ntasks-per-node=1'
        echo 'echo "alloc: SLURM_JOB_NUM_NODES=$SLURM_JOB_NUM_NODES"'
        echo 'env | grep ^TULA_ | sort'
        echo '# mpirun starts its daemons with srun; after sbatch --export=NONE srun would pass them no'
        echo '# environment (SLURM_EXPORT_ENV=NONE) and they fail. Harmless otherwise.'
        echo 'export SLURM_EXPORT_ENV=ALL'
        train_command "${T_TRAINER:-}" "${T_TRAIN_EXTRA:-}"
    } > "$f"
}

# check_tula_job JOBID OUTFILE: the finished job ran with the batch Tula planned for the nodes it
# was allocated: TULA_NODES equals the allocation, TULA_BATCH_SIZE is a multiple of it, and
# tula-train's final line reports that global batch on that many ranks, and TULA_EPOCHS epochs.
# Sets T_ALLOC, T_BATCH, T_EPOCHS.
check_tula_job() {
    local job=$1 out=$2 output done_line
    output=$(cat "$out" 2>/dev/null)
    T_ALLOC=$(sed -n 's/^alloc: SLURM_JOB_NUM_NODES=//p' <<<"$output")
    assert_int "nodes allocated to job $job (output $out)" "$T_ALLOC"
    assert_eq "$(job_nodes "$job")" "$T_ALLOC" "SLURM_JOB_NUM_NODES in job $job vs scontrol's NumNodes"
    assert_eq "$T_ALLOC" "$(sed -n 's/^TULA_NODES=//p' <<<"$output")" "TULA_NODES in job $job vs SLURM_JOB_NUM_NODES"
    T_BATCH=$(sed -n 's/^TULA_BATCH_SIZE=//p' <<<"$output")
    assert_int "TULA_BATCH_SIZE in job $job" "$T_BATCH"
    [ "$T_BATCH" -gt 0 ] && [ $((T_BATCH % T_ALLOC)) = 0 ] ||
        fail "TULA_BATCH_SIZE in job $job is not a positive multiple of the $T_ALLOC allocated nodes" "seen: $T_BATCH"
    assert_match "$output" '^TULA_PREDICTED_SECONDS=[0-9.eE+-]+$' "TULA_PREDICTED_SECONDS in job $job"
    done_line=$(grep '^tula-train: done:' <<<"$output" | tail -n 1)
    [ -n "$done_line" ] || fail "no 'tula-train: done:' line in the output of job $job" "$(_excerpt "$output" 40)"
    assert_match "$done_line" "global_batch=$T_BATCH( |\$)" "tula-train's global batch in job $job"
    assert_match "$done_line" "nodes=$T_ALLOC( |\$)" "tula-train's node count in job $job"
    # the epochs of the plan's row: tula-train trains them (the batch came from the plan)
    T_EPOCHS=$(sed -n 's/^TULA_EPOCHS=//p' <<<"$output")
    assert_int "TULA_EPOCHS in job $job" "$T_EPOCHS"
    assert_match "$done_line" "epochs=$T_EPOCHS( |\$)" "tula-train's epochs in job $job vs TULA_EPOCHS"
}

# write_plain_script FILE: a batch script without tula-train (nothing for Tula to plan).
write_plain_script() {
    printf '#!/bin/bash\necho "alloc: SLURM_JOB_NUM_NODES=$SLURM_JOB_NUM_NODES"\nenv | grep ^TULA_ | sort\n' > "$1"
}

# default_job FILE: submits FILE held with plain sbatch and no Tula option, records what Slurm
# gives a job by default in $T_DEF_NODES and $T_DEF_TIME (scontrol's TimeLimit), cancels it.
default_job() {
    submit --hold -o /dev/null "$1"
    T_DEF_NODES=$(job_nodes "$T_JOB")
    T_DEF_TIME=$(job_field "$T_JOB" TimeLimit)
    scancel "$T_JOB" 2>/dev/null
    [ -n "$T_DEF_NODES" ] && [ -n "$T_DEF_TIME" ] || fail "cannot read the default job's NumNodes/TimeLimit"
}

# ensure_profile: profiles $T_WORKLOAD into the cluster's system database once per cluster
# (compute time per iteration on 1 node, allreduce on 2 nodes), so that `tula plan` and
# `sbatch --tula=auto` have what they need. Later tests reuse it. The compute profile is timed
# where the test runs (the head namespace, which has no CPU quota): a node trains slower than
# these plans predict, and the scenario tests (test_sbatch_requeue, the hole) are
# sized for the limits such plans give; test_sbatch_two_at_once times a node itself.
ensure_profile() {
    local db=$TULA_CLUSTER_DIR/system.db mark=$TULA_CLUSTER_DIR/.profiled-${T_WORKLOAD//[^A-Za-z0-9]/_}
    [ -f "$mark" ] && [ -f "$db" ] && return 0
    need_bin "$TULA" "$TULA_TRAIN"
    note "profiling $T_WORKLOAD into $db"
    expect_ok "profiling compute" "$TULA" profile compute --workload "$T_WORKLOAD" \
        --batch-sizes 16,32,64 --iters 5 --db "$db"
    expect_ok "profiling allreduce" "$TULA" profile allreduce --nodes 2 --db "$db"
    [ -f "$db" ] || fail "tula profile exited 0 but $db does not exist"
    touch "$mark"
}

# ---- processes of this cluster ---------------------------------------------------------------

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

# cluster_stepds [JOB]: pids of the slurmstepd processes of this cluster (their environment
# names our SLURM_CONF; other engineers' clusters may run jobs with the same ids), only
# those of job JOB when given.
cluster_stepds() {
    local p c
    for p in $(pgrep -x slurmstepd 2>/dev/null); do
        tr '\0' '\n' 2>/dev/null < "/proc/$p/environ" | grep -qxF "SLURM_CONF=$SLURM_CONF" || continue
        c=$(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline")
        [ -z "${1:-}" ] || [[ "$c" == *"[$1."* ]] || continue
        echo "$p"
    done
}

# cpu_ticks PID: user + system clock ticks used so far ("" when gone).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null; }

# spinning_stepds [JOB]: one line "pid cmdline: N% CPU over 2 s" per slurmstepd of this cluster
# (of JOB) that used more than half a CPU over 2 s.
spinning_stepds() {
    local pids p t0 t1 hz
    hz=$(getconf CLK_TCK)
    pids=$(cluster_stepds "${1:-}")
    [ -n "$pids" ] || return 0
    declare -A before
    for p in $pids; do before[$p]=$(cpu_ticks "$p"); done
    sleep 2
    for p in $pids; do
        t0=${before[$p]} t1=$(cpu_ticks "$p")
        [ -n "$t0" ] && [ -n "$t1" ] || continue
        if [ $(( (t1 - t0) * 100 )) -gt $(( hz * 2 * 50 )) ]; then
            echo "pid $p ($(tr '\0' ' ' 2>/dev/null < "/proc/$p/cmdline")): $(( (t1 - t0) * 100 / (hz * 2) ))% CPU over 2 s"
        fi
    done
}

# cleanup of a job: scancel, then (a stepd stuck in a plugin does not hear scancel) KILL the
# job's slurmstepd processes of this cluster, by pid, after 5 s.
cancel_job() {
    local job=$1 i
    scancel "$job" 2>/dev/null
    for i in $(seq 10); do [ -z "$(cluster_stepds "$job")" ] && return 0; sleep 0.5; done
    for i in $(cluster_stepds "$job"); do kill -KILL "$i" 2>/dev/null; done
}

# write_instant_script FILE: a batch script that prints "started <time>" and its TULA_*
# environment and exits at once; a tula-train line after the exit names lenet5 for Tula.
write_instant_script() {
    cat > "$1" <<'SCRIPT'
#!/bin/bash
echo "started $(date +%s.%N)"
env | grep '^TULA_' | sort
exit 0
# never reached; it names the workload for Tula:
tula-train --model lenet5 --data fashion-mnist --epochs 1
SCRIPT
}

# submit_bound_ms SCRIPT: the longest an `sbatch --tula` of SCRIPT may take, in ms: a plain
# sbatch of it timed now, plus the cli_filter's bound on `tula plan` (T.PLAN_TIMEOUT and
# T.KILL_AFTER, read from the cluster's cli_filter.lua, not assumed), plus 1 s. Sets T_BOUND_MS.
submit_bound_ms() {
    local lua=$TULA_CLUSTER_DIR/etc/cli_filter.lua plan_timeout kill_after t0 plain_ms
    plan_timeout=$(sed -n 's/^T\.PLAN_TIMEOUT *= *\([0-9][0-9]*\).*/\1/p' "$lua" | head -n 1)
    assert_int "T.PLAN_TIMEOUT in $lua" "$plan_timeout"
    kill_after=$(sed -n 's/^T\.KILL_AFTER *= *\([0-9][0-9]*\).*/\1/p' "$lua" | head -n 1)
    t0=$(now_ms)
    run_cmd timeout 30 sbatch --parsable -o /dev/null "$1"
    plain_ms=$(( $(now_ms) - t0 ))
    [ "$T_RC" = 0 ] || fail "plain sbatch failed (exit $T_RC)" "$(_excerpt "$T_ERR")"
    scancel "${T_OUT%%;*}" 2>/dev/null
    T_BOUND_MS=$(( plain_ms + (plan_timeout + ${kill_after:-0}) * 1000 + 1000 ))
}

# begin_train_test: the start of a test that submits the training script: a cluster, the
# binaries, a work directory, the cluster's profile, and the script at $T_SCRIPT.
begin_train_test() {
    need_cluster
    need_bin "$TULA" "$TULA_TRAIN"
    make_workdir
    ensure_profile
    T_SCRIPT=$T_WORK/train.sbatch
    write_train_script "$T_SCRIPT"
}

# hide_databases: moves the cluster's system database aside and points XDG_DATA_HOME at an empty
# directory, so that no profile database exists at all; everything is put back at exit.
hide_databases() {
    local db=$TULA_CLUSTER_DIR/system.db f
    for f in "$db" "$db-wal" "$db-shm" "$db-journal"; do
        if [ -e "$f" ]; then
            mv "$f" "$f.hidden-by-$T_NAME" || fail "cannot move $f aside"
            on_exit "mv -f '$f.hidden-by-$T_NAME' '$f'"
        fi
    done
    export XDG_DATA_HOME=$T_WORK/empty-xdg
    mkdir -p "$XDG_DATA_HOME"
}

# start_locking_writer DB SQL...: a sqlite3 shell on DB, fed through file descriptor 7, runs
# "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE;", then the SQL lines, and holds the lock
# until fd 7 is closed (at the test's exit, or earlier by `exec 7>&-`). Returns once the lock
# is taken; fails the test if it is not taken within 5 s. Its output: $T_WORK/writer.out.
start_locking_writer() {
    local db=$1 fifo=$T_WORK/writer.in; shift
    mkfifo "$fifo" || fail "cannot create $fifo"
    sqlite3 "$db" < "$fifo" > "$T_WORK/writer.out" 2>&1 &
    WRITER_PID=$!
    exec 7>"$fifo"
    on_exit "exec 7>&-; kill $WRITER_PID 2>/dev/null; wait $WRITER_PID 2>/dev/null"
    printf '%s\n' "PRAGMA locking_mode=EXCLUSIVE;" "BEGIN EXCLUSIVE;" "$@" "SELECT 'locked';" >&7
    for _ in $(seq 100); do grep -q '^locked$' "$T_WORK/writer.out" 2>/dev/null && break; sleep 0.05; done
    grep -q '^locked$' "$T_WORK/writer.out" || fail "the writer could not lock $db" "$(_excerpt "$(cat "$T_WORK/writer.out")")"
}

# submit_timed ARGS...: `sbatch --parsable --tula=auto -o $T_WORK/%j.out ARGS...` under a 60 s
# timeout, as run_cmd (T_RC, T_OUT, T_ERR); SUBMIT_MS gets its wall-clock milliseconds and
# JOB the job id (empty when none), which is cancelled at the test's exit.
submit_timed() {
    local t0
    t0=$(now_ms)
    run_cmd timeout 60 sbatch --parsable --tula=auto -o "$T_WORK/%j.out" "$@"
    SUBMIT_MS=$(( $(now_ms) - t0 ))
    JOB=$(tail -n 1 <<<"$T_OUT"); JOB=${JOB%%;*}
    [[ "$JOB" =~ ^[0-9]+$ ]] || JOB=
    [ -z "$JOB" ] || on_exit "cancel_job $JOB"
}

# expect_submitted WHAT: after an `sbatch --tula=auto` through run_cmd, checks that it neither
# hung nor failed, that it printed a job id (JOB) and exactly one 'tula:' line on stderr.
expect_submitted() {
    local what=$1
    [ "$T_RC" != 124 ] || fail "$what: sbatch --tula=auto hung (killed after 60 s)"
    [ "$T_RC" = 0 ] || fail "$what: sbatch --tula=auto exited $T_RC; expected the job submitted unchanged" \
        "stderr:" "$(_excerpt "$T_ERR")"
    JOB=$(tail -n 1 <<<"$T_OUT"); JOB=${JOB%%;*}
    assert_int "$what: job id" "$JOB"
    note "$what: sbatch said:" "$T_ERR"
    assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "$what: number of 'tula:' lines on sbatch's stderr"
}

# empty_user_database: XDG_DATA_HOME at an empty directory of the test, so that no user database
# of earlier jobs supplies a profile or a run (the cluster's system database stays); the jobs the
# test submits inherit it and record there.
empty_user_database() {
    export XDG_DATA_HOME=$T_WORK/empty-xdg
    mkdir -p "$XDG_DATA_HOME"
}

# begin_plan_test: the start of a test of submission-time planning on the running cluster:
# the cluster, the tula command and a work directory, with the cluster's system database
# profiled.
begin_plan_test() {
    need_cluster
    need_bin "$TULA"
    make_workdir
    ensure_profile
}

# expect_started_and_completed JOB WHAT DETAIL...: the batch script of JOB (which prints
# "started ..." first, into $T_WORK/JOB.out) starts within 15 s, and the job COMPLETES within
# 60 s; a failure names WHAT and adds the DETAIL lines.
expect_started_and_completed() {
    local job=$1 what=$2 out=$T_WORK/$1.out; shift 2
    for _ in $(seq 150); do grep -q '^started ' "$out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^started ' "$out" 2>/dev/null ||
        fail "$what: the batch script of job $job did not start within 15 s of submission" "$@"
    wait_job "$job" 60
    expect_completed "$job" "$out"
}
