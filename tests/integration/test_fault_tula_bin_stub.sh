#!/bin/bash
# cli_filter.lua can never hang sbatch. Through a client configuration whose cli_filter.lua
# runs a stub `tula` that writes 1 MiB without a newline and then sleeps (in a child that keeps
# the output open), sbatch --tula=auto returns in about 6 s (timeout(1): 5 s, then a kill 1 s
# later), exits 0 with one `tula: warning:` line, and the job runs unchanged. Before, Lua read
# 64 KiB and then waited for the process to end: sbatch hung for as long as the stub slept.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/fault.sh"
fault_begin
d=$T_WORK/stub
fault_client_conf "$d"
cat > "$d/tula" <<'STUB'
#!/bin/bash
head -c 1048576 /dev/zero | tr '\0' x
sleep 120
STUB
chmod +x "$d/tula"
grep -q '^T.TULA_BIN = ' "$d/cli_filter.lua" || fail "no T.TULA_BIN line in $d/cli_filter.lua"
sed -i -e "s|^T.TULA_BIN = .*|T.TULA_BIN = \"$d/tula\"|" "$d/cli_filter.lua"
export SLURM_CONF=$d/slurm.conf XDG_DATA_HOME=$T_WORK/empty-xdg
mkdir -p "$XDG_DATA_HOME"

t0=$(_ms)
run_cmd timeout 60 sbatch --parsable --tula=auto --tula-workload="$T_WORKLOAD" -o "$T_WORK/%j.out" "$F_SCRIPT"
ms=$(( $(_ms) - t0 ))
note "sbatch --tula=auto with the stub took $ms ms; it said: $(head -c 300 <<<"$T_ERR")"
[ "$T_RC" != 124 ] || fail "sbatch hung (killed after 60 s)"
assert_eq 0 "$T_RC" "sbatch's exit status"
[ "$ms" -le 9000 ] || fail "sbatch took $ms ms; expected about 6 s (the cli_filter bound)"
[ "$ms" -ge 4000 ] || fail "sbatch took $ms ms: the stub's 5 s bound was not reached, so the test did not test it"
assert_eq 1 "$(count_lines "$T_ERR" 'tula:')" "tula: lines on sbatch's stderr"
assert_match "$T_ERR" '^tula: warning: .*job submitted unchanged' "the warning"
j=${T_OUT%%;*}
wait_job "$j" 120
expect_completed "$j" "$T_WORK/$j.out"
pgrep -f "$d/tula" >/dev/null && fail "the stub is still running after sbatch returned"
note "ok: a tula that floods and hangs costs sbatch $ms ms"
