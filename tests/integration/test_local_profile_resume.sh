#!/bin/bash
# tula profile compute is resumable and shows its progress: local batches this host already has
# in the database are skipped (and named) unless --force; a run that fails part-way keeps the
# batch sizes it finished, and the same command then measures only the rest. The number of
# samples is read back with `tula db export` (an independent reader of the database), not from
# the command's own summary. Plain progress lines when stdout is not a terminal (no carriage
# return, no escape sequence); a redrawn bar on a pseudo-terminal (script(1)). No cluster needed.
. "$(dirname "$0")/lib.sh"
need_bin "$TULA" "$TULA_TRAIN"
make_workdir
unset TULA_CONF
export XDG_DATA_HOME=$T_WORK/xdg
db=$T_WORK/p.db
W=lenet5@fashion-mnist
P=(profile compute --workload "$W" --iters 1 --rounds 1 --data-dir "$T_DATA_DIR" --db "$db")

# samples B: how many compute samples of local batch B the database holds (0 when none).
samples() {
    "$TULA" db export --db "$db" | jq --argjson b "$1" '[.compute[] | select(.local_batch == $b)] | length'
}
command -v jq >/dev/null || fail "jq is not installed (Debian: jq)"

expect_ok "first profile (2,4)" "$TULA" "${P[@]}" --batch-sizes 2,4
assert_eq 1 "$(samples 2)" "samples of batch 2 after the first run"
assert_eq 1 "$(samples 4)" "samples of batch 4 after the first run"
assert_eq 2 "$(count_lines "$T_OUT" '^profile compute: [12]/2 ')" "one progress line per batch size"
assert_not_contains "$T_OUT" $'\r' "no carriage return when stdout is not a terminal"
assert_not_contains "$T_OUT" $'\033' "no escape sequence when stdout is not a terminal"

# Resume: 2 and 4 are skipped, only 8 is measured.
expect_ok "second profile (2,4,8)" "$TULA" "${P[@]}" --batch-sizes 2,4,8
assert_match "$T_OUT" '^profile compute: skipping local batches 2,4, already measured' "the skipped batch sizes are named"
assert_eq 1 "$(samples 2)" "batch 2 not measured again"
assert_eq 1 "$(samples 4)" "batch 4 not measured again"
assert_eq 1 "$(samples 8)" "batch 8 measured"
assert_eq 1 "$(count_lines "$T_OUT" '^profile compute: 1/1 ')" "one batch size measured"

# Everything already measured: nothing runs, success, the fit is still printed.
expect_ok "third profile (2,4,8), nothing to do" "$TULA" "${P[@]}" --batch-sizes 2,4,8
assert_eq 0 "$(count_lines "$T_OUT" '^profile compute: [0-9]+/[0-9]+ ')" "nothing measured"
assert_match "$T_OUT" '^profile compute: fit: .*t\(b\) = ' "the fit is printed"
assert_not_contains "$T_OUT" "round spread" "one round per batch size: no spread to report"

# --force measures again.
expect_ok "profile --force (4)" "$TULA" "${P[@]}" --batch-sizes 4 --force
assert_eq 2 "$(samples 4)" "batch 4 measured again with --force"
# The round spread: batch 4 is the only one with 2 rounds, so it is (max - min) / median of its
# two samples, read back here with tula db export; above 15 % a warning says the host was busy.
want=$("$TULA" db export --db "$db" | jq '[.compute[] | select(.local_batch == 4) | .seconds_per_iter] | sort
    | (.[1] - .[0]) / ((.[0] + .[1]) / 2) * 100')
got=$(sed -n 's/^profile compute: round spread \([0-9.]*\) %.*/\1/p' <<<"$T_OUT")
[ -n "$got" ] || fail "no round spread line after a second round of batch 4" "$T_OUT"
awk -v g="$got" -v w="$want" 'BEGIN { d = g - w; exit !(d < 0.051 && d > -0.051) }' ||
    fail "round spread: tula prints $got %, the two samples of batch 4 give $want %"
if awk -v w="$want" 'BEGIN { exit !(w > 15) }'; then
    assert_match "$T_ERR" '^tula: warning: the profile.s rounds differ by [0-9]+ %' "a busy host is named"
else
    assert_not_contains "$T_ERR" "rounds differ" "no warning below 15 %"
fi

# A trainer that fails at local batch 32: the batch sizes before it are kept, the command
# fails with one tula: line, and the same command with a working trainer resumes.
cat >flaky-train <<EOF
#!/bin/bash
for a in "\$@"; do [ "\$a" = 32 ] && { echo "tula-train: simulated failure" >&2; exit 3; }; done
exec "$TULA_TRAIN" "\$@"
EOF
chmod +x flaky-train
expect_fail "profile with a trainer failing at 32" "$TULA" "${P[@]}" --batch-sizes 16,32,64 --trainer ./flaky-train
assert_eq 1 "$T_RC" "exit status of a failed profile (tula(1): 1, a tula-train that failed)"
assert_match "$T_ERR" '^tula: profile compute failed at local batch 32: .*run again to resume' "the failure names the batch size"
assert_eq 1 "$(samples 16)" "batch 16 kept after the failure"
assert_eq 0 "$(samples 32)" "batch 32 not recorded"
assert_eq 0 "$(samples 64)" "batch 64 not reached"
expect_ok "resumed profile" "$TULA" "${P[@]}" --batch-sizes 16,32,64
assert_match "$T_OUT" '^profile compute: skipping local batch 16,' "the resumed run skips 16"
assert_eq 1 "$(samples 16)" "batch 16 still measured once"
assert_eq 1 "$(samples 32)" "batch 32 measured on resume"
assert_eq 1 "$(samples 64)" "batch 64 measured on resume"

# Rounds: batch 6 measured in 2 interleaved rounds with batch 10 (6, 10, 6, 10); asked for 3
# rounds later, only the missing third round of each runs.
expect_ok "profile --rounds 2 (6,10)" "$TULA" "${P[@]}" --batch-sizes 6,10 --rounds 2
assert_eq 2 "$(samples 6)" "two rounds of batch 6"
assert_eq 2 "$(samples 10)" "two rounds of batch 10"
assert_eq "6 10 6 10" "$(printf '%s\n' "$T_OUT" | grep -oE '^profile compute: [0-9]/4 .*local batch [0-9]+' | grep -oE '[0-9]+$' | tr '\n' ' ' | sed 's/ $//')" \
    "rounds interleaved across the batch sizes"
expect_ok "profile --rounds 3 (6,10)" "$TULA" "${P[@]}" --batch-sizes 6,10 --rounds 3
assert_match "$T_OUT" '^profile compute: local batch 6 has 2 of 3 rounds on this host; measuring 1 more' "partial rounds are named"
assert_eq 3 "$(samples 6)" "the third round of batch 6"
assert_eq 3 "$(samples 10)" "the third round of batch 10"

# On a terminal: a progress bar redrawn with carriage returns.
if command -v script >/dev/null; then
    TERM=xterm script -q -e -c "$(printf '%q ' "$TULA" "${P[@]}" --batch-sizes 2 --force)" /dev/null >tty.out 2>&1 ||
        fail "profile on a pseudo-terminal failed" "$(_excerpt "$(cat tty.out)")"
    grep -q $'\r' tty.out || fail "no carriage return (progress bar) on a terminal" "$(_excerpt "$(cat -A tty.out)")"
    grep -qE '\[#*\.*\] 1/1' tty.out || fail "no progress bar [###...] 1/1 on a terminal" "$(_excerpt "$(cat -A tty.out)")"
else
    note "script(1) not installed: terminal progress bar not checked"
fi
note "ok"
