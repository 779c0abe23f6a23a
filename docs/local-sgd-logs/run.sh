#!/bin/bash
# Local SGD batch-test EMA weight: lenet5, 2 ranks, --local-steps 4, start batch 128, 5 epochs
out=/tmp/exp/beta; mkdir -p $out
T=/tmp/exp/bin/tula-train
for seed in 2 3 4; do
  for beta in none 0 0.5 0.9; do
    log=$out/beta-$beta-seed$seed.log
    [ -f $log ] && grep -q "done:" $log && continue
    if [ $beta = none ]; then bt=(--batch-test none); else bt=(--batch-test norm --batch-test-beta $beta); fi
    cmd=(mpirun --allow-run-as-root --oversubscribe -np 2 $T --model lenet5 --local-steps 4 --batch-size 128 --epochs 5
         --val-split 10000 --seed $seed "${bt[@]}" --no-db --threads 1 --prefetch off)
    { echo "command: ${cmd[*]}"; "${cmd[@]}" 2>&1; } > $log
  done
done
