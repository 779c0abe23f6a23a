#!/bin/bash
# Without --tula, with --tula=off and with --tula=dry-run (which only prints the plan) the job is
# exactly what it would be without the plugin:
# the same `scontrol show job` description as a submission through a slurm.conf that loads
# neither the SPANK plugin nor the cli_filter (held jobs, job ids and times masked), 1 node, the
# default time limit, and no TULA_BATCH_SIZE / TULA_NODES in the tasks' environment. A profile
# exists, so a plugin that wrongly acted would change the job.
. "$(dirname "$0")/lib.sh"
begin_train_test
script=$T_SCRIPT

# A client configuration without Tula, talking to the same slurmctld.
mkdir -p "$T_WORK/noplugin"
: > "$T_WORK/noplugin/plugstack.conf"
sed -e "s|^PlugStackConfig=.*|PlugStackConfig=$T_WORK/noplugin/plugstack.conf|" \
    -e 's|^CliFilterPlugins=.*||' "$SLURM_CONF" > "$T_WORK/noplugin/slurm.conf"
grep -q '^PlugStackConfig=' "$SLURM_CONF" || fail "no PlugStackConfig in $SLURM_CONF"

# describe JOBID: scontrol's description with what differs between any two submissions masked.
describe() {
    scontrol show job "$1" | tr ' ' '\n' | sed -e '/^$/d' \
        -e 's/^\(SubmitTime\|EligibleTime\|AccrueTime\|StartTime\|EndTime\|LastSchedEval\|Deadline\|PreemptEligibleTime\|PreemptTime\|SuspendTime\|SecsPreSuspend\|RunTime\)=.*/\1=*/' \
        -e "s/^\(JobId\|ArrayJobId\)=$1\$/\1=JOBID/" -e "s|^\(Std[A-Za-z]*=.*/\)$1\.out\$|\1JOBID.out|"
}

SLURM_CONF=$T_WORK/noplugin/slurm.conf submit --hold -J tula-off-test -o "$T_WORK/%j.out" "$script"
describe "$T_JOB" > "$T_WORK/desc.noplugin"; scancel "$T_JOB"
submit --hold -J tula-off-test -o "$T_WORK/%j.out" "$script"
describe "$T_JOB" > "$T_WORK/desc.none"; scancel "$T_JOB"
submit --hold -J tula-off-test -o "$T_WORK/%j.out" --tula=off "$script"
describe "$T_JOB" > "$T_WORK/desc.off"; scancel "$T_JOB"
# dry-run: the plan is printed (one line saying what it would set), the job is submitted as is
submit --hold -J tula-off-test -o "$T_WORK/%j.out" --tula=dry-run "$script"
describe "$T_JOB" > "$T_WORK/desc.dry-run"; scancel "$T_JOB"
assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "number of 'tula:' lines of sbatch --tula=dry-run"
assert_match "$T_ERR" '^tula: dry-run: .*would set nodes default -> [0-9]+, time limit default -> [0-9]+ min, (exclusive default -> whole nodes, )?signal default -> USR1@[0-9]+, requeue default -> yes; job submitted unchanged$' \
    "sbatch --tula=dry-run's plan line"
[ -s "$T_WORK/desc.noplugin" ] || fail "no description of the job submitted without the plugin"
for v in none off dry-run; do
    d=$(diff "$T_WORK/desc.noplugin" "$T_WORK/desc.$v") ||
        fail "job description with $(case $v in none) echo 'no --tula' ;; *) echo "--tula=$v" ;; esac) differs from the one without the plugin" \
            "diff (< without plugin, > with):" "$(_excerpt "$d" 30)"
done

# Running jobs: unchanged allocation, no Tula batch in the tasks' environment.
default_job "$script"
for opt in "" "--tula=off"; do
    what="job submitted with ${opt:-no --tula}"
    # shellcheck disable=SC2086
    submit $opt -o "$T_WORK/%j.out" "$script"
    job=$T_JOB out=$T_WORK/$job.out
    assert_not_contains "$T_ERR" "tula:" "sbatch's messages for the $what"
    assert_eq "$T_DEF_NODES" "$(job_nodes "$job")" "NumNodes of the $what"
    assert_eq "$T_DEF_TIME" "$(job_field "$job" TimeLimit)" "TimeLimit of the $what"
    wait_job "$job" 240
    expect_completed "$job" "$out"
    output=$(cat "$out")
    assert_not_contains "$output" "TULA_BATCH_SIZE=" "environment of the $what"
    assert_not_contains "$output" "TULA_NODES=" "environment of the $what"
    assert_match "$output" '^tula-train: done:.* global_batch=64( |$)' "tula-train's default global batch in the $what"
done
note "ok: no --tula and --tula=off leave the job as it is"
