#!/bin/bash
# test-timeout: 900
# test-cluster: own
# A queue with a hole (experiments/hole.py): another user's reservation takes every cpu node from
# the plan's time_min + 20 s from now, for one minute. The same tula-train job (T_HOLE_TRAIN,
# well under a minute of training on a testbed node) is submitted with --tula-time-min=yes and
# with --tula-time-min=no. With it, Slurm starts the job now in the hole, with its --time-min as
# the limit, and it ends within the hole (on a node too slow for that, tula-train stops before
# the limit, checkpoints and requeues itself, and the rest runs after the reservation). Without
# it, the job waits for the reservation to end. The job with time_min starts in the hole, runs
# whole within it (or in several parts), finishes first, and ends with the same test accuracy as the job without it (one rank,
# one thread, the same seed). With the reservation there, `tula plan --time-min yes` plans the
# start in the hole.
. "$(dirname "$0")/lib.sh"
need_cluster
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
ensure_profile

run_cmd env PYTHONPATH="$REPO" python3 -m experiments.hole --workdir "$T_WORK/hole" --hold 1 \
    --timeout "$(scaled 780)" --trainer-args "$T_HOLE_TRAIN"
[ "$T_RC" = 0 ] || fail "experiments.hole exited $T_RC" "$(_excerpt "$T_ERR" 30)"
r=$T_OUT
field() { python3 -c 'import json, sys; r = json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, r))' "$r" "$1"; }
hole=$(field 'hole_seconds')
for v in time_min no_time_min; do
    assert_eq COMPLETED "$(field "$v['state']")" "the $v job's final state"
done
assert_eq True "$(field "time_min['first_start_seconds'] < hole_seconds")" \
    "the job with time_min starts in the hole of ${hole}s ($r)"
# in parts, or whole within the hole when the node trains fast enough (its limit is its time_min)
assert_eq True "$(field "time_min['parts'] >= 2 or time_min['time_to_result_seconds'] <= hole_seconds")" \
    "the job with time_min runs in parts or ends in the hole ($r)"
# the plan asked slurmctld with the reservation there: it starts in the hole
assert_eq True "$(field "bool(plan['hole']) and int(plan['hole_parts'] or 0) >= 1")" \
    "tula plan --time-min yes sees the hole ($r)"
assert_eq True "$(field "no_time_min['first_start_seconds'] >= hole_seconds")" \
    "the job without time_min waits for the reservation ($r)"
assert_eq True "$(field "time_min['time_to_result_seconds'] < no_time_min['time_to_result_seconds']")" \
    "the job with time_min finishes first ($r)"
assert_eq "$(field "no_time_min['test_accuracy']")" "$(field "time_min['test_accuracy']")" \
    "test accuracy of the job run in parts vs the job run whole"
moved=$(field 'reservation_moved_seconds')
[ "$moved" = 0 ] || note "the reservation moved ${moved}s later: the submission came after its time_min no longer fit"
note "time to result with time_min $(field "time_min['time_to_result_seconds']") s in $(field "time_min['parts']") parts, without $(field "no_time_min['time_to_result_seconds']") s"
report "parts against the plan: with time_min $(field "time_min['parts']") part(s), planned $(field "plan['hole_parts']") in the hole + $(field "plan['rest_parts']") after it; without $(field "no_time_min['parts']") part(s), planned 1; predicted training $(field "plan['predicted_seconds']") s"
