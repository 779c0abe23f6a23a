#!/bin/bash
# test-timeout: 720
# test-cluster: own
# Jobs that meet their time limit: sbatch --tula=auto sets --signal=USR1@S and --requeue where
# they were left open; a tula-train job whose training (about 150 s on a testbed node of this
# run's speed: long_train_args, the fewest epochs that cross one part) is longer than its 2-minute limit stops
# before it, writes its checkpoint, requeues itself and resumes until it finishes, whether its
# script starts the rank with srun (Slurm's signal reaches it) or with mpirun on the batch node
# (no signal reaches it: the trainer watches the time left itself). Each ends with the test
# accuracy of the same run trained without interruption, bit for bit (one rank, one thread, the
# same seed), and records one run; its parts and training seconds are reported against `tula
# predict`'s prediction of the same configuration. Explicit --signal, --requeue and --no-requeue are kept;
# --tula-time-min=yes sets the plan's --time-min, an explicit --time-min is kept.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile

args=$(long_train_args 150)
epochs=$(long_train_epochs 150)
note "tula-train $args"
# write_job FILE LAUNCHER: the job script; LAUNCHER is srun or mpirun.
write_job() {
    local launch
    if [ "$2" = srun ]; then launch="srun"; else launch="mpirun --allow-run-as-root -np 1 --bind-to none"; fi
    cat > "$1" <<JOB
#!/bin/bash
#SBATCH -N 1 --ntasks-per-node=1 --time=2 --open-mode=append
export SLURM_EXPORT_ENV=ALL
echo "part: restart \${SLURM_RESTART_COUNT:-0}"
$launch $TULA_TRAIN $args --db $T_WORK/runs-$2.db
JOB
}

# the reference: the same run without interruption, outside Slurm (in the background)
"$TULA_TRAIN" $args --no-db --quiet > ref.out 2>&1 &
ref_pid=$!

declare -A job
for l in srun mpirun; do
    write_job "$l.sbatch" "$l"
    submit --tula=auto -o "$T_WORK/$l-%j.out" "$l.sbatch"
    job[$l]=$T_JOB
    on_exit "scancel ${job[$l]} 2>/dev/null"
    assert_contains "$T_ERR" "signal default -> USR1@" "sbatch's tula: line ($l job)"
    assert_contains "$T_ERR" "requeue default -> yes" "sbatch's tula: line ($l job)"
    assert_contains "$T_ERR" "time limit 2 min kept" "sbatch's tula: line ($l job)"
done
wait "$ref_pid" || fail "the reference run failed" "$(cat ref.out)"
ref_acc=$(sed -n 's/^tula-train: done: .* test_accuracy=\([0-9.]*\) .*/\1/p' ref.out)
assert_number "the reference run's test accuracy" "$ref_acc"

for l in srun mpirun; do
    j=${job[$l]}
    wait_job "$j" 660
    out=$T_WORK/$l-$j.out
    expect_completed "$j" "$out"
    restarts=$(job_field "$j" Restarts)
    assert_int "Restarts of job $j" "$restarts"
    [ "$restarts" -ge 1 ] || fail "$l job $j was never requeued (Restarts=$restarts)" "$(_excerpt "$(cat "$out")" 40)"
    assert_contains "$(cat "$out")" "requeued: it resumes from the checkpoint" "$l job $j's output"
    assert_contains "$(cat "$out")" "tula-train: resuming from tula-train-$j.ckpt" "$l job $j's output"
    acc=$(sed -n 's/^tula-train: done: .* test_accuracy=\([0-9.]*\) .*/\1/p' "$out" | tail -n 1)
    assert_eq "$ref_acc" "$acc" "test accuracy of the $l job $j, interrupted $restarts time(s), vs the uninterrupted run"
    assert_eq 1 "$(count_lines "$(cat "$out")" '^tula-train: done:')" "done lines of the $l job $j"
    expect_ok "tula db list" "$TULA" db list --db "$T_WORK/runs-$l.db" --format json
    runs=$(python3 -c 'import json,sys; print(sum(w["runs"] for db in json.load(sys.stdin) for w in db["workloads"]))' <<<"$T_OUT")
    assert_eq 1 "$runs" "runs recorded by the $l job $j"
    expect_ok "tula explain $j" "$TULA" explain "$j" --db "$T_WORK/runs-$l.db" --format kv
    parts=$(kv_get "$T_OUT" parts) measured=$(kv_get "$T_OUT" measured_seconds)
    # the script trains its own epochs and batch, not a plan's row: the prediction of that
    # configuration (one node, one rank, global batch 64) from the cluster's profile, which
    # ensure_profile measures in the head namespace, without a node's CPU quota
    expect_ok "tula predict" "$TULA" predict --workload "$T_WORKLOAD" --nodes 1 \
        --global-batch 64 --epochs "$epochs" --limit-train 12800 --limit-test 512 --format kv
    predicted=$(kv_get "$T_OUT" predicted_seconds)
    report "$l job $j: $restarts requeue(s), test accuracy $acc as uninterrupted; $parts parts trained" \
        "$measured s against the predicted $predicted s (95 % interval $(kv_get "$T_OUT" lower_seconds)" \
        "to $(kv_get "$T_OUT" upper_seconds) s, head-namespace profile; measured / predicted" \
        "$(awk -v m="$measured" -v p="$predicted" 'BEGIN { if (p > 0) printf "%.2f", m / p; else print "n/a" }'))"
