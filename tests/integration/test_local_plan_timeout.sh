#!/usr/bin/env bash
# tula plan --timeout SECONDS (the limit tula submit-filter also takes, from cli_filter.lua):
#   - a plan that blocks (its --script is a FIFO nobody writes: open() waits for ever, as the
#     reference run under timeout(1) shows) is killed by SIGALRM after the given time: status
#     142, nothing on standard output;
#   - also when the parent left SIGALRM ignored and blocked (both survive exec);
#   - a plan that finishes prints exactly what it prints without --timeout;
#   - a bad value is one `tula:` usage error (status 2), never a crash.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA"
command -v perl >/dev/null || fail "this test needs perl (Debian package perl-base)"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg  # no profile database anywhere
: >empty.conf
mkfifo blocked.sbatch || fail "cannot create a FIFO"
P=("$TULA" plan --conf empty.conf --format kv)

ms() { echo $(( $(date +%s%N) / 1000000 )); }

# Reference: without --timeout the plan really blocks (timeout(1) has to end it).
run_cmd timeout 2 "${P[@]}" --script blocked.sbatch
assert_eq 124 "$T_RC" "without --timeout, a plan reading a FIFO nobody writes blocks (timeout(1)'s status)"

t0=$(ms)
run_cmd timeout -s KILL 10 "${P[@]}" --timeout 1 --script blocked.sbatch
took=$(( $(ms) - t0 ))
assert_eq 142 "$T_RC" "--timeout 1: killed by SIGALRM"
assert_eq "" "$T_OUT" "--timeout 1: nothing on standard output"
[ "$took" -ge 900 ] && [ "$took" -le 4000 ] || fail "--timeout 1 ended the plan after $took ms, expected about 1000"

# SIGALRM ignored and blocked by the parent, as a caller may leave it: still killed. (The outer
# timeout(1) only bounds this test if --timeout fails: it would report 137.)
t0=$(ms)
run_cmd timeout -s KILL 10 perl -e 'use POSIX; $SIG{ALRM} = "IGNORE"; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGALRM)) or die; exec @ARGV or die' \
    "${P[@]}" --timeout 1 --script blocked.sbatch
took=$(( $(ms) - t0 ))
assert_eq 142 "$T_RC" "--timeout 1 with SIGALRM ignored and blocked by the parent: killed by SIGALRM"
[ "$took" -le 4000 ] || fail "--timeout 1 with SIGALRM ignored and blocked ended the plan after $took ms"

# A plan that finishes in time is not changed by --timeout.
HW=$REPO/etc/hardware-h100-512.json
expect_ok "plan without --timeout" "${P[@]}" --hardware "$HW"
ref=$T_OUT
expect_ok "plan with --timeout 30" "${P[@]}" --timeout 30 --hardware "$HW"
assert_eq "$ref" "$T_OUT" "kv output with --timeout 30"
assert_eq ok "$(kv_get "$T_OUT" status)" "kv status with --timeout 30"
expect_ok "plan with --timeout 0 (no limit)" "${P[@]}" --timeout 0 --hardware "$HW"
assert_eq "$ref" "$T_OUT" "kv output with --timeout 0"

for bad in -1 abc 86401; do
    expect_fail "--timeout $bad" "${P[@]}" --timeout "$bad" --hardware "$HW"
    assert_eq 2 "$T_RC" "--timeout $bad: usage error"
    assert_eq 1 "$(count_lines "$T_ERR" '^tula: ')" "--timeout $bad: one tula: line"
    assert_contains "$T_ERR" "--timeout" "--timeout $bad: the message names the option"
done
note "ok: tula plan --timeout ends a blocked plan with SIGALRM and leaves a finished one alone"
