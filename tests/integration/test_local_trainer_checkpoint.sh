#!/bin/bash
# tula-train's --metrics log, checkpoint and resume, without a cluster:
#  1. the --metrics file parses as JSON lines (a "run" line, one "step" line per step with
#     finite loss/lr/grad_norm/images_per_second, one "epoch" line per epoch);
#  2. determinism: two runs with the same seed have bit-identical step losses (the JSON
#     numbers are printed shortest-round-trip, so equal text = equal doubles);
#  3. a run stopped by SIGUSR1 mid-epoch exits 3 after writing the checkpoint, and the run
#     resumed with --resume has, joined to the first part, the uninterrupted run's loss, lr
#     and grad-norm trajectory and epoch results, bit for bit; its --summary records one run of
#     2 parts ("parts": 2, two "part_seconds" summing to "train_seconds") and its done line
#     says parts=2, where the uninterrupted run's summary has 1 part and its done line no parts=;
#  4. a requeued Slurm job (SLURM_RESTART_COUNT=1, same SLURM_JOB_ID) resumes by itself
#     from the default checkpoint tula-train-$SLURM_JOB_ID.ckpt;
#  5. a truncated, a corrupted and a foreign checkpoint, one of another configuration, and
#     --resume without a checkpoint are refused with one tula-train: message, exit 2, no crash;
#  6. branches: a constant-rate run with --save-epochs 1 leaves FILE.e1; a wsd decay branched off
#     it (--branch-from) has the step trajectory of the same wsd run trained from the start, bit
#     for bit, from step 50 on; a branch with another rate, --save-epochs without --checkpoint,
#     --decay-epochs without wsd or with --local-steps, and --branch-from with --resume are refused
#     (exit 2, one message).
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
command -v python3 >/dev/null || fail "python3 is needed to parse the metrics"
make_workdir
run=(--model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --epochs 2 --limit-train 3200 --limit-test 200
     --batch-size 64 --no-db --quiet --requeue no)

# compare A B [FROM]: the step and epoch lines of metrics files A and B are equal (steps >= FROM).
compare() {
    python3 - "$1" "$2" <<'EOF' || fail "metrics $1 and $2 differ"
import json, sys, math
def load(p):
    steps, epochs = {}, {}
    for ln in open(p):
        o = json.loads(ln)
        if o["type"] == "step":
            for k in ("loss", "lr", "grad_norm", "images_per_second"):
                assert o[k] is not None and math.isfinite(o[k]), (p, o)
            assert o["step"] not in steps, ("step logged twice", p, o["step"])
            steps[o["step"]] = (o["epoch"], o["step_in_epoch"], o["loss"], o["lr"], o["grad_norm"])
        elif o["type"] == "epoch":
            epochs[o["epoch"]] = (o["train_loss"], o["train_accuracy"], o["test_loss"], o["test_accuracy"])
        else:
            assert o["type"] == "run", o
    return steps, epochs
sa, ea = load(sys.argv[1])
sb, eb = load(sys.argv[2])
assert len(sa) == 100 and sorted(sa) == list(range(100)), ("steps of A", len(sa))
assert sorted(sa) == sorted(sb), ("step sets differ", len(sa), len(sb))
bad = [s for s in sa if sa[s] != sb[s]]
assert not bad, ("first differing step", bad[0], sa[bad[0]], sb[bad[0]])
assert ea == eb and sorted(ea) == [1, 2], (ea, eb)
print("same: %d steps, %d epochs; final loss %r" % (len(sa), len(ea), sa[99][2]))
EOF
}

