# shellcheck shell=bash
# Helpers for the fault-injection tests (tests/integration/test_fault_*.sh), sourced after
# lib.sh. Each test breaks one thing Tula depends on, then submits a short job with
#     sbatch --tula=auto --tula-workload=lenet5@fashion-mnist
# and checks the failure policy: the submission succeeds, with exactly one `tula:` line on
# sbatch's standard error, no later than 2 s after a plain sbatch of the same script measured
# in the same run (a hang check, not a speed target), the job runs to COMPLETED, and no node
# is drained or down afterwards.

# fault_begin: cluster, work directory, the cluster's profile, a plain batch script ($F_SCRIPT).
fault_begin() {
    need_cluster
    need_bin "$TULA" "$TULA_TRAIN"
    make_workdir
    ensure_profile
    F_SCRIPT=$T_WORK/plain.sbatch
    write_plain_script "$F_SCRIPT"
    F_DB=$TULA_CLUSTER_DIR/system.db
}

# fault_client_conf DIR: a client configuration of the same cluster in DIR: slurm.conf with
# PlugStackConfig=DIR/plugstack.conf, and copies of the cluster's plugstack.conf, cli_filter.lua
# and auth/slurm's key (Slurm reads those two beside slurm.conf). The test then changes DIR's
# copies and points SLURM_CONF at DIR/slurm.conf.
fault_client_conf() {
    local d=$1 etc
    etc=$(dirname "$SLURM_CONF")
    mkdir -p "$d" && cp "$etc/plugstack.conf" "$etc/cli_filter.lua" "$d/" ||
        fail "cannot copy the cluster's plugstack.conf and cli_filter.lua to $d"
    [ ! -f "$etc/slurm.key" ] || cp -p "$etc/slurm.key" "$d/" || fail "cannot copy $etc/slurm.key to $d"
    sed -e "s|^PlugStackConfig=.*|PlugStackConfig=$d/plugstack.conf|" "$SLURM_CONF" > "$d/slurm.conf" ||
        fail "cannot write $d/slurm.conf"
}

# fault_replace FILE: moves FILE (and a database's -wal/-shm/-journal) aside, restored at exit;
# the caller then puts the faulty version in place.
fault_replace() {
    local f
    for f in "$1" "$1-wal" "$1-shm" "$1-journal"; do
        if [ -e "$f" ]; then
            mv "$f" "$f.saved-by-$T_NAME" || fail "cannot move $f aside"
            on_exit "rm -rf '$f'; mv -f '$f.saved-by-$T_NAME' '$f'"
        else
            on_exit "rm -rf '$f'"
        fi
    done
}

# _ms: milliseconds since the epoch.
_ms() { now_ms; }

# fault_submit WHAT: the checks above; sets $F_JOB and $F_ERR (sbatch's standard error).
fault_submit() {
    local what=$1 t0 plain_ms tula_ms out drained
    export XDG_DATA_HOME=$T_WORK/empty-xdg
    mkdir -p "$XDG_DATA_HOME"
    t0=$(_ms)
    run_cmd timeout 30 sbatch --parsable -o /dev/null "$F_SCRIPT"
    plain_ms=$(( $(_ms) - t0 ))
    [ "$T_RC" = 0 ] || fail "$what: plain sbatch failed (exit $T_RC)" "$(_excerpt "$T_ERR")"
    scancel "${T_OUT%%;*}" 2>/dev/null
    t0=$(_ms)
    run_cmd timeout 30 sbatch --parsable --tula=auto --tula-workload="$T_WORKLOAD" -o "$T_WORK/%j.out" "$F_SCRIPT"
    tula_ms=$(( $(_ms) - t0 ))
    note "$what: sbatch --tula=auto took $tula_ms ms, plain sbatch $plain_ms ms"
    [ "$T_RC" = 0 ] || fail "$what: sbatch --tula=auto failed (exit $T_RC); expected the job submitted" \
        "stderr:" "$(_excerpt "$T_ERR")"
    F_ERR=$T_ERR
    note "$what: sbatch said: $F_ERR"
    [ $((tula_ms - plain_ms)) -le 2000 ] ||
        fail "$what: sbatch --tula=auto took $tula_ms ms, more than 2 s over plain sbatch ($plain_ms ms)"
    assert_eq 1 "$(count_lines "$F_ERR" 'tula:')" "$what: number of 'tula:' lines on sbatch's stderr"
    assert_not_contains "$F_ERR" "database is locked" "$what: sbatch's stderr"
    F_JOB=$(tail -n 1 <<<"$T_OUT"); F_JOB=${F_JOB%%;*}
    assert_int "$what: job id" "$F_JOB"
    wait_job "$F_JOB" 120
    expect_completed "$F_JOB" "$T_WORK/$F_JOB.out"
    out=$(cat "$T_WORK/$F_JOB.out" 2>/dev/null)
    assert_match "$out" '^alloc: SLURM_JOB_NUM_NODES=[0-9]+$' "$what: the job ran its script"
    drained=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /drain|down|fail/' | sort -u)
    assert_eq "" "$drained" "$what: nodes drained or down after the job"
}

# fault_warned WHAT NEEDLE: the one `tula:` line is a warning that mentions NEEDLE, and the job
# was left unchanged (no batch size in its environment).
fault_warned() {
    assert_match "$F_ERR" '^tula: warning: .*job submitted unchanged' "$1: the tula: line is a fail-open warning"
    [ -z "$2" ] || assert_contains "$F_ERR" "$2" "$1: the warning says what was wrong"
    assert_not_contains "$(cat "$T_WORK/$F_JOB.out")" "TULA_BATCH_SIZE=" "$1: environment of job $F_JOB"
}
