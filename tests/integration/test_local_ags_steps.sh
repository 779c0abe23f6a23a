#!/bin/bash
# scripts/ags-steps (steps to the target accuracy with warmup-stable-decay branches):
#  1. --from-logs on logs written by the test: each T's mean final test accuracy with its 95 %
#     t half-width, a seed's steps to the target (T x the steps per epoch its header gives, of
#     the shortest branch reaching the study's reference minus 0.01), "not reached" when no
#     branch does, and the seed-paired ratio of the baseline's steps to AGS's; --note and the
#     log directory's NOTE.md are in the report;
#  2. with the real tula-train on 2,000 images: a trunk and one branch per T run with the
#     chosen multiplier's recipe (constant rate and --save-epochs for the trunk, wsd
#     --decay-epochs D --branch-from for the branches), the saved states are removed, a second
#     invocation trains nothing;
#  3. a missing selection file and a bad option: exit status 2, one `tula: ags-steps: ` message.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
make_workdir
script=$REPO/scripts/ags-steps
command -v python3 > /dev/null || skip "python3 is not installed"

cat > sel.txt <<'EOF'
chosen sgd 64 1 wsd
chosen lamb 1000 0.5 cosine
chosen ags 1000 2 wsd
reference 64 0.905000 0.010000
EOF
mkdir logs
# fake METHOD SEED T ACC: a finished branch log of batch 1000 with 40 steps per epoch
fake() {
    { printf 'tula-train: lenet5@fashion-mnist: 61706 parameters; %d epochs of 40 steps; lr 0.1\n' "$3"
      printf 'tula-train: done: train_seconds=1 test_accuracy=%s global_batch=1000 nodes=1 ranks=1 epochs=%d\n' "$4" "$3"
    } > "logs/$1-1000-seed$2-T$3.log"
}
# target 0.895: ags reaches it at T=5 (seed 2) and T=10 (seed 3); lamb at T=10 (seed 2), never (seed 3)
fake ags 2 3 0.85;  fake ags 2 5 0.90;  fake ags 2 10 0.91
fake ags 3 3 0.84;  fake ags 3 5 0.89;  fake ags 3 10 0.90
fake lamb 2 3 0.80; fake lamb 2 5 0.88; fake lamb 2 10 0.896
fake lamb 3 3 0.81; fake lamb 3 5 0.87; fake lamb 3 10 0.89
opts=(--selection sel.txt --batches 1000 --methods "ags lamb" --seeds "2 3" --totals "3 5 10")
printf 'Made by fake().\n' > logs/NOTE.md
expect_ok "from logs" timeout 60 "$script" "${opts[@]}" --logs logs --from-logs --out report.md --note "A note."
report=$(cat report.md)
assert_contains "$report" "A note." "--note"
assert_contains "$report" "Made by fake()." "the log directory's NOTE.md"
assert_contains "$report" "minus 0.01: **0.8950**" "the target"
# ags T=5: 0.90, 0.89: mean 0.895, sd 0.00707, t(1) 12.706: half-width 0.0635
assert_contains "$report" "| ags | 1000 | 0.8450 ± 0.0635 | 0.8950 ± 0.0635 | 0.9050 ± 0.0635 |" "accuracy row of ags"
assert_contains "$report" "| ags | 1000 | 40 | seed 2: 200 (5), seed 3: 400 (10) | 300 ± 1271 | 7.5 ± 31.8 |" "steps of ags"
assert_contains "$report" "| lamb | 1000 | 40 | seed 2: 400 (10), seed 3: not reached in 10 epochs | not every seed | - |" "steps of lamb"
assert_contains "$report" "- batch 1000, lamb / ags: 2.00 (left out: seed 3)" "the paired ratio"
# an AGS variant is compared with the baselines and with ags: ags-first reaches the target at
# T=10 (seed 2) and T=5 (seed 3)
echo "chosen ags-first 1000 1 wsd" >> sel.txt
fake ags-first 2 3 0.80; fake ags-first 2 5 0.89; fake ags-first 2 10 0.90
fake ags-first 3 3 0.85; fake ags-first 3 5 0.90; fake ags-first 3 10 0.90
expect_ok "from logs, a variant" timeout 60 "$script" "${opts[@]/ags lamb/ags lamb ags-first}" --logs logs --from-logs --out variant.md
variant=$(cat variant.md)
assert_contains "$variant" "- batch 1000, lamb / ags: 2.00 (left out: seed 3)" "the ratio of the baseline to ags"
assert_contains "$variant" "- batch 1000, lamb / ags-first: 1.00 (left out: seed 3)" "the ratio of the baseline to the variant"
# ags / ags-first: seed 2 200 / 400, seed 3 400 / 200: 0.5 and 2, mean 1.25
assert_contains "$variant" "- batch 1000, ags / ags-first: 1.25 ± " "the ratio of ags to the variant"

