#!/bin/bash
# A plugin that cannot be loaded never blocks anyone. Through a client configuration whose
# plugstack line names a tula.so that is not there (optional, as the snippet installs it; same
# slurmctld, same cli_filter.lua): a plain sbatch submits and runs its job with no `tula:` line;
# sbatch --tula=auto is refused by sbatch itself (the --tula option exists only when the plugin
# is loaded), promptly, and queues nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
d=$T_WORK/missing
fault_client_conf "$d"
sed -i -e "s|^optional [^ ]*|optional $T_WORK/no-such-dir/tula.so|" "$d/plugstack.conf"
grep -q "no-such-dir/tula.so" "$d/plugstack.conf" || fail "cannot make the plugstack line" "$(cat "$d/plugstack.conf")"

# a plain job: submitted and run, nothing from Tula
run_cmd env SLURM_CONF="$d/slurm.conf" timeout 30 sbatch --parsable -o "$T_WORK/%j.out" "$F_SCRIPT"
assert_eq 0 "$T_RC" "plain sbatch with the plugin missing (stderr: $T_ERR)"
job=${T_OUT%%;*}
assert_eq 0 "$(count_lines "$T_ERR" 'tula:')" "tula: lines for a plain sbatch with the plugin missing"
wait_job "$job" 120
assert_eq COMPLETED "$(job_field "$job" JobState)" "state of plain job $job with the plugin missing"

# a --tula job: sbatch refuses the option it does not know, within the hang check's bound
jobs_before=$(squeue -h -o %i | sort)
t0=$(now_ms)
run_cmd env SLURM_CONF="$d/slurm.conf" timeout 30 sbatch --parsable --hold --tula=auto -o /dev/null "$F_SCRIPT"
ms=$(( $(now_ms) - t0 ))
[ "$T_RC" != 0 ] || { scancel "${T_OUT%%;*}"; fail "sbatch --tula=auto submitted a job although the plugin is missing"; }
[ "$T_RC" != 124 ] || fail "sbatch --tula=auto hung with the plugin missing"
note "sbatch --tula=auto with the plugin missing: exit $T_RC in $ms ms:" "$T_ERR"
assert_match "$T_ERR" 'tula' "sbatch's refusal names the option"
assert_eq "$jobs_before" "$(squeue -h -o %i | sort)" "jobs in the queue before and after the refusal"
