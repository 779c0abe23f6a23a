#!/bin/bash
# scripts/ags-study on logs written by the test (no training) and with a stand-in trainer:
#  1. --from-logs on fabricated logs: the selection table marks each row's best validation
#     accuracy (a run without a done line shows "failed"), the test table has the mean ± 95 %
#     t half-width of the chosen configuration's test seeds and the diverged seeds, each
#     method's critical batch (within 0.01 of tuned SGD at the reference batch, no seed
#     diverged) and AGS's multiplier over the best baseline, and the seed-paired AGS minus
#     tuned SGD, AGS minus the best tuned baseline without a diverged seed, and AGS minus the weak baseline (method "linear": SGD, uncapped linear scaling,
#     x1 cosine, the selection seed included);
#  2. a missing test log shows as missing and takes the batch out of the critical batch, and so
#     does a test accuracy below 0.2 (a diverged seed); a cell without any log is named as not
#     measured beside the critical batch and the multiplier;
#  3. with a stand-in trainer: each run once with the recipe's options (sgd capped at 0.4 x the
#     multiplier, lamb with square-root scaling from 0.01, ags-sqrt with AGS's square-root rate
#     rule, the weak baseline uncapped), one
#     progress line per run, and a second invocation trains nothing (every log has its done line);
#     --note's paragraph is in the report (and the log directory's NOTE.md in 1.);
#  4. a bad option: exit status 2, one `tula: ags-study: ` message, no report;
#  5. SIGTERM stops the study and the trainings in flight (none is left running), no report;
#  6. --print-selection prints each cell's choice and the reference accuracy, and no report.
. "$(dirname "$0")/lib.sh"
make_workdir
script=$REPO/scripts/ags-study
command -v python3 > /dev/null || skip "python3 is not installed"

grid=(--methods "sgd lars ags" --batches "256 1024" --reference-batch 64 --lr-mults "1 2" --schedules cosine
      --select-seed 1 --seeds "2 3" --epochs 1 --val-split 1000)
mkdir logs
# fake METHOD BATCH MULT SEED TEST [VAL]: a finished run's log (cosine)
# (in the directory $D, default logs)
fake() {
    local f="${D:-logs}/$1-$2-lr$3-cosine-seed$4.log"
    printf 'tula: ags-study: command: tula-train --batch-size %s\n' "$2" > "$f"
    printf 'tula-train: done: train_seconds=1 test_accuracy=%s global_batch=%s nodes=1 ranks=1 epochs=1%s\n' \
        "$5" "$2" "${6:+ val_accuracy=$6}" >> "$f"
}
# selection runs (seed 1): test accuracies only matter for the weak-baseline pairs
fake sgd 64 1 1 0.89 0.90;    fake sgd 64 2 1 0.80 0.80
fake sgd 256 1 1 0.84 0.85;   fake sgd 256 2 1 0.87 0.88
fake sgd 1024 1 1 0.70 0.70;  fake sgd 1024 2 1 0.75 0.75
fake lars 256 1 1 0.85 0.86;  echo "tula-train: training diverged in epoch 1 (loss nan)" > logs/lars-256-lr2-cosine-seed1.log
fake lars 1024 1 1 0.60 0.60; fake lars 1024 2 1 0.65 0.65
fake ags 256 1 1 0.88 0.89;   fake ags 256 2 1 0.86 0.87
fake ags 1024 1 1 0.87 0.88;  fake ags 1024 2 1 0.89 0.89
# test seeds of the chosen configurations
fake sgd 64 1 2 0.90;   fake sgd 64 1 3 0.91     # reference: 0.905, target 0.895
fake sgd 256 2 2 0.90;  fake sgd 256 2 3 0.89    # 0.895: just within
fake sgd 1024 2 2 0.88; fake sgd 1024 2 3 0.90    # 0.89: 0.015 short
fake lars 256 1 2 0.92; fake lars 256 1 3 0.93
fake lars 1024 2 2 0.91                          # seed 3 diverged (no done line):
echo "tula-train: training diverged in epoch 1 (loss nan)" > logs/lars-1024-lr2-cosine-seed3.log
fake ags 256 1 2 0.90;  fake ags 256 1 3 0.91
fake ags 1024 2 2 0.90; fake ags 1024 2 3 0.90
# the weak baseline (linear x1 cosine) on the selection and test seeds
fake linear 256 1 1 0.84;  fake linear 256 1 2 0.85;  fake linear 256 1 3 0.86
fake linear 1024 1 1 0.70; fake linear 1024 1 2 0.70; fake linear 1024 1 3 0.70

