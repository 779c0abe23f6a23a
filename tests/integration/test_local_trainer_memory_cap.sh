#!/bin/bash
# test-timeout: 600
# The Local SGD memory guard end to end: under a control-group memory limit that the adaptive
# batch would outgrow, tula-train holds the batch back with one warning and finishes, where
# without the guard the kernel would kill it. No cluster needed; two 1-epoch lenet5 runs, with
# the norm test on each round's own statistics (--batch-test-beta 0): with the default EMA over
# rounds the batch stays at 64 in this one epoch (measured: noise scale 16, batch 64) and there
# is nothing to cap. One thread, so that the runs do not depend on a second core being free
# (they share the machine with the other tests and CI's package builds).
#   1. The run goes into a memory cgroup of its own (cgroup v1 memory controller under this
#      process's group, or cgroup v2 when this process is in the root group); with no limit,
#      the group's peak usage P is measured and the final batch recorded. Needs root and a
#      writable cgroup file system, else the test is skipped (SKIP, exit 77).
#   2. The same run with the group limited to P / 2 (a limit the unguarded run exceeded, so it
#      binds): exits 0 (not killed by the OOM killer: status 137), warns once "the adaptive
#      global batch is held at N examples", with N below the first run's final batch; its own
#      final batch is below the first run's and its peak stays within the limit.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA_TRAIN"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    [ -r "$T_DATA_DIR/$f" ] || fail "missing $T_DATA_DIR/$f (apt-get install dataset-fashion-mnist)"
done
make_workdir

# ---- a memory cgroup of our own: $grp, with $limit_file, $peak_file, $procs_file -----------
grp="" limit_file="" peak_file="" unlimited=""
v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -n 1)
if [ -n "$v1" ] && [ -d /sys/fs/cgroup/memory ]; then
    base=/sys/fs/cgroup/memory$v1
    [ -d "$base" ] || base=/sys/fs/cgroup/memory  # a container that shows its group as the root
    grp=$base/tula-test-$$
    limit_file=memory.limit_in_bytes peak_file=memory.max_usage_in_bytes unlimited=-1
elif [ "$(cat /proc/self/cgroup)" = "0::/" ] && grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null; then
    grp=/sys/fs/cgroup/tula-test-$$
    limit_file=memory.max peak_file=memory.peak unlimited=max
fi
[ -n "$grp" ] || skip "no memory cgroup this process can create a child in (needs root and cgroup v1's memory controller, or cgroup v2 from the root group)"
mkdir "$grp" 2>/dev/null || skip "cannot create $grp (needs root and a writable cgroup file system)"
_t_on_exit "rmdir '$grp' 2>/dev/null"
[ -w "$grp/$limit_file" ] && [ -r "$grp/$peak_file" ] || skip "$grp has no writable $limit_file or no $peak_file (kernel too old?)"

# train_in_group LIMIT: one 1-epoch Local SGD run inside $grp limited to LIMIT (bytes or
# $unlimited); leaves T_RC, T_OUT, T_ERR, and the group's peak usage in $peak (bytes).
train_in_group() {
    echo "$1" >"$grp/$limit_file" || fail "cannot set $grp/$limit_file to $1"
    [ "$peak_file" = memory.max_usage_in_bytes ] && echo 0 >"$grp/$peak_file"
    run_cmd timeout 300 sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$grp" \
        "$TULA_TRAIN" --model lenet5 --data fashion-mnist --data-dir "$T_DATA_DIR" --epochs 1 --batch-size 64 \
        --optimizer sgd --local-steps 4 --batch-test norm --batch-test-beta 0 --warmup-epochs 1 --threads 1 --seed 1 --no-db
    peak=$(cat "$grp/$peak_file")
    assert_int "peak usage of $grp" "$peak"
}
# final_batch TEXT: the global batch of the last epoch line ("... batch N").
final_batch() { sed -n 's/^epoch .* batch \([0-9][0-9]*\)$/\1/p' <<<"$1" | tail -n 1; }

# ---- 1. no limit ------------------------------------------------------------------------------
train_in_group "$unlimited"
[ "$T_RC" = 0 ] || fail "the run without a limit exited $T_RC" "stderr:" "$(_excerpt "$T_ERR")"
free_batch=$(final_batch "$T_OUT")
assert_int "final batch of the run without a limit" "$free_batch"
free_peak=$peak
assert_not_contains "$T_ERR" "held at" "no memory warning without a limit"
note "no limit: final global batch $free_batch, peak $((free_peak >> 20)) MiB"
[ "$free_batch" -gt 256 ] || fail "the norm test did not grow the batch past 256 without a limit ($free_batch): nothing to cap"

# ---- 2. limited to half the peak ------------------------------------------------------------
limit=$((free_peak / 2))
train_in_group "$limit"
! crashed "$T_RC" || fail "the run under a $((limit >> 20)) MiB limit was killed (exit $T_RC): the guard did not hold the batch back" \
    "stderr:" "$(_excerpt "$T_ERR")"
[ "$T_RC" = 0 ] || fail "the run under a $((limit >> 20)) MiB limit exited $T_RC" "stderr:" "$(_excerpt "$T_ERR")"
assert_eq 1 "$(count_lines "$T_ERR" '^tula-train: warning: the adaptive global batch is held at [0-9]+ examples')" \
    "one memory warning under the limit"
held=$(sed -n 's/^tula-train: warning: the adaptive global batch is held at \([0-9]*\) examples.*/\1/p' <<<"$T_ERR")
capped_batch=$(final_batch "$T_OUT")
assert_int "final batch under the limit" "$capped_batch"
note "limit $((limit >> 20)) MiB: held at $held, final global batch $capped_batch, peak $((peak >> 20)) MiB"
[ "$held" -lt "$free_batch" ] || fail "the warning's batch $held is not below the unlimited run's final $free_batch"
[ "$capped_batch" -lt "$free_batch" ] || fail "under the limit the batch grew to $capped_batch, the unlimited run to $free_batch"
[ "$peak" -le "$limit" ] || fail "peak usage $peak bytes above the limit $limit"
exit 0
