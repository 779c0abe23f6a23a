#!/bin/bash
# etc/cli_filter.lua under lua5.1 without Slurm, as transport: a mocked `slurm` table and
# `options` object (with Slurm's getter conventions: nodes "1-0" and time as NO_VAL minutes when
# not given) and a fake `tula` that logs its arguments and standard input and answers
# `submit-filter` as told. The decisions themselves are tula submit-filter's, unit-tested in
# tests/unit/test_cli_submit.cpp. Checks that
#   - a submission that does not name Tula (no --tula, --tula-deadline, --tula-budget or
#     $TULA_MODE), srun, and later het-job components run nothing and change nothing;
#   - sbatch's options reach `tula submit-filter` intact (single-quote escaping, no shell
#     injection), with --timeout 5 under timeout(1), and the script on standard input stays
#     readable by it;
#   - the decision record (record= lines) is written verbatim into the plugin's memory file
#     (TULA_PLUGSTACK_PLAN), one line each, whatever the action but refused, and nothing is
#     written without one;
#   - an answer `measure` sets --export (its record has no plan table); the user's own --export
#     reaches it as "export=given", never its values;
#   - an answer `changed` sets the options it names (only nodes, time, partition,
#     ntasks-per-node, gpus-per-node) and prints its lines; `unchanged` prints its lines and
#     sets nothing; `refused` returns an error with its line;
#   - its cheap gate (T.names_tula) starts `tula submit-filter` for every submission that the
#     filter's own decision (the real tula, mode_of in cli/submit.cpp) would not leave silently
#     alone, and T.SPANK lists the options the plugin registers (plugin/spank_tula.c);
#   - a filter that fails, hangs (killed by SIGALRM, status 142), is missing, writes garbage or
#     1 MiB without end, or a memory file that cannot be written: the job is unchanged with one
#     `tula: warning: ...; job submitted unchanged` line (strict: refused with one error line),
#     and the hook returns within about PLAN_TIMEOUT + 1 s; an error inside the hook is a
#     warning, also under strict.
# Prints PASS/FAIL per case; exits non-zero on any failure. No cluster needed.
. "$(dirname "$0")/lib.sh"
command -v lua5.1 >/dev/null || fail "lua5.1 is not installed (apt-get install lua5.1)"
make_workdir

# The script as installed: the placeholder substituted (like make install / scripts/tula-cluster).
sed -e "s|@TULA_BIN@|$T_WORK/bin/tula|g" "$REPO/etc/cli_filter.lua" > "$T_WORK/cli_filter.lua" ||
    fail "cannot substitute etc/cli_filter.lua"
grep -v '^ *--' "$T_WORK/cli_filter.lua" | grep -q '@TULA_' && fail "placeholders left in cli_filter.lua after substitution"
mkdir -p "$T_WORK/bin" "$T_WORK/etc"

# Fake CLI: logs its arguments (one per line) to $FAKE_LOG and its standard input, when that is
# a regular file, to $FAKE_LOG.stdin; answers according to $FAKE_MODE.
cat > "$T_WORK/bin/tula" <<'FAKE'
#!/bin/bash
log=${FAKE_LOG:?}
printf '%s\n' "$@" > "$log"
[ -f /proc/self/fd/0 ] && cat /proc/self/fd/0 > "$log.stdin"
tmo="" prev=""
for a in "$@"; do [ "$prev" = --timeout ] && tmo=$a; prev=$a; done
case ${FAKE_MODE:-changed} in
    changed)
        printf '%s\n' action=changed set=nodes=2 set=time=5 set=account=evil set=partition=fast \
            record=mode=auto record=policy=deadline=01:00:00 "record=table=lenet5@fashion-mnist;2:128:10:123.4" \
            "say=tula: lenet5@fashion-mnist on 2 nodes; nodes default -> 2, time limit default -> 5 min"
        exit 0 ;;
    unchanged) printf '%s\n' action=unchanged record=mode=auto "say=tula: warning: no profile; job submitted unchanged"; exit 0 ;;
    measure) printf '%s\n' action=measure set=export=ALL,TULA_PROFILE=1 record=mode=auto record=workload=x@y \
                 "say=tula: no profile of x@y yet: the job measures itself"
             exit 0 ;;
    silent) echo action=unchanged; exit 0 ;;
    refused) printf '%s\n' action=refused record=mode=auto "say=tula: error: no profile; job not submitted (the site runs Tula in strict mode)"
             exit 0 ;;
    # writes 1 MiB without a newline, then sleeps in a child that keeps the output open
    flood) head -c 1048576 /dev/zero | tr '\0' x; sleep 30; exit 0 ;;
    fail) echo "Segmentation fault" >&2; exit 1 ;;
    # as the real `tula submit-filter --timeout N`: killed by SIGALRM after N s
    hang) [ -n "$tmo" ] && [ "$tmo" -gt 0 ] && { sleep "$tmo"; kill -ALRM $$; } &
          exec sleep 30 ;;
    garbage) echo "Segmentation fault? no, just noise"; exit 0 ;;
    old) echo "The following argument was not expected: submit-filter" >&2; exit 2 ;;