printf 'Made by fake().\n' > logs/NOTE.md
expect_ok "from logs" timeout 60 "$script" "${grid[@]}" --logs logs --from-logs --out report.md
report=$(cat report.md)
assert_contains "$report" "| sgd | 64 (reference) | **0.9000** | 0.8000 | x1 cosine *edge* |" "selection of the reference"
assert_contains "$report" "| sgd | 256 | 0.8500 | **0.8800** | x2 cosine *edge* |" "selection of sgd 256"
assert_contains "$report" "| lars | 256 | **0.8600** | failed | x1 cosine *edge* |" "a diverged selection run"
assert_contains "$report" "| ags | 1024 | 0.8800 | **0.8900** | x2 cosine *edge* |" "selection of ags 1024"
# seeds 0.90, 0.91: sd 0.00707, t(1) 12.706, half-width 12.706 * 0.00707 / sqrt(2) = 0.0635
assert_contains "$report" "| 64 (reference) | 0.9050 ± 0.0635 | - | - |" "reference row"
assert_contains "$report" "| 256 | 0.8950 ± 0.0635 | 0.9250 ± 0.0635 | 0.9050 ± 0.0635 |" "test row of batch 256"
assert_contains "$report" "| 1024 | 0.8900 ± 0.1271 | 0.9100 (one seed, no interval); diverged: seed 3 | 0.9000 ± 0.0000 |" "test row of batch 1024"
assert_contains "$report" "mean test accuracy 0.9050" "the target"
crit=$(sed -n '/^## Critical batch/,/^## AGS minus tuned/p' report.md)
assert_contains "$crit" "| sgd | 256 |" "critical batch of sgd (1024 is 0.015 short)"
assert_contains "$crit" "| lars | 256 |" "critical batch of lars (1024 has a diverged seed)"
assert_contains "$crit" "| ags | 1024 |" "critical batch of ags"
assert_contains "$report" "1024 / 256 = 4." "critical-batch multiplier"
tuned=$(sed -n '/^## AGS minus tuned SGD/,/^## AGS minus untuned/p' report.md)
assert_contains "$tuned" "| 256 | 2 | +0.0100 ± 0.1271 |" "AGS - tuned SGD at 256"
assert_contains "$tuned" "| 1024 | 2 | +0.0100 ± 0.1271 |" "AGS - tuned SGD at 1024"
assert_contains "$tuned" "Mean over the 2 batches with pairs: +0.0100" "AGS - tuned SGD over the batches"
best=$(sed -n '/^## AGS minus the best tuned baseline/,/^## AGS minus untuned/p' report.md)
# 256: lars (0.925) is best; 1024: lars has a diverged seed, sgd (0.89) is the only one left
assert_contains "$best" "| 256 | lars | 2 | -0.0200 ± 0.0000 |" "AGS - the best baseline at 256"
assert_contains "$best" "| 1024 | sgd | 2 | +0.0100 ± 0.1271 |" "AGS - the best baseline at 1024 (lars has a diverged seed)"
weak=$(sed -n '/^## AGS minus untuned/,/^## Not measured/p' report.md)
# 256: (0.88, 0.90, 0.91) - (0.84, 0.85, 0.86); 1024: (0.89, 0.90, 0.90) - 0.70
assert_contains "$weak" "| 256 | 3 | +0.0467 ± 0.0143 |" "AGS - weak baseline at 256 (selection seed paired too)"
assert_contains "$weak" "| 1024 | 3 | +0.1967 ± 0.0143 |" "AGS - weak baseline at 1024"
assert_contains "$weak" "weak baseline" "the weak baseline is labelled"
assert_not_contains "$report" "Incomplete" "every run has a log"
assert_contains "$report" "Made by fake()." "the log directory's NOTE.md"
expect_ok "print the selection" timeout 60 "$script" "${grid[@]}" --logs logs --print-selection --out nothing.md
assert_contains "$T_OUT" "chosen ags 1024 2 cosine" "a chosen configuration"
assert_contains "$T_OUT" "chosen lars 256 1 cosine" "the choice beside a failed run"
assert_contains "$T_OUT" "reference 64 0.905000 0.010000" "the reference line"
[ ! -e nothing.md ] || fail "--print-selection wrote a report"

