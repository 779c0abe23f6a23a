#!/usr/bin/env bash
# tula plot: a database seeded (with `tula db import`) with compute and allreduce samples of the
# form `tula profile` writes (t(b) = t0 + t1 b; allreduce alpha + beta bytes), then PNG and SVG
# plots of the plan; bad inputs give one `tula:` line and a non-zero status, never a crash.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
command -v gnuplot >/dev/null || fail "gnuplot is not installed (Debian: gnuplot-nox)"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg

# Compute: t(b) = 0.6 ms + 0.2 ms x b; allreduce: 30 us + 1 ns/byte per step (2 and 4 nodes).
{
    echo '{"format": "tula-profiles", "schema_version": 1,'
    echo ' "workloads": [{"name": "lenet5@fashion-mnist", "model": "lenet5", "dataset": "fashion-mnist",'
    echo '   "params": 61706, "train_examples": 60000, "test_examples": 10000}],'
    echo ' "compute": ['
    sep=""
    for b in 16 32 64 128; do
        t=$(awk -v b="$b" 'BEGIN { printf "%.6g", 0.0006 + 0.0002 * b }')
        printf '%s  {"workload": "lenet5@fashion-mnist", "host": "n1", "local_batch": %d, "threads": 1, "seconds_per_iter": %s, "iters": 5, "created": %d}\n' \
            "$sep" "$b" "$t" "$(date +%s)"
        sep=","
    done
    echo ' ], "allreduce": ['
    sep=""
    for n in 2 4; do
        for bytes in 4096 65536 262144; do
            t=$(awk -v n="$n" -v x="$bytes" 'BEGIN { printf "%.6g", 2 * (n - 1) * 0.00003 + 2 * (n - 1) / n * x * 1e-9 }')
            printf '%s  {"host": "n1", "nodes": %d, "bytes": %d, "seconds": %s, "created": %d}\n' "$sep" "$n" "$bytes" "$t" "$(date +%s)"
            sep=","
        done
    done
    echo ' ], "runs": []}'
} >seed.json
expect_ok "seeding the database" "$TULA" db import --db "$T_WORK/p.db" seed.json
W=(--db "$T_WORK/p.db" --workload lenet5@fashion-mnist)

# PNG: exists, PNG signature, IHDR width/height as asked, a sane size.
expect_ok "plot PNG" "$TULA" plot "${W[@]}" -o plan.png --size 900
assert_eq "plan.png" "$T_OUT" "plot prints the image path"
[ -f plan.png ] || fail "plan.png was not written"
magic=$(head -c 8 plan.png | od -An -tx1 | tr -d ' \n')
assert_eq "89504e470d0a1a0a" "$magic" "PNG signature"
width=$((16#$(od -An -tx1 -j16 -N4 plan.png | tr -d ' \n')))
height=$((16#$(od -An -tx1 -j20 -N4 plan.png | tr -d ' \n')))
assert_eq 900 "$width" "PNG width (--size)"
assert_eq 375 "$height" "PNG height (5/12 of the width)"
size=$(stat -c %s plan.png)
[ "$size" -gt 5000 ] && [ "$size" -lt 5000000 ] || fail "plan.png has an odd size: $size bytes"

# SVG by extension and with --svg; the chosen candidate of `tula plan` is named in the title.
expect_ok "plan json" "$TULA" plan "${W[@]}" --format json
chosen_nodes=$(sed -n '/"choice"/,/}/s/.*"nodes": \([0-9]*\).*/\1/p' <<<"$T_OUT" | head -n 1)
chosen_batch=$(sed -n '/"choice"/,/}/s/.*"global_batch": \([0-9]*\).*/\1/p' <<<"$T_OUT" | head -n 1)
assert_int "chosen nodes" "$chosen_nodes"
expect_ok "plot SVG" "$TULA" plot "${W[@]}" -o plan.svg
head -c 400 plan.svg | grep -q "<svg" || fail "plan.svg is not SVG" "$(head -c 300 plan.svg)"
grep -q "global batch $chosen_batch" plan.svg || fail "the SVG title does not name the plan's choice (global batch $chosen_batch)"
grep -q "exposed communication" plan.svg || fail "the SVG has no panel of the step's parts (exposed communication)"
expect_ok "plot --svg" "$TULA" plot "${W[@]}" --svg -o forced.img
head -c 400 forced.img | grep -q "<svg" || fail "--svg did not write SVG"
expect_ok "plot --policy time" "$TULA" plot "${W[@]}" --policy time -o time.png

# A tula.conf with two partitions (the second 2 ranks per node, scaled from the first's class):
# one curve per (partition, node count), named in the SVG's legend, and the title names the
# chosen partition.
printf '[partition cpu]\nnodes = 2\npeak_flops = 1e11\n[partition big]\nnodes = 2\nranks_per_node = 2\nhardware_class = big\npeak_flops = 2e11\n' >parts.conf
expect_ok "plan json, partitions" "$TULA" plan --conf parts.conf "${W[@]}" --format json
chosen_part=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["choice"]["partition"])' <<<"$T_OUT")
expect_ok "plot SVG, partitions" "$TULA" plot --conf parts.conf "${W[@]}" -o parts.svg
for label in "1 node of cpu" "2 nodes of cpu" "1 node of big" "2 nodes of big"; do
    grep -q "$label" parts.svg || fail "the legend of parts.svg lacks '$label'"
done
grep -q "nodes\? of $chosen_part x global batch" parts.svg || fail "the SVG title does not name the chosen partition $chosen_part"

# Bad inputs: one `tula:` line on stderr, non-zero status, no crash, no output file.
check_error() {  # WHAT EXPECTED_STATUS ARGS...
    local what=$1 want=$2; shift 2
    expect_fail "$what" "$TULA" plot "$@"
    assert_eq "$want" "$T_RC" "$what: exit status"
    assert_eq 1 "$(count_lines "$T_ERR" .)" "$what: one line on stderr"
    assert_match "$T_ERR" '^tula: ' "$what: message prefix"
}
check_error "unknown workload" 1 --db "$T_WORK/p.db" --workload nope@nothing -o x.png
check_error "malformed workload" 2 --db "$T_WORK/p.db" --workload nope -o x.png
check_error "no workload" 2 --db "$T_WORK/p.db" -o x.png
check_error "bad policy" 2 "${W[@]}" --policy fastest -o x.png
check_error "missing database" 1 --db "$T_WORK/none.db" --workload lenet5@fashion-mnist -o x.png
check_error "unwritable output" 1 "${W[@]}" -o "$T_WORK/no/such/dir/x.png"
check_error "size out of range" 2 "${W[@]}" --size 10 -o x.png
# gnuplot missing: a PATH without it (the command itself runs by its full path).
err=$(PATH=/nonexistent "$TULA" plot "${W[@]}" -o x.png 2>&1 >/dev/null); rc=$?
assert_eq 1 "$rc" "gnuplot missing: exit status"
assert_match "$err" '^tula: gnuplot is not installed' "gnuplot missing: message"
assert_eq 1 "$(count_lines "$err" .)" "gnuplot missing: one line on stderr"
[ ! -e x.png ] || fail "a failed plot left x.png behind"
note "ok"
