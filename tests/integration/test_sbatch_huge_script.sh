#!/bin/bash
# A batch script of 1 MiB cannot slow a submission down: `tula plan` parses the script in one
# pass. The script is a tula-train line for lenet5 followed by 1 MiB of "tula-train " repeated
# (no newline): a scan from every tula-train word to the end of its command would be
# quadratic on it (minutes, past the 5 s tula submit-filter is given).
# sbatch --tula=auto must come back within 2 s of a plain sbatch of the same script, with a
# plan (not a timeout warning), and the held job is cancelled.
. "$(dirname "$0")/lib.sh"
begin_plan_test
script=$T_WORK/huge.sbatch
{
    printf '#!/bin/bash\n#SBATCH --hold\nmpirun tula-train --model lenet5 --data fashion-mnist --epochs 1\n# '
    head -c 1048576 /dev/zero | sed 's/\x0/tula-train /g' | head -c 1048576
    printf '\n'
} > "$script"
size=$(stat -c %s "$script")
[ "$size" -gt 1048576 ] || fail "the script is only $size bytes"
t0=$(now_ms)
run_cmd timeout 30 sbatch --parsable --hold -o /dev/null "$script"
plain_ms=$(( $(now_ms) - t0 ))
[ "$T_RC" = 0 ] || fail "plain sbatch of the 1 MiB script failed (exit $T_RC)" "$(_excerpt "$T_ERR")"
scancel "${T_OUT%%;*}" 2>/dev/null
t0=$(now_ms)
run_cmd timeout 30 sbatch --parsable --hold --tula=auto -o /dev/null "$script"
tula_ms=$(( $(now_ms) - t0 ))
[ "$T_RC" = 0 ] || fail "sbatch --tula=auto of the 1 MiB script failed (exit $T_RC)" "$(_excerpt "$T_ERR")"
scancel "${T_OUT%%;*}" 2>/dev/null
note "1 MiB script: plain sbatch $plain_ms ms, sbatch --tula=auto $tula_ms ms; it said: $(head -c 300 <<<"$T_ERR")"
[ $((tula_ms - plain_ms)) -le 2000 ] || fail "sbatch --tula=auto took $tula_ms ms, more than 2 s over plain sbatch ($plain_ms ms)"
assert_not_contains "$T_ERR" "did not answer" "sbatch's stderr (a plan, not a timeout)"
assert_match "$T_ERR" '^tula: lenet5@fashion-mnist' "sbatch's tula: line (the plan of the script's workload)"
note "ok: a 1 MiB script costs $((tula_ms - plain_ms)) ms over a plain sbatch"