rm logs/ags-1024-lr2-cosine-seed3.log
fake sgd 256 2 3 0.19
expect_ok "from logs, one missing" timeout 60 "$script" "${grid[@]}" --logs logs --from-logs --out missing.md
missing=$(cat missing.md)
assert_contains "$missing" "0.9000 (one seed, no interval); missing: seed 3 |" "a missing test seed"
assert_contains "$missing" "| 256 | 0.5450 ± 4.5106; diverged: seed 3 |" "a test accuracy below 0.2 is a diverged seed"
crit=$(sed -n '/^## Critical batch/,/^## AGS minus tuned/p' missing.md)
assert_contains "$crit" "| sgd | none |" "sgd's critical batch with a diverged seed"
assert_contains "$crit" "| ags | 256 |" "AGS's critical batch without its 1024 seed"
assert_contains "$missing" "256 / 256 = 1." "multiplier without AGS's 1024 seed"
assert_contains "$missing" "Incomplete: 1 run of the study has no log yet." "the missing run is counted"

# a cell without any log (lars and ags not run at 1024): its critical batch and the multiplier
# say where the method was not measured, instead of reading it as not met
mkdir partial
cp logs/*.log partial/
rm partial/lars-1024-* partial/ags-1024-*
expect_ok "from logs, unmeasured cells" timeout 60 "$script" "${grid[@]}" --logs partial --from-logs --out partial.md
crit=$(sed -n '/^## Critical batch/,/^## AGS minus tuned/p' partial.md)
assert_contains "$crit" "| lars | 256; not measured at 1024 |" "a critical batch below an unmeasured batch"
assert_contains "$crit" "| sgd | none |" "a method measured at every batch has no note (its 256 has a diverged seed)"
assert_contains "$crit" "256 / 256 = 1." "the multiplier from the measured batches"
assert_contains "$crit" "(lars at 1024), which would lower AGS's multiplier" "the baselines' unmeasured batches bound the multiplier"
assert_contains "$crit" "AGS's may be larger where it was not measured (at 1024), which would raise it" "AGS's unmeasured batches bound it too"
assert_not_contains "$(sed -n '/^## Critical batch/,/^## AGS minus tuned/p' report.md)" "Not every batch was measured" \
    "a complete study has no such note"
rm partial/lars-256-*
expect_ok "from logs, no baseline measured where it meets the target" timeout 60 "$script" "${grid[@]}" --logs partial \
    --from-logs --out partial2.md
assert_contains "$(cat partial2.md)" "| lars | none; not measured at 256, 1024 |" "a method measured nowhere"
assert_contains "$(cat partial2.md)" "no baseline at any batch of the grid where it was measured" "the undefined multiplier says so"
# a baseline unmeasured only at or below the largest baseline critical batch (sgd at 256, lars
# meeting the target at 1024) cannot change the multiplier: its row says where, the bound does not
mkdir partial3
cp logs/*.log partial3/
rm partial3/sgd-256-*
D=partial3 fake lars 1024 2 3 0.91
expect_ok "from logs, unmeasured below the baselines' critical batch" timeout 60 "$script" "${grid[@]}" --logs partial3 \
    --from-logs --out partial3.md
crit=$(sed -n '/^## Critical batch/,/^## AGS minus tuned/p' partial3.md)
assert_contains "$crit" "| sgd | none; not measured at 256 |" "the row names the unmeasured batch"
assert_contains "$crit" "| lars | 1024 |" "the largest baseline critical batch"
assert_contains "$crit" "256 / 1024 = 0.25." "the multiplier"
assert_not_contains "$crit" "Not every batch was measured" "no bound from batches that cannot raise the largest baseline critical batch"

# stand-in trainer: val and test accuracy from the batch and the rate; records its arguments
cat > fake-train <<'EOF'
#!/bin/bash
b=0 lr=0 args="$*"
while [ $# -gt 0 ]; do case "$1" in --batch-size) b=$2; shift ;; --lr) lr=$2; shift ;; esac; shift; done
echo "$args" >> "$(dirname "$0")/calls"
acc=$(awk -v b="$b" -v lr="$lr" 'BEGIN { printf "%.4f", 0.9 - b / 100000 - (lr - 0.05) ^ 2 }')
echo "tula-train: done: train_seconds=1 test_accuracy=$acc global_batch=$b nodes=1 ranks=1 epochs=1 val_accuracy=$acc"
EOF
chmod +x fake-train
small=(--methods "sgd lamb ags ags-sqrt" --batches 512 --lr-mults "0.5 1" --schedules cosine --seeds 2 --epochs 1 --val-split 100)
expect_ok "stand-in trainer" timeout 120 "$script" --trainer "$T_WORK/fake-train" "${small[@]}" --logs run --out run.md --jobs 2 \
    --note "Runs made by the stand-in trainer."
calls=$(cat calls)
# selection: 5 cells (sgd 64, sgd 512, lamb 512, ags 512, ags-sqrt 512) x 2 rates; weak
# baseline: linear 512 x1 on seeds 1 and 2; tests: 5 cells on seed 2
n=$(count_lines "$calls" '.')
assert_eq 17 "$n" "runs of the stand-in study"
assert_eq "$n" "$(sort -u calls | wc -l)" "no run twice"
assert_match "$calls" '--batch-size 512 .*--optimizer sgd --lr-scaling linear --lr-max 0.2 --lr 0.025 --schedule cosine' "sgd recipe at x0.5"
assert_match "$calls" '--optimizer lamb --lr-scaling sqrt --lr 0.01 --schedule cosine' "lamb recipe at x1"
assert_match "$calls" '--optimizer ags --ags-rate-rule sqrt --lr 0.025 --schedule cosine' "ags-sqrt recipe at x0.5"
assert_match "$calls" '--batch-size 512 --seed 2 .*--optimizer sgd --lr-scaling linear --lr-max 0 --lr 0.05 --schedule cosine' "weak baseline recipe"
assert_contains "$(cat run.md)" "Runs made by the stand-in trainer." "the note"
assert_match "$calls" '--seed 1 --val-split 100 --threads 1 --no-db --quiet --optimizer ags --lr 0.05 --schedule cosine' "ags recipe"
assert_eq "$n" "$(count_lines "$T_ERR" '^tula: ags-study: \[[0-9]+/[0-9]+\] ')" "one progress line per run"
assert_match "$T_ERR" '^tula: ags-study: \[[0-9]+/17\] ags B=512 lr x1 cosine seed 2: test 0\.8949 \([0-9]+ s\)$' "progress line of a test run"
rm calls
expect_ok "resumed" timeout 120 "$script" --trainer "$T_WORK/fake-train" "${small[@]}" --logs run --out again.md \
    --note "Runs made by the stand-in trainer."
[ ! -e calls ] || fail "a finished run was trained again" "$(cat calls)"
assert_eq "$(sed 6d run.md)" "$(sed 6d again.md)" "the resumed report (but its command line)"

run_cmd timeout 60 "$script" --trainer "$T_WORK/fake-train" --seeds "1 2" --out bad.md
assert_eq 2 "$T_RC" "selection seed among the test seeds: exit status"
assert_eq 1 "$(count_lines "$T_ERR" '.')" "one message"
assert_match "$T_ERR" '^tula: ags-study: --seeds: 1 is the selection seed' "the message names the problem"
[ ! -e bad.md ] || fail "a report was written for bad options"
# SIGTERM: a trainer that runs until it is killed; the study and its trainings stop
printf '#!/bin/bash\necho started >> "$(dirname "$0")/slow-started"\nexec sleep 321\n' > slow-train
chmod +x slow-train
"$script" --trainer "$T_WORK/slow-train" "${small[@]}" --logs slow --out slow.md --jobs 2 2> slow.err &
study=$!
for _ in $(seq 100); do [ "$(cat slow-started 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.1; done
[ "$(cat slow-started 2>/dev/null | wc -l)" -ge 2 ] || fail "the stand-in trainings did not start" "$(cat slow.err)"
kill -TERM "$study"
wait "$study"
assert_eq 130 "$?" "exit status after SIGTERM"
sleep 0.5
n_left=$(ps -eo args | grep -c '^sleep 321$')
ps -eo pid=,args= | awk '$2 == "sleep" && $3 == "321" { print $1 }' | xargs -r kill 2>/dev/null
assert_eq 0 "$n_left" "trainings left running after SIGTERM"
[ ! -e slow.md ] || fail "a report was written after SIGTERM"

# the mean over the large batches (1024 up): each seed's mean difference over them, then a
# t-interval over the seeds; 1024: AGS - SGD = +0.02, +0.04 (seeds 2, 3), 2048: +0.08, +0.02, so
# the seeds' means are 0.05 and 0.03: +0.0400 ± 12.706 x 0.01414 / sqrt(2) = 0.1271 (pooling the
# four differences instead would give ± 0.0450)
mkdir mean-logs
for c in "sgd 64 0.90" "sgd 1024 0.80" "sgd 2048 0.80" "ags 1024 0.85" "ags 2048 0.85"; do
    read -r m b v <<<"$c"; D=mean-logs fake "$m" "$b" 1 1 "$v" "$v"
done
D=mean-logs fake sgd 64 1 2 0.90;    D=mean-logs fake sgd 64 1 3 0.91
D=mean-logs fake sgd 1024 1 2 0.88;  D=mean-logs fake sgd 1024 1 3 0.86
D=mean-logs fake ags 1024 1 2 0.90;  D=mean-logs fake ags 1024 1 3 0.90
D=mean-logs fake sgd 2048 1 2 0.80;  D=mean-logs fake sgd 2048 1 3 0.85
D=mean-logs fake ags 2048 1 2 0.88;  D=mean-logs fake ags 2048 1 3 0.87
expect_ok "mean over the large batches" timeout 60 "$script" --methods "sgd ags" --batches "1024 2048" --lr-mults 1 \
    --schedules cosine --seeds "2 3" --epochs 1 --val-split 1000 --logs mean-logs --from-logs --out mean.md
tuned=$(sed -n '/^## AGS minus tuned SGD/,/^## AGS minus the best/p' mean.md)
assert_contains "$tuned" "| 2048 | 2 | +0.0500 ± 0.3812 |" "AGS - tuned SGD at 2048"
assert_contains "$tuned" "Mean over the batches from 1024 up (1024, 2048): +0.0400 ± 0.1271, over 2 seeds" "the large batches' mean and its interval over the seeds"

# --extend-edges: a choice at its row's lowest (highest) multiplier adds the next one below
# (above), by the grid's own ratio, with every schedule; fabricated logs, then a stand-in study
ext=(--methods "sgd ags" --batches 1024 --reference-batch 64 --lr-mults "1 2" --schedules cosine
     --select-seed 1 --seeds 2 --epochs 1 --val-split 1000)
mkdir ext-logs
fakex() { D=ext-logs fake "$@"; }
fakex sgd 64 1 1 0.90 0.90;    fakex sgd 64 2 1 0.80 0.80;    fakex sgd 64 0.5 1 0.85 0.85
fakex sgd 1024 1 1 0.70 0.70;  fakex sgd 1024 2 1 0.75 0.75;  fakex sgd 1024 4 1 0.60 0.60
fakex ags 1024 1 1 0.88 0.88;  fakex ags 1024 2 1 0.89 0.89
expect_ok "extended grid, one extension not run" timeout 60 "$script" "${ext[@]}" --extend-edges 1 --logs ext-logs --from-logs --out ext1.md
assert_contains "$(cat ext1.md)" "| sgd | 64 (reference) | 0.8500 | **0.9000** | 0.8000 | - | x1 cosine |" "the low edge extended: x1 is inside"
assert_contains "$(cat ext1.md)" "| sgd | 1024 | - | 0.7000 | **0.7500** | 0.6000 | x2 cosine |" "the high edge extended: x2 is inside"
assert_contains "$(cat ext1.md)" "| ags | 1024 | - | 0.8800 | **0.8900** | missing | x2 cosine |" "the extension's run not yet made"
assert_contains "$(cat ext1.md)" "Incomplete: 4 runs of the study have no log yet." "the extension and the test seeds are counted"
fakex ags 1024 4 1 0.895 0.895
expect_ok "extended grid" timeout 60 "$script" "${ext[@]}" --extend-edges 1 --logs ext-logs --from-logs --out ext2.md
assert_contains "$(cat ext2.md)" "| ags | 1024 | - | 0.8800 | 0.8900 | **0.8950** | x4 cosine *edge* |" "one extension at most: still at the edge"
assert_contains "$(cat ext2.md)" "(the grid and its extensions): sgd 3, ags 3" "selection runs per method (the reference batch's not counted)"
expect_ok "extended selection" timeout 60 "$script" "${ext[@]}" --extend-edges 1 --logs ext-logs --print-selection
assert_contains "$T_OUT" "chosen ags 1024 4 cosine" "the extended choice is printed"
expect_ok "no extension" timeout 60 "$script" "${ext[@]}" --logs ext-logs --print-selection
assert_contains "$T_OUT" "chosen ags 1024 2 cosine" "--extend-edges 0: the given grid only"
run_cmd timeout 60 "$script" "${ext[@]}" --extend-edges 9 --logs ext-logs --from-logs --out bad.md
assert_eq 2 "$T_RC" "--extend-edges 9: exit status"
assert_match "$T_ERR" "^tula: ags-study: --extend-edges: '9' is not an integer from 0 to 4" "--extend-edges out of range"
# stand-in: the best rate is 0.05; sgd (base 0.05) from x0.25 x0.5 goes up to x1 (best) and x2;
# lamb (base 0.01) goes up twice, to x2, and stays at the edge
rm -f calls
expect_ok "stand-in, extended" timeout 120 "$script" --trainer "$T_WORK/fake-train" --methods "sgd lamb" --batches 512 \
    --lr-mults "0.25 0.5" --schedules cosine --seeds 2 --epochs 1 --val-split 100 --extend-edges 2 --logs ext-run --out ext-run.md
assert_eq 15 "$(count_lines "$(cat calls)" '.')" "runs: 3 cells x (2 + 2 extensions), 3 test runs"
assert_contains "$T_ERR" "round 2 of the edge extension: 3 selection runs" "the second round"
assert_match "$(cat ext-run.md)" '^\| sgd \| 512 \| .* \| x1 cosine \|$' "sgd's extended choice, inside its grid"
assert_match "$(cat ext-run.md)" '^\| lamb \| 512 \| .* \| x2 cosine \*edge\* \|$' "lamb at the edge after two extensions"
assert_match "$(cat calls)" '--batch-size 512 --seed 2 .*--optimizer lamb --lr-scaling sqrt --lr 0.02 ' "lamb's test runs at x2"
note "ok"