# check_parts SUMMARY N: the run summary file's last line has "parts": N and N "part_seconds"
# (finite, > 0) whose sum is its "train_seconds", the sum of its epochs' seconds (within rounding).
check_parts() {
    python3 - "$1" "$2" <<'EOF' || fail "summary $1: not $2 parts summing to train_seconds" "$(cat "$1")"
import json, sys, math
lines = [json.loads(l) for l in open(sys.argv[1])]
s = lines[-1]
n = int(sys.argv[2])
assert s["type"] == "summary", s
assert s["parts"] == n, ("parts", s["parts"], n)
ps = s["part_seconds"]
assert isinstance(ps, list) and len(ps) == n, ps
assert all(isinstance(x, (int, float)) and math.isfinite(x) and x > 0 for x in ps), ("every part trained", ps)
total = sum(l["seconds"] for l in lines if l["type"] == "epoch")
assert abs(sum(ps) - s["train_seconds"]) <= 1e-9 * max(1.0, s["train_seconds"]), (ps, s["train_seconds"])
assert abs(total - s["train_seconds"]) <= 1e-9 * max(1.0, total), (total, s["train_seconds"])
print("parts %d: %s s, train_seconds %r" % (n, ps, s["train_seconds"]))
EOF
}

note "1-2: uninterrupted runs, twice"
expect_ok "run A" "$TULA_TRAIN" "${run[@]}" --metrics a.jsonl --summary a.summary
check_parts a.summary 1
grep -q '^tula-train: done: ' <<<"$T_OUT" || fail "run A: no done line" "$T_OUT"
grep '^tula-train: done: ' <<<"$T_OUT" | grep -q 'parts=' && fail "run A: its done line names parts" "$T_OUT"
expect_ok "run A again" "$TULA_TRAIN" "${run[@]}" --metrics a2.jsonl
compare a.jsonl a2.jsonl

# stop_midway METRICS CKPT ENV...: starts the run, sends SIGUSR1 after >= 20 logged steps
# (epoch 1 of 2: 50 steps each), expects exit 3 and the checkpoint file.
stop_midway() {
    local m=$1 c=$2; shift 2
    rm -f "$m" "$c"
    env "$@" "$TULA_TRAIN" "${run[@]}" --metrics "$m" ${c:+--checkpoint "$c"} >stop.out 2>stop.err &
    local pid=$! i
    for i in $(seq 1 600); do
        [ -f "$m" ] && [ "$(grep -c '"type":"step"' "$m")" -ge 20 ] && break
        sleep 0.1
    done
    kill -USR1 "$pid"
    wait "$pid"
    local rc=$?
    [ "$rc" = 3 ] || fail "stopped run: exit $rc, expected 3" "$(cat stop.out stop.err)"
    grep -q '^tula-train: stopped by a signal' stop.out || fail "no 'stopped by a signal' line" "$(cat stop.out)"
    local n
    n=$(grep -c '"type":"step"' "$m")
    [ "$n" -lt 100 ] || fail "the run finished before the signal ($n steps)"
    note "stopped after $n steps"
}

note "3: stop with SIGUSR1, resume"
stop_midway b.jsonl b.ckpt
[ -s b.ckpt ] || fail "no checkpoint b.ckpt"
ls b.ckpt.tmp.* >/dev/null 2>&1 && fail "a temporary checkpoint file was left behind"
expect_ok "resume" "$TULA_TRAIN" "${run[@]}" --metrics b.jsonl --checkpoint b.ckpt --resume --summary b.summary
compare a.jsonl b.jsonl
check_parts b.summary 2
grep '^tula-train: done: ' <<<"$T_OUT" | grep -q ' parts=2$' || fail "resumed run: its done line lacks parts=2" "$T_OUT"

note "4: requeued job resumes by itself"
stop_midway c.jsonl "" SLURM_JOB_ID=4242
[ -s tula-train-4242.ckpt ] || fail "no default checkpoint tula-train-4242.ckpt"
loud=()
for a in "${run[@]}"; do [ "$a" = --quiet ] || loud+=("$a"); done
run_cmd env SLURM_JOB_ID=4242 SLURM_RESTART_COUNT=1 "$TULA_TRAIN" "${loud[@]}" --metrics c.jsonl
[ "$T_RC" = 0 ] || fail "requeued run: exit $T_RC" "$T_ERR"
assert_contains "$T_OUT" "resuming from tula-train-4242.ckpt" "requeued run output"
compare a.jsonl c.jsonl

