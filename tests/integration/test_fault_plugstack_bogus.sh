#!/bin/bash
# A plugin whose plugstack arguments are bad never blocks anyone. Through a client
# configuration whose plugstack line is the cluster's plus `strict bogus=1` (same slurmctld,
# same cli_filter.lua): a plain sbatch works; sbatch --tula=auto is refused by cli_filter.lua
# with one `tula: error:` line naming bogus=1 (the site asked for strict); without strict,
# sbatch --tula=auto submits the job unchanged with one warning, and the job runs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
etc=$(dirname "$SLURM_CONF")
export XDG_DATA_HOME=$T_WORK/empty-xdg
mkdir -p "$XDG_DATA_HOME"

# client_conf NAME EXTRA-ARGS: a client configuration in $T_WORK/NAME whose plugstack line has EXTRA-ARGS.
client_conf() {
    local d=$T_WORK/$1
    fault_client_conf "$d"
    sed -i -e "s/[[:space:]]*\$/ $2/" "$d/plugstack.conf"
    grep -q "tula\.so.* $2\$" "$d/plugstack.conf" || fail "cannot make the plugstack line" "$(cat "$d/plugstack.conf")"
}
client_conf strict "strict bogus=1"
client_conf lax "bogus=1"

# strict: a plain job goes through, a --tula job is refused with one line
run_cmd env SLURM_CONF="$T_WORK/strict/slurm.conf" timeout 30 sbatch --parsable --hold -o /dev/null "$F_SCRIPT"
assert_eq 0 "$T_RC" "plain sbatch under 'strict bogus=1' (stderr: $T_ERR)"
scancel "${T_OUT%%;*}" 2>/dev/null
assert_eq 0 "$(count_lines "$T_ERR" 'tula:')" "tula: lines for a plain sbatch under 'strict bogus=1'"
jobs_before=$(squeue -h -o %i | sort)
run_cmd env SLURM_CONF="$T_WORK/strict/slurm.conf" timeout 30 sbatch --parsable --hold --tula=auto \
    --tula-workload="$T_WORKLOAD" -o /dev/null "$F_SCRIPT"
[ "$T_RC" != 0 ] || { scancel "${T_OUT%%;*}"; fail "sbatch --tula=auto under 'strict bogus=1' submitted a job; expected a refusal"; }
[ "$T_RC" != 124 ] || fail "sbatch --tula=auto under 'strict bogus=1' hung"
assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "tula: lines of the refusal"
assert_match "$T_ERR" '^tula: error: .*disabled.*bogus=1.*job not submitted' "the refusal"
assert_eq "$jobs_before" "$(squeue -h -o %i | sort)" "jobs in the queue before and after the refusal"

# not strict: the --tula job is submitted unchanged with one warning, and runs
run_cmd env SLURM_CONF="$T_WORK/lax/slurm.conf" timeout 30 sbatch --parsable --tula=auto \
    --tula-workload="$T_WORKLOAD" -o "$T_WORK/%j.out" "$F_SCRIPT"
assert_eq 0 "$T_RC" "sbatch --tula=auto under 'bogus=1' (stderr: $T_ERR)"
j=${T_OUT%%;*}
assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "tula: lines for sbatch --tula=auto under 'bogus=1'"
assert_match "$T_ERR" '^tula: warning: .*bogus=1.*job submitted unchanged' "the warning"
wait_job "$j" 120
expect_completed "$j" "$T_WORK/$j.out"
assert_not_contains "$(cat "$T_WORK/$j.out")" "TULA_BATCH_SIZE=" "environment of job $j"
note "ok: 'strict bogus=1' refuses only --tula submissions; 'bogus=1' fails open"