esac
FAKE
chmod +x "$T_WORK/bin/tula"

# The Lua driver: runs one scenario (argv[1]) and prints key=value facts for the shell to check.
cat > "$T_WORK/driver.lua" <<'EOF'
slurm = { SUCCESS = 0, ERROR = -1, FAILURE = -1 }
dofile(arg[2])
local T = tula_cli_filter
local said = {}
T.say = function(line) said[#said + 1] = line end
T.PLAN_TIMEOUT = tonumber(os.getenv("PLAN_TIMEOUT") or "") or T.PLAN_TIMEOUT

-- A mock of cli_filter/lua's options object: reads go through Slurm-like getters, writes
-- are recorded (and change what later reads return). Slurm 22.05 shows an unset --nodes as
-- "1-0" and an unset --time as NO_VAL minutes, "2982616-16:14:00".
local function make_options(f)
    local state = { nodes = f.nodes or "1-0", time = f.time or "2982616-16:14:00", wrap = f.wrap,
                    partition = f.partition, ntasks = f.ntasks or "1", ["ntasks-per-node"] = f.rpn or "-2",
                    nodelist = f.nodelist, ["gpus-per-node"] = f.gpn, export = f.export }
    local sets = {}
    local o = setmetatable({}, {
        __index = function(_, k)
            if k == "type" then
                if f.raise then error("boom from the options object") end
                return f.type or "sbatch"
            elseif k == "argv" then return f.argv or {}
            elseif k == "spank" then
                return { tula = { tula = f.tula, ["tula-workload"] = f.workload,
                                  ["tula-deadline"] = f.deadline, ["tula-budget"] = f.budget,
                                  ["tula-epochs"] = f.epochs } }
            end
            return state[k]
        end,
        __newindex = function(_, k, v) sets[#sets + 1] = k .. "=" .. v; state[k] = v end,
    })
    return o, sets, state
end

local s = arg[1]
local script = os.getenv("SCRIPT")
local cases = {
    auto       = { tula = "auto", argv = { script } },
    exported   = { tula = "auto", argv = { script }, export = "ALL,SECRET=hunter2" },
    none       = { argv = { script } },
    srun       = { type = "srun", tula = "auto", argv = { script } },
    salloc_off = { type = "salloc" },
    stdin      = { tula = "auto" },
    raise      = { tula = "auto", raise = true },
    dl_only    = { deadline = "00:30:00", argv = { script } },
    dl_empty   = { deadline = "", argv = { script } },
    odd        = { tula = "auto", nodes = "1-4", partition = "cpu;x'y", rpn = "3",
                   wrap = "echo '$(touch INJECTED)'", argv = { script } },
}
local c = cases[s] or error("unknown scenario " .. tostring(s))
local o, sets, state = make_options(c)
local rc = slurm_cli_pre_submit(o, tonumber(os.getenv("OFFSET") or "0"))
print("rc=" .. tostring(rc))
print("sets=" .. table.concat(sets, ","))
print("nodes=" .. tostring(state.nodes))
print("time=" .. tostring(state.time))
print("partition=" .. tostring(state.partition))
print("rpn=" .. tostring(state["ntasks-per-node"]))
print("gpn=" .. tostring(state["gpus-per-node"]))
print("export=" .. tostring(state.export))
print("lines=" .. #said)
for _, l in ipairs(said) do print("said=" .. l) end
print("defaults=" .. tostring(slurm_cli_setup_defaults(o, false)))
print("post=" .. tostring(slurm_cli_post_submit(0, 1, 0)))
EOF

script="$T_WORK/my job's \$(touch INJECTED) \`touch INJECTED\` file.sbatch"
printf '#!/bin/bash\n#SBATCH --ntasks-per-node=1\nmpirun tula-train --model lenet5 --data fashion-mnist\n' > "$script"
nfail=0

# scenario NAME [ENV=VALUE...]: runs the driver with a fresh log; output in $OUT.
scenario() {
    local name=$1; shift
    rm -f "$T_WORK/fake.log" "$T_WORK/fake.log.script" "$T_WORK/plan.table"
    OUT=$(cd "$T_WORK" && env FAKE_LOG="$T_WORK/fake.log" SCRIPT="$script" TULA_PLUGSTACK_LOADED=1 \
        TULA_PLUGSTACK_PLAN="$T_WORK/plan.table" "$@" \
        timeout 60 lua5.1 "$T_WORK/driver.lua" "$name" "$T_WORK/cli_filter.lua" 2>&1 </dev/null)
}
# Same, with standard input from a file or a pipe.
scenario_stdin() {
    local how=$1; shift
    rm -f "$T_WORK/fake.log" "$T_WORK/fake.log.script" "$T_WORK/plan.table"
    if [ "$how" = file ]; then
        OUT=$(cd "$T_WORK" && env FAKE_LOG="$T_WORK/fake.log" TULA_PLUGSTACK_LOADED=1 TULA_PLUGSTACK_PLAN="$T_WORK/plan.table" "$@" \
            timeout 60 lua5.1 "$T_WORK/driver.lua" stdin "$T_WORK/cli_filter.lua" 2>&1 < "$script")
    else
        OUT=$(cd "$T_WORK" && cat "$script" | env FAKE_LOG="$T_WORK/fake.log" TULA_PLUGSTACK_LOADED=1 "$@" \
            timeout 60 lua5.1 "$T_WORK/driver.lua" stdin "$T_WORK/cli_filter.lua" 2>&1)
    fi
}
get() { sed -n "s/^$1=//p" <<<"$OUT" | head -n 1; }
args() { cat "$T_WORK/fake.log" 2>/dev/null; }

# check CASE CONDITION-DESCRIPTION TEST...: records PASS/FAIL for one assertion.
check() {
    local name=$1 what=$2; shift 2
    if "$@"; then
        printf 'PASS %s: %s\n' "$name" "$what"
    else
        printf 'FAIL %s: %s\n' "$name" "$what"
        printf '%s\n' "$OUT" | sed 's/^/    | /'
        [ -f "$T_WORK/fake.log" ] && { echo "    fake tula got:"; sed 's/^/    > /' "$T_WORK/fake.log"; }
        nfail=$((nfail + 1))
    fi
}
# has_arg_pair A B: some argument A is followed by the argument B.
has_arg_pair() { awk -v a="$1" -v b="$2" 'p == a && $0 == b { f = 1 } { p = $0 } END { exit !f }' "$T_WORK/fake.log" 2>/dev/null; }
no_arg() { ! grep -qxF -- "$1" "$T_WORK/fake.log" 2>/dev/null; }
not_run() { [ ! -e "$T_WORK/fake.log" ]; }
common_ok() { [ "$(get rc)" = 0 ] && [ "$(get defaults)" = 0 ] && [ "$(get post)" = 0 ]; }
unchanged_one_warning() {
    [ "$(get sets)" = "" ] && [ "$(get lines)" = 1 ] && common_ok &&
        get said | grep -qE '^tula: warning: .+; job submitted unchanged$'
}
silent_noop() { [ "$(get sets)" = "" ] && [ "$(get lines)" = 0 ] && common_ok && not_run; }

# ---- nothing to do: nothing run ---------------------------------------------------------------
scenario none
check none "no --tula, no TULA_MODE: nothing changed, nothing said, tula not run" silent_noop
scenario none TULA_DEADLINE=01:00:00 TULA_PLUGSTACK_STRICT=1 TULA_PLUGSTACK_DISABLED=x
check none-env "TULA_DEADLINE alone, strict, plugin disabled: a job without --tula is untouched" silent_noop
scenario dl_empty
check dl-empty "an empty --tula-deadline does not name Tula" silent_noop
scenario srun
check srun "srun: nothing" silent_noop
scenario salloc_off
check salloc-off "salloc without --tula: nothing" silent_noop
scenario auto OFFSET=1
check het "het job component 1: nothing" silent_noop

# ---- a first job that measures itself: --export set, no plan table; the user's --export never on a command line
scenario auto FAKE_MODE=measure
check measure "action measure sets --export and writes its record, without a plan table" \
    eval '[ "$(get sets)" = "export=ALL,TULA_PROFILE=1" ] && [ "$(get export)" = "ALL,TULA_PROFILE=1" ] && [ "$(cat "$T_WORK/plan.table")" = "$(printf "mode=auto\nworkload=x@y")" ] && [ "$(get lines)" = 1 ] && common_ok'
scenario exported FAKE_MODE=unchanged
check exported "the user's --export reaches tula submit-filter as export=given, its values do not" \
    eval 'has_arg_pair --opt export=given && ! grep -q hunter2 "$T_WORK/fake.log"'

# ---- the answer applied --------------------------------------------------------------------
scenario auto
check auto "the options it names are set, others (account) not" [ "$(get sets)" = "nodes=2,time=5,partition=fast" ]
check auto "its line is printed" \
    eval '[ "$(get lines)" = 1 ] && get said | grep -qF "nodes default -> 2, time limit default -> 5 min"'
check auto "the decision record is written verbatim into the plugin's memory file" \
    eval '[ "$(cat "$T_WORK/plan.table")" = "$(printf "mode=auto\npolicy=deadline=01:00:00\ntable=lenet5@fashion-mnist;2:128:10:123.4\n")" ]'
check auto "tula submit-filter --timeout 5 --type sbatch --offset 0" \
    eval '[ "$(head -n 1 "$T_WORK/fake.log")" = submit-filter ] && has_arg_pair --timeout 5 && has_arg_pair --type sbatch && has_arg_pair --offset 0'
check auto "the options as cli_filter shows them, and the script path intact" \
    eval 'has_arg_pair --opt nodes=1-0 && has_arg_pair --opt time=2982616-16:14:00 && has_arg_pair --opt "argv1=$script" && has_arg_pair --spank tula=auto'
check auto "no shell injection through the script path" test ! -e "$T_WORK/INJECTED"
check auto "returns SUCCESS from all three hooks" common_ok
scenario odd
check odd "odd values reach the filter intact" \
    eval 'has_arg_pair --opt "partition=cpu;x'"'"'y" && has_arg_pair --opt ntasks-per-node=3 && grep -qF "wrap=echo" "$T_WORK/fake.log"'
check odd "nothing injected through them" test ! -e "$T_WORK/INJECTED"
scenario dl_only
check dl-only "--tula-deadline alone names Tula" has_arg_pair --spank tula-deadline=00:30:00
scenario none TULA_MODE=auto
check env-mode "TULA_MODE names Tula" eval '[ "$(get sets)" = "nodes=2,time=5,partition=fast" ]'
scenario_stdin file
check stdin-file "a script on standard input (regular file) stays readable by the filter" \
    eval 'cmp -s "$script" "$T_WORK/fake.log.stdin" && [ "$(get sets)" = "nodes=2,time=5,partition=fast" ]'
scenario auto FAKE_MODE=unchanged
check unchanged "unchanged: its line, nothing set, its record without a table" \
    eval 'unchanged_one_warning && [ "$(cat "$T_WORK/plan.table")" = mode=auto ]'
scenario auto FAKE_MODE=silent
check silent "unchanged without a line or a record: nothing said, nothing written" \
    eval '[ "$(get sets)" = "" ] && [ "$(get lines)" = 0 ] && [ ! -e "$T_WORK/plan.table" ] && common_ok'
scenario auto FAKE_MODE=refused
check refused "refused: ERROR, its one line, nothing set or written" \
    eval '[ "$(get rc)" = -1 ] && [ "$(get lines)" = 1 ] && get said | grep -qE "^tula: error: .*job not submitted" && [ "$(get sets)" = "" ] && [ ! -e "$T_WORK/plan.table" ]'

# ---- failures: fail open -------------------------------------------------------------------
scenario auto FAKE_MODE=fail
check fail "the filter fails: unchanged, one warning" eval 'unchanged_one_warning && get said | grep -qF "exit status 1"'
start=$(date +%s)
scenario auto FAKE_MODE=hang PLAN_TIMEOUT=1
check hang "the filter hangs: killed by SIGALRM after --timeout 1, unchanged, one warning" \
    eval 'has_arg_pair --timeout 1 && unchanged_one_warning && get said | grep -qF "did not answer within 1 s" && [ $(( $(date +%s) - start )) -lt 10 ]'
scenario auto FAKE_MODE=garbage
check garbage "garbage output with exit 0: unchanged, one warning" unchanged_one_warning
start=$(date +%s)
scenario auto FAKE_MODE=flood PLAN_TIMEOUT=1
secs=$(( $(date +%s) - start ))
check flood "a filter that writes 1 MiB and sleeps: read to its end, killed, unchanged, one warning, back in ${secs}s" \
    eval 'unchanged_one_warning && [ "$secs" -le 4 ]'
scenario auto FAKE_MODE=old
check old "a tula without submit-filter (exit 2): unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "no submit-filter"'
scenario auto TULA_PLUGSTACK_PLAN=/nonexistent/dir/plan
check no-table "the memory file cannot be written: unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "memory file"'
chmod -x "$T_WORK/bin/tula"
scenario auto
check nocli "tula not executable: unchanged, one warning" eval 'unchanged_one_warning && get said | grep -qF "cannot run"'
scenario auto TULA_PLUGSTACK_STRICT=1
check nocli-strict "tula not executable, strict: refused with one error line" \
    eval '[ "$(get rc)" = -1 ] && [ "$(get lines)" = 1 ] && get said | grep -qE "^tula: error: cannot run.*job not submitted"'
chmod +x "$T_WORK/bin/tula"
scenario raise TULA_PLUGSTACK_STRICT=1
check lua-error "an error inside the hook: SUCCESS, unchanged, one warning, also under strict" \
    eval 'unchanged_one_warning && get said | grep -qF "internal error"'

# ---- the gate and the decision: one option list, no Tula submission missed ----------------------
need_bin "$TULA"
cat > "$T_WORK/gate.lua" <<'EOF'
slurm = { SUCCESS = 0, ERROR = -1, FAILURE = -1 }
dofile(arg[1])
local T = tula_cli_filter
if arg[2] == "--options" then print(table.concat(T.SPANK, " ")); return end
local spank = {}
for i = 2, #arg do
    local k, v = string.match(arg[i], "^([%w%-]+)=(.*)$")
    spank[k] = v
end
print(tostring(T.names_tula({ spank = { tula = spank } })))
EOF
registered=$(sed -n 's/^    {"\(tula[a-z-]*\)", .*/\1/p' "$REPO/plugin/spank_tula.c" | sort | tr '\n' ' ')
lua_list=$(lua5.1 "$T_WORK/gate.lua" "$T_WORK/cli_filter.lua" --options | tr ' ' '\n' | sort | tr '\n' ' ')
OUT="plugin: $registered; cli_filter.lua: $lua_list"
check options "T.SPANK is the plugin's option list" eval '[ -n "$lua_list" ] && [ "$registered" = "$lua_list" ]'
# gate_case ENV... -- SPANK...: the gate's answer ($gate) and whether submit-filter acted ($on)
gate_case() {
    local envs=() spank=() a sargs=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    spank=("$@")
    for a in "${spank[@]}"; do sargs+=(--spank "$a"); done
    gate=$(env -u TULA_MODE "${envs[@]}" lua5.1 "$T_WORK/gate.lua" "$T_WORK/cli_filter.lua" "${spank[@]}")
    answer=$(env -u TULA_MODE -u TULA_PLUGSTACK_LOADED "${envs[@]}" "$TULA" submit-filter --type sbatch \
        --opt argv1=/nonexistent/job.sbatch "${sargs[@]}" 2>&1 </dev/null)
    on=false
    grep -qE '^(say|record|set)=' <<<"$answer" && on=true
    OUT="env: ${envs[*]}; spank: ${spank[*]}; gate: $gate; submit-filter: $answer"
}
for c in "-- tula=auto" "-- tula=off" "-- tula=set" "-- tula=bogus" "-- tula-deadline=01:00:00" "-- tula-budget=3" \
    "-- tula-workload=a@b" "-- tula-epochs=fixed" "-- tula-time-min=yes" "TULA_MODE=auto --" "TULA_MODE=off --" \
    "TULA_MODE=bogus --" "TULA_MODE= --" "TULA_DEADLINE=01:00:00 --" "TULA_BUDGET=2 --" "TULA_WORKLOAD=a@b --" "--"; do
    # shellcheck disable=SC2086
    gate_case $c
    check gate "the gate lets through what submit-filter acts on ($c)" eval '[ "$on" = false ] || [ "$gate" = true ]'
done
gate_case --
check gate "nothing given: the gate stops it" eval '[ "$gate" = false ] && [ "$on" = false ]'

if [ "$nfail" -gt 0 ]; then
    echo "FAIL $T_NAME: $nfail check(s) failed"
    exit 1
fi
note "ok: cli_filter.lua carries the submission to tula submit-filter and applies its answer"