note "5: bad checkpoints"
# expect_refused WHAT NEEDLE CKPT [ARGS...]
expect_refused() {
    local what=$1 needle=$2 ck=$3; shift 3
    run_cmd "$TULA_TRAIN" "${run[@]}" --checkpoint "$ck" --resume "$@"
    [ "$T_RC" = 2 ] || fail "$what: exit $T_RC, expected 2" "$T_OUT" "$T_ERR"
    grep -E '^tula-train: ' <<<"$T_ERR" | grep -qiF -- "$needle" || fail "$what: no tula-train: message naming '$needle'" "$T_ERR"
    [ "$(count_lines "$T_ERR" 'terminate called|Segmentation|Aborted|core dumped')" = 0 ] || fail "$what: crashed" "$T_ERR"
}
size=$(stat -c %s b.ckpt)
head -c $((size / 2)) b.ckpt > trunc.ckpt
expect_refused "truncated checkpoint" "truncated" trunc.ckpt
head -c 20 b.ckpt > short.ckpt
expect_refused "checkpoint cut in its header" "truncated" short.ckpt
cp b.ckpt flip.ckpt
printf '\x55' | dd of=flip.ckpt bs=1 seek=$((size - 100)) conv=notrunc status=none
expect_refused "corrupted checkpoint" "corrupt" flip.ckpt
printf 'hello\n' > foreign.ckpt
expect_refused "foreign file" "not a tula-train checkpoint" foreign.ckpt
expect_refused "missing checkpoint" "cannot open" nothere.ckpt
expect_refused "another configuration" "lr is 0.1 here but 0.05" b.ckpt --lr 0.1

note "6: a decay branched off a saved epoch"
# 3200 / 64 = 50 steps an epoch: the trunk saves after step 50, the branch decays over epoch 2
expect_ok "constant-rate trunk" "$TULA_TRAIN" "${run[@]}" --schedule constant --checkpoint t.ckpt --save-epochs 1
[ -s t.ckpt.e1 ] || fail "--save-epochs 1 left no t.ckpt.e1"
expect_ok "wsd from the start" "$TULA_TRAIN" "${run[@]}" --schedule wsd --decay-epochs 1 --metrics w.jsonl
expect_ok "wsd branch" "$TULA_TRAIN" "${run[@]}" --schedule wsd --decay-epochs 1 --branch-from t.ckpt.e1 --metrics x.jsonl
[ "$(grep -c '"type":"step"' x.jsonl)" = 50 ] || fail "the branch ran $(grep -c '"type":"step"' x.jsonl) steps, expected 50"
python3 - w.jsonl x.jsonl <<'EOF' || fail "the branch's steps differ from the wsd run's"
import json, sys
w = {o["step"]: o for o in map(json.loads, open(sys.argv[1])) if o["type"] == "step"}
x = {o["step"]: o for o in map(json.loads, open(sys.argv[2])) if o["type"] == "step"}
assert sorted(x) == list(range(50, 100)), sorted(x)[:3]
for t in x:
    for k in ("loss", "lr", "grad_norm"):
        assert w[t][k] == x[t][k], (t, k, w[t][k], x[t][k])
EOF
# refused_branch WHAT NEEDLE ARGS...
refused_branch() {
    local what=$1 needle=$2; shift 2
    run_cmd "$TULA_TRAIN" "${run[@]}" "$@"
    [ "$T_RC" = 2 ] || fail "$what: exit $T_RC, expected 2" "$T_OUT" "$T_ERR"
    [ "$(grep -c '^tula-train: ' <<<"$T_ERR")" = 1 ] && grep -qiF -- "$needle" <<<"$T_ERR" ||
        fail "$what: not one tula-train: message naming '$needle'" "$T_ERR"
}
refused_branch "branch with another rate" "lr is 0.1 here but 0.05" --schedule wsd --decay-epochs 1 --branch-from t.ckpt.e1 --lr 0.1
refused_branch "--save-epochs without a file" "--save-epochs needs --checkpoint" --save-epochs 1
refused_branch "--decay-epochs without wsd" "--decay-epochs is for --schedule wsd" --decay-epochs 1
refused_branch "--branch-from with --resume" "not both" --branch-from t.ckpt.e1 --resume --checkpoint t.ckpt
refused_branch "--decay-epochs with Local SGD" "--decay-epochs is not implemented with --local-steps" --schedule wsd --decay-epochs 1 --local-steps 2
exit 0