done

# explicit --signal, --requeue, --no-requeue are kept (the tula: line sets neither)
write_train_script "$T_WORK/plain.sbatch"
for opt in "--signal=USR2@200" "--requeue" "--no-requeue"; do
    submit --hold --tula=auto "$opt" -o /dev/null "$T_WORK/plain.sbatch"
    on_exit "scancel $T_JOB 2>/dev/null"
    case $opt in
        --signal*) assert_not_contains "$T_ERR" "signal default" "sbatch's line with $opt" ;;
        *) assert_not_contains "$T_ERR" "requeue default" "sbatch's line with $opt" ;;
    esac
    want=1; [ "$opt" = --no-requeue ] && want=0
    [ "$opt" = "--signal=USR2@200" ] || assert_eq "$want" "$(job_field "$T_JOB" Requeue)" "Requeue of the job with $opt"
    scancel "$T_JOB"
done
# --tula-time-min=yes asks for the plan's --time-min (the shortest useful part); an explicit
# --time-min is kept; a bad value is refused by the plugin's option
expect_ok "tula plan" "$TULA" plan --script "$T_WORK/plain.sbatch" --format kv
want_min=$(kv_get "$T_OUT" time_min)
assert_int "tula plan's time_min" "$want_min"
submit --hold --tula=auto --tula-time-min=yes -o /dev/null "$T_WORK/plain.sbatch"
on_exit "scancel $T_JOB 2>/dev/null"
assert_contains "$T_ERR" "time-min default -> $want_min min" "sbatch's line with --tula-time-min=yes"
assert_eq "$want_min" "$(minutes_of "$(job_field "$T_JOB" TimeMin)")" "TimeMin of the job with --tula-time-min=yes"
scancel "$T_JOB"
submit --hold --tula=auto --tula-time-min=yes --time-min=1 -o /dev/null "$T_WORK/plain.sbatch"
on_exit "scancel $T_JOB 2>/dev/null"
assert_not_contains "$T_ERR" "time-min default" "sbatch's line with an explicit --time-min"
assert_eq 1 "$(minutes_of "$(job_field "$T_JOB" TimeMin)")" "TimeMin of the job with --time-min=1"
scancel "$T_JOB"
run_cmd sbatch --hold --tula=auto --tula-time-min=maybe -o /dev/null "$T_WORK/plain.sbatch"
[ "$T_RC" != 0 ] || { scancel "$(tail -n 1 <<<"$T_OUT" | grep -o '[0-9]*$')" 2>/dev/null; fail "sbatch accepted --tula-time-min=maybe"; }
assert_contains "$T_ERR" "invalid --tula-time-min value 'maybe'" "sbatch's message for --tula-time-min=maybe"
note "ok: signalled, checkpointed, requeued and finished as uninterrupted (srun and mpirun); explicit options kept; --time-min"
