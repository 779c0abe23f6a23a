#!/bin/bash
# scripts/ags-experiment with a stand-in trainer and a stand-in mpirun (no training, no MPI):
#  1. a run spec METHOD:BxR (local:1024x2) starts the trainer through --mpirun's command with
#     "-np 2" and the global batch B; a plain METHOD:B run (local:256) starts it without mpirun;
#  2. the kept logs are named local-256-SEED.log and local-1024x2-SEED.log;
#  3. the table has one row per (method, batch, ranks) with the ranks column, the mean test
#     accuracy of the seeds and each seed's final global batch (the last epoch line's "batch B");
#  4. --from-logs on the kept logs gives the same rows;
#  5. a batch that the rank count does not divide, or 0 ranks, is refused with exit status 2
#     and a `tula: ags-experiment: ` message;
#  6. method local-ags starts Local SGD with AGS as the local update (--optimizer ags
#     --local-steps 4 --batch-test norm), method local with plain SGD, and its row is its own.
# The stand-in trainer's accuracy and final batch depend on --batch-size and --seed, so a row
# built from the wrong run or seed shows different numbers.
. "$(dirname "$0")/lib.sh"
make_workdir
script=$REPO/scripts/ags-experiment

# stand-in tula-train: 2 epoch lines; test accuracy 0.8 + seed/100 + (batch 1024 ? 0.05 : 0),
# final batch 10 x batch + seed; records its arguments.
cat > fake-train <<'EOF'
#!/bin/bash
b=0 s=0 o=none h=0 t=none
while [ $# -gt 0 ]; do case "$1" in --batch-size) b=$2; shift ;; --seed) s=$2; shift ;; --optimizer) o=$2; shift ;;
    --local-steps) h=$2; shift ;; --batch-test) t=$2; shift ;; esac; shift; done
echo "train $b $s" >> "$(dirname "$0")/calls"
echo "options $b $o $h $t" >> "$(dirname "$0")/calls"
acc=$(awk -v b="$b" -v s="$s" 'BEGIN { printf "%.4f", 0.8 + s / 100 + (b == 1024 ? 0.05 : 0) }')
echo "tula-train: fake: global batch $b"
echo "epoch 1/2  loss 0.5  train-acc 0.8  test-acc 0.700  images/s 100  epoch-time 1.00s  noise-scale 50  batch $((2 * b))"
echo "epoch 2/2  loss 0.4  train-acc 0.9  test-acc $acc  images/s 100  epoch-time 2.00s  noise-scale 60  batch $((10 * b + s))"
echo "tula-train: done: train_seconds=3 test_accuracy=$acc global_batch=$b nodes=1"
EOF
# stand-in mpirun: records "-np N", runs the rest once
cat > fake-mpirun <<'EOF'
#!/bin/bash
echo "mpirun $1 $2" >> "$(dirname "$0")/calls"
shift 2
exec "$@"
EOF
chmod +x fake-train fake-mpirun

expect_ok "runs" timeout 120 "$script" --trainer "$T_WORK/fake-train" --mpirun "$T_WORK/fake-mpirun -np" \
    --seeds "1 2" --runs "local:256 local:1024x2" --epochs 2 --keep-logs logs --out run.md
calls=$(cat calls)
assert_eq 2 "$(count_lines "$calls" '^mpirun -np 2$')" "mpirun -np 2 once per seed of local:1024x2"
assert_eq 2 "$(count_lines "$calls" '^mpirun ')" "mpirun only for the 2-rank run"
assert_eq 2 "$(count_lines "$calls" '^train 256 ')" "the 1-rank run per seed"
assert_eq 2 "$(count_lines "$calls" '^train 1024 ')" "the 2-rank run gets the global batch"
for f in local-256-1 local-256-2 local-1024x2-1 local-1024x2-2; do
    [ -s "logs/$f.log" ] || fail "no kept log logs/$f.log" "$(ls logs)"
done

# row_of FILE BATCH RANKS: the table row of local at that batch and rank count
row_of() { grep -E "^\| local \| $2 \| $3 \| " "$1"; }
report=$(cat run.md)
r1=$(row_of run.md 256 1) || fail "no row for local 256 on 1 rank" "$(_excerpt "$report" 40)"
r2=$(row_of run.md 1024 2) || fail "no row for local 1024 on 2 ranks" "$(_excerpt "$report" 40)"
# expected from the stand-in's formulas
acc1=$(awk 'BEGIN { printf "%.4f", (0.81 + 0.82) / 2 }')
acc2=$(awk 'BEGIN { printf "%.4f", (0.86 + 0.87) / 2 }')
assert_contains "$r1" "| $acc1 ± " "mean accuracy of local 256 (seeds 1, 2)"
assert_contains "$r2" "| $acc2 ± " "mean accuracy of local 1024 on 2 ranks (seeds 1, 2)"
assert_contains "$r1" "| $((10 * 256 + 1)), $((10 * 256 + 2)) |" "final batch of each seed, local 256"
assert_contains "$r2" "| $((10 * 1024 + 1)), $((10 * 1024 + 2)) |" "final batch of each seed, local 1024 x 2"
assert_contains "$r2" "| 3.0 |" "time to 85 %: the sum of both epochs' times"

expect_ok "from logs" timeout 60 "$script" --from-logs logs --seeds "1 2" --runs "local:256 local:1024x2" --out again.md
assert_eq "$r1" "$(row_of again.md 256 1)" "--from-logs row of local 256"
assert_eq "$r2" "$(row_of again.md 1024 2)" "--from-logs row of local 1024 x 2"

# refuse WHAT NEEDLE RUNS
refuse() {
    run_cmd timeout 60 "$script" --trainer "$T_WORK/fake-train" --runs "$3" --out bad.md
    assert_eq 2 "$T_RC" "$1: exit status"
    assert_match "$T_ERR" '^tula: ags-experiment: ' "$1: message prefix"
    assert_contains "$T_ERR" "$2" "$1: the message names the problem"
    [ ! -e bad.md ] || fail "$1: a report was written"
}
refuse "batch not divisible by the ranks" "not a multiple of 3 ranks" "local:1000x3"
refuse "zero ranks" "rank count" "local:64x0"

rm -f calls
expect_ok "local-ags" timeout 120 "$script" --trainer "$T_WORK/fake-train" --seeds "1" --runs "local:512 local-ags:2048" \
    --epochs 2 --keep-logs logs2 --out both.md
calls=$(cat calls)
assert_eq 1 "$(count_lines "$calls" '^options 2048 ags 4 norm$')" "local-ags: AGS inside Local SGD with the norm test"
assert_eq 1 "$(count_lines "$calls" '^options 512 sgd 4 norm$')" "local: plain SGD inside Local SGD"
[ -s logs2/local-ags-2048-1.log ] || fail "no kept log logs2/local-ags-2048-1.log" "$(ls logs2)"
ra=$(grep -E '^\| local-ags \| 2048 \| 1 \| ' both.md) || fail "no row for local-ags 2048" "$(cat both.md)"
assert_contains "$ra" "| $((10 * 2048 + 1)) |" "final batch of local-ags 2048"
assert_contains "$(cat both.md)" "local-ags \`--optimizer ags --local-steps 4" "the options line names local-ags's options"
note "ok"
