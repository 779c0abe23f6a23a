#!/bin/bash
# sbatch --tula=auto in the other ways users submit: the tasks get the batch for the
# nodes actually allocated (TULA_NODES = allocation, TULA_BATCH_SIZE a multiple of it, used by
# tula-train) also
#   - with a node range -N 1-4: the range is kept (Tula never cuts an explicit -N), the time limit
#     is that of `tula plan --node-range 1-4` (it covers the slowest count), and the job gets the
#     plan table's row for the count it was given,
#   - with --export=NONE (the plugin's variables do not come from the submitting shell),
#   - with --wrap (no script file),
#   - with the script on standard input;
# each job gets the nodes and time limit its submission's tula: line names: the plan at that
# moment, which counts the jobs submitted before it in the queue estimate, so it may differ from
# `tula plan` before them (a note then says so).
. "$(dirname "$0")/lib.sh"
begin_train_test
script=$T_SCRIPT

expect_ok "tula plan" "$TULA" plan --script "$script" --format kv
p_nodes=$(kv_get "$T_OUT" nodes)
p_limit=$(kv_get "$T_OUT" time_limit)
assert_int "planned nodes" "$p_nodes"
assert_int "planned time limit" "$p_limit"
expect_ok "tula plan --node-range 1-4" "$TULA" plan --script "$script" --node-range 1-4 --format kv
r_limit=$(kv_get "$T_OUT" time_limit)
assert_int "time limit planned for the range" "$r_limit"
assert_match "$(kv_get "$T_OUT" table)" '^lenet5@fashion-mnist;1:[0-9]+:[0-9]+:[0-9.]+;2:[0-9]+:[0-9]+:[0-9.]+;3:[0-9]+:[0-9]+:[0-9.]+;4:[0-9]+:[0-9]+:[0-9.]+$' \
    "the plan table of the range has a row for each of 1..4 nodes"

jobs=()
declare -A said_nodes=() said_limit=()
# submitted JOB:HOW: records the job and the nodes and time limit its submission's tula: line set
submitted() {
    jobs+=("$T_JOB:$1")
    said_nodes[$T_JOB]=$(sed -n 's/.*nodes default -> \([0-9]*\).*/\1/p' <<<"$T_ERR" | head -n 1)
    said_limit[$T_JOB]=$(sed -n 's/.*time limit default -> \([0-9]*\) min.*/\1/p' <<<"$T_ERR" | head -n 1)
}
# node range: kept as it is
submit --tula=auto -N 1-4 -o "$T_WORK/%j.out" "$script"; submitted range
# --export=NONE: absolute trainer path, no database writes (no XDG_DATA_HOME in the job)
T_TRAINER=$TULA_TRAIN T_TRAIN_EXTRA=--no-db write_train_script "$T_WORK/export-none.sbatch"
submit --tula=auto --export=NONE -o "$T_WORK/%j.out" "$T_WORK/export-none.sbatch"; submitted export-none
# --wrap
wrap=$(printf 'echo "alloc: SLURM_JOB_NUM_NODES=$SLURM_JOB_NUM_NODES"; env | grep ^TULA_ | sort; %s' \
    "$(train_command | tr -d '\\\n')")
submit --tula=auto --ntasks-per-node=1 -o "$T_WORK/%j.out" --wrap "$wrap"; submitted wrap
# script on standard input
submit --tula=auto -o "$T_WORK/%j.out" < "$script"; submitted stdin

for j in "${jobs[@]}"; do
    id=${j%%:*} how=${j#*:}
    nodes=$(job_nodes "$id") limit=$(job_field "$id" TimeLimit)
    note "$how: job $id NumNodes=$nodes TimeLimit=$limit"
    if [ "$how" = range ]; then
        assert_eq "$r_limit" "$(minutes_of "$limit")" "$how: TimeLimit of job $id ($limit) in minutes vs the range's plan"
        case $nodes in 1-4|1|2|3|4) ;; *) fail "$how: job $id NumNodes=$nodes: the -N 1-4 range was not kept" ;; esac
    else
        assert_int "$how: nodes on the tula: line of job $id's submission" "${said_nodes[$id]}"
        assert_int "$how: time limit on the tula: line of job $id's submission" "${said_limit[$id]}"
        assert_eq "${said_limit[$id]}" "$(minutes_of "$limit")" "$how: TimeLimit of job $id ($limit) in minutes vs its submission's plan"
        assert_eq "${said_nodes[$id]}" "$nodes" "$how: NumNodes of job $id vs its submission's plan"
        [ "${said_nodes[$id]}:${said_limit[$id]}" = "$p_nodes:$p_limit" ] ||
            note "$how: job $id was planned at ${said_nodes[$id]} node(s), ${said_limit[$id]} min with the jobs before it in the queue; tula plan before them: $p_nodes node(s), $p_limit min"
    fi
done
for j in "${jobs[@]}"; do
    id=${j%%:*} how=${j#*:}
    wait_job "$id" 240
    expect_completed "$id" "$T_WORK/$id.out"
    check_tula_job "$id" "$T_WORK/$id.out"
    [ "$T_ALLOC" -le 4 ] || fail "$how: job $id got $T_ALLOC nodes, above the range 1-4"
    note "ok: $how: job $id ran on $T_ALLOC node(s) with global batch $T_BATCH"
done
