#!/bin/bash
# tula-train with 2 MPI ranks (mpirun --oversubscribe on this machine), no cluster:
#  1. gradient buckets: the run with small buckets (--bucket-mb 0.01: lenet5's 247 KB of
#     gradients in 24 MPI_Iallreduce calls started during backward) has the loss, lr and
#     grad-norm trajectory of the run with one blocking allreduce (--bucket-mb 0), within
#     1e-6 relative (for 2 ranks the elementwise sums are the same, so in practice equal);
#     also with the noise-scale measurement on, whose per-rank |g_r|^2 is summed per bucket;
#  2. the independent reference: 2 ranks x 32 examples take the same first steps as 1 rank
#     x 64 (the same global batch; only the summation order differs), within 1e-4;
#  3. SIGUSR1 to mpirun (which forwards it to the ranks; 200 steps leave it time to arrive
#     before the end): all ranks agree to stop at the
#     same step, rank 0 writes the checkpoint, and the 2-rank resumed run continues the
#     uninterrupted 2-rank trajectory bit for bit;
#  4. --profile-compute on 2 ranks with a --min-time floor: each rank alone would reach the
#     floor after its own number of steps (their speeds differ from step to step) and the
#     per-step maximum over ranks would wait forever; the ranks agree on every step, so it
#     ends, with the time per step printed for each batch size, and after it the time of the
#     whole synchronized step (the ranks' agreement on the step count rides on the step's own
#     2-value allreduce, so this loop must end too).
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
command -v mpirun >/dev/null || fail "mpirun is needed (apt-get install openmpi-bin)"
command -v python3 >/dev/null || fail "python3 is needed to parse the metrics"
make_workdir
run=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --epochs 1 --limit-train 12800 --limit-test 200
     --batch-size 64 --no-db --quiet)
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)

# close A B TOL [STEPS]: step lines of A and B agree within relative TOL (the first STEPS steps).
close() {
    python3 - "$@" <<'EOF' || fail "metrics $1 and $2 differ beyond $3"
import json, sys
def load(p):
    return {o["step"]: o for o in map(json.loads, open(p)) if o["type"] == "step"}
a, b, tol = load(sys.argv[1]), load(sys.argv[2]), float(sys.argv[3])
n = int(sys.argv[4]) if len(sys.argv) > 4 else len(a)
assert len(a) == 200 and sorted(a) == sorted(b), (len(a), len(b))
worst = 0.0
for s in range(n):
    for k in ("loss", "lr", "grad_norm"):
        x, y = a[s][k], b[s][k]
        d = abs(x - y) / max(abs(x), 1e-12)
        assert d <= tol, ("step", s, k, x, y)
        worst = max(worst, d)
print("%d steps agree, largest relative difference %.3g" % (n, worst))
EOF
}

note "1: buckets vs one blocking allreduce (2 ranks)"
expect_ok "2 ranks, blocking" "${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --metrics blocking.jsonl --bucket-mb 0
grep -q '"ranks":2' blocking.jsonl || fail "tula-train did not run with 2 ranks (built without MPI?)" "$(head -1 blocking.jsonl)"
expect_ok "2 ranks, buckets" "${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --metrics buckets.jsonl --bucket-mb 0.01
close blocking.jsonl buckets.jsonl 1e-6
expect_ok "2 ranks, blocking, noise scale" "${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --metrics nb.jsonl --bucket-mb 0 --noise-scale-every 1
expect_ok "2 ranks, buckets, noise scale" "${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --metrics nk.jsonl --bucket-mb 0.01 --noise-scale-every 1
close nb.jsonl nk.jsonl 1e-6

note "1b: nodes and ranks in the done line"
# 2 ranks on this one host: 1 node x 2 ranks (MPI's shared-memory groups); the same run inside
# a Slurm job of 2 nodes that share this host (the local cluster's shared mode): 2 nodes x 1
expect_ok "2 ranks, done line" "${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --bucket-mb 0
assert_match "$(grep '^tula-train: done:' <<<"$T_OUT")" ' nodes=1 ranks=2 ' "done line of 2 ranks on one host"
expect_ok "2 ranks, 2 Slurm nodes on one host" env SLURM_JOB_NUM_NODES=2 "${mpi[@]}" -x SLURM_JOB_NUM_NODES "$TULA_TRAIN" "${run[@]}" --bucket-mb 0
assert_match "$(grep '^tula-train: done:' <<<"$T_OUT")" ' nodes=2 ranks=2 ' "done line of 2 ranks in a 2-node job on one host"

note "2: 2 ranks x 32 vs 1 rank x 64"
expect_ok "1 rank" "$TULA_TRAIN" "${run[@]}" --metrics one.jsonl
close one.jsonl buckets.jsonl 1e-4 10

note "3: stop and resume with 2 ranks"
"${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --metrics stop.jsonl --bucket-mb 0.01 --checkpoint two.ckpt >stop.out 2>stop.err &
pid=$!
for i in $(seq 1 600); do
    [ -f stop.jsonl ] && [ "$(grep -c '"type":"step"' stop.jsonl)" -ge 15 ] && break
    sleep 0.1
done
kill -USR1 "$pid"
wait "$pid"
rc=$?
[ "$rc" = 3 ] || fail "stopped 2-rank run: exit $rc, expected 3" "$(cat stop.out stop.err)"
[ -s two.ckpt ] || fail "no checkpoint two.ckpt"
note "stopped after $(grep -c '"type":"step"' stop.jsonl) steps"
expect_ok "2-rank resume" "${mpi[@]}" "$TULA_TRAIN" "${run[@]}" --metrics stop.jsonl --bucket-mb 0.01 --checkpoint two.ckpt --resume
close buckets.jsonl stop.jsonl 0

note "4: concurrent compute profile with a time floor"
expect_ok "2-rank profile" "${mpi[@]}" "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" \
    --limit-train 2000 --limit-test 100 --profile-compute --batch-sizes 8,32 --iters 2 --min-time 0.3 --threads 1 --no-db
for b in 8 32; do
    assert_match "$T_OUT" "local batch $b: [0-9.]+ ms/iter \\([0-9]+ iters, slowest of 2 ranks\\); synchronized step with its allreduce [0-9.]+ ms" "batch $b timed on 2 ranks"
done
exit 0