note "the real trainer"
small=(--selection sel.txt --batches 1000 --methods "ags lamb" --seeds 2 --totals "2 3" --val-split 1000 --jobs 2
       --logs run --work work --out run.md --trainer "$TULA_TRAIN" -- --data-dir "$T_DATA_DIR" --limit-train 3000 --limit-test 200)
expect_ok "steps study" timeout 300 "$script" "${small[@]}"
for m in ags lamb; do
    for r in trunk T2 T3; do
        grep -q '^tula-train: done:' "run/$m-1000-seed2-$r.log" || fail "no done line in run/$m-1000-seed2-$r.log" "$(cat "run/$m-1000-seed2-$r.log")"
    done
done
trunk=$(head -n 1 run/ags-1000-seed2-trunk.log)
assert_match "$trunk" '--batch-size 1000 --seed 2 --val-split 1000 --threads 1 --no-db --optimizer ags --lr 0.1 .*--epochs 2 --schedule constant --checkpoint work/ags-1000-seed2.ckpt --save-epochs 1,2' "the trunk's command"
assert_match "$(head -n 1 run/lamb-1000-seed2-T3.log)" '--optimizer lamb --lr-scaling sqrt --lr 0.005 .*--epochs 3 --schedule wsd --decay-epochs 1 --branch-from work/lamb-1000-seed2.ckpt.e2' "a branch's command"
assert_contains "$(cat run/ags-1000-seed2-T3.log)" "branching from work/ags-1000-seed2.ckpt.e2 at epoch 3" "the branch starts from the saved state"
[ -z "$(ls work)" ] || fail "saved states were left behind" "$(ls work)"
assert_contains "$(cat run.md)" "| ags | 1000 | 2 |" "the steps table of the real runs (2 steps per epoch)"
stamp=$(stat -c %Y run/*.log | sort | tail -n 1)
sleep 1
expect_ok "again" timeout 120 "$script" "${small[@]}"
assert_eq "$stamp" "$(stat -c %Y run/*.log | sort | tail -n 1)" "no run trained again"

run_cmd timeout 60 "$script" --batches 1000
assert_eq 2 "$T_RC" "no selection: exit status"
assert_eq 1 "$(count_lines "$T_ERR" '.')" "one message"
assert_match "$T_ERR" '^tula: ags-steps: --selection FILE is required' "the message"
run_cmd timeout 60 "$script" --selection sel.txt --decay-share 1.5
assert_eq 2 "$T_RC" "bad --decay-share: exit status"
assert_match "$T_ERR" "^tula: ags-steps: --decay-share: '1.5' is not a number in \(0, 1\)" "the message"
run_cmd timeout 60 "$script" --selection sel.txt --batches 2048
assert_eq 2 "$T_RC" "a batch the selection lacks: exit status"
assert_match "$T_ERR" '^tula: ags-steps: --selection: no chosen configuration of ags at batch 2048' "the message"
note "ok"
