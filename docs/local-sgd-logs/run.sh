#!/bin/bash
# Local SGD batch-test EMA weight: lenet5, 2 ranks, --local-steps 4, start batch 128, 5 epochs
# (the beta-* logs of this folder; NOTE.md names the tula-train they were made with).
# Usage: docs/local-sgd-logs/run.sh [OUT [TRAINER]]
#   OUT: where the logs go (default build/local-sgd-logs of the repository); a log that has
#   tula-train's done line is not run again. TRAINER: the tula-train to run (default
#   build/bin/tula-train of the repository).
repo=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$repo/build/local-sgd-logs}
T=${2:-$repo/build/bin/tula-train}
[ -x "$T" ] || { echo "run.sh: tula-train not found at '$T'; build it (make) or pass it as the second argument" >&2; exit 2; }
mkdir -p "$out" || exit 2
for seed in 2 3 4; do
  for beta in none 0 0.5 0.9; do
    log=$out/beta-$beta-seed$seed.log
    [ -f "$log" ] && grep -q "done:" "$log" && continue
    if [ $beta = none ]; then bt=(--batch-test none); else bt=(--batch-test norm --batch-test-beta $beta); fi
    cmd=(mpirun --allow-run-as-root --oversubscribe -np 2 "$T" --model lenet5 --local-steps 4 --batch-size 128 --epochs 5
         --val-split 10000 --seed $seed "${bt[@]}" --no-db --threads 1 --prefetch off)
    { echo "command: ${cmd[*]}"; "${cmd[@]}" 2>&1; } > "$log"
  done
done
