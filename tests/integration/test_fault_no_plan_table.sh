#!/bin/bash
# In slurmstepd the plugin only picks a row of the plan table the job carries: a job whose
# table is missing or malformed runs unchanged with one TULA_WARNING, and the node stays up.
# (1) a client configuration without the cli_filter: --tula reaches the job, no table does;
# (2) a user who sets SLURM_SPANK_TULA_PLAN to garbage (4 KiB of junk, or a row for the wrong
#     node count) in the submitting environment.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
d=$T_WORK/nofilter
mkdir -p "$d"
sed -e 's|^CliFilterPlugins=.*|# no cli_filter|' "$SLURM_CONF" > "$d/slurm.conf"
export XDG_DATA_HOME=$T_WORK/empty-xdg
mkdir -p "$XDG_DATA_HOME"

# run_job WHAT ENV...: submits F_SCRIPT with --tula=auto, waits; sets $OUTPUT to its output.
run_job() {
    local what=$1; shift
    run_cmd env "$@" timeout 30 sbatch --parsable --tula=auto --tula-workload="$T_WORKLOAD" -o "$T_WORK/%j.out" "$F_SCRIPT"
    assert_eq 0 "$T_RC" "$what: sbatch (stderr: $T_ERR)"
    local j=${T_OUT%%;*}
    wait_job "$j" 120
    expect_completed "$j" "$T_WORK/$j.out"
    OUTPUT=$(cat "$T_WORK/$j.out")
    assert_not_contains "$OUTPUT" "TULA_BATCH_SIZE=" "$what: environment of job $j"
    assert_eq 1 "$(count_lines "$OUTPUT" '^TULA_WARNING=tula: ')" "$what: TULA_WARNING lines in job $j"
}
run_job "no cli_filter" SLURM_CONF="$d/slurm.conf"
assert_contains "$OUTPUT" "no plan reached the job" "no cli_filter: the warning"
run_job "junk table" SLURM_CONF="$d/slurm.conf" SLURM_SPANK_TULA_PLAN="$(head -c 4000 /dev/zero | tr '\0' 9)"
run_job "wrong row" SLURM_CONF="$d/slurm.conf" SLURM_SPANK_TULA_PLAN="lenet5@fashion-mnist;7:64:1:1"
assert_contains "$OUTPUT" "no row for 1 nodes" "wrong row: the warning"
drained=$(sinfo -h -N -o '%N %t' | awk '$2 ~ /drain|down|fail/' | sort -u)
assert_eq "" "$drained" "nodes drained or down"
note "ok: missing or malformed plan tables leave the job unchanged with one TULA_WARNING"
