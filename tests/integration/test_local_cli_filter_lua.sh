#!/bin/bash
# etc/cli_filter.lua under lua5.1 without Slurm: a mocked `slurm` table and `options` object
# (with Slurm's getter conventions: nodes "1-0" and time "UNLIMITED" when not given) and a fake
# `tula` CLI that logs its arguments and answers as told. Checks that
#   - on a good plan options["nodes"] / ["time"] are set when the user left them open, with one
#     `tula:` line saying what changed, and the plan table is written to the plugin's memory
#     file (TULA_PLUGSTACK_PLAN; a plain file here); an explicit --nodes N or range LO-HI
#     reaches `tula plan --node-range` and is kept; an explicit --time, shorter or longer than
#     the plan, is kept and the line says "kept";
#   - on an error, a timeout, a missing CLI, garbage output, no plan table or a plan outside the
#     range the job is unchanged with exactly one `tula: warning: ...; job submitted unchanged`
#     line; the CLI gets `--timeout 5` under timeout(1), a CLI killed by its SIGALRM (status
#     142) is a timeout, and a CLI that writes 1 MiB and then sleeps is read to its end and
#     killed: the hook returns within about PLAN_TIMEOUT + 1 s;
#   - without the plugin (no TULA_PLUGSTACK_LOADED), or with the plugin disabled by bad
#     plugstack arguments, a --tula job is unchanged with one warning (strict: refused with one
#     error line), and a job without --tula is never touched; salloc --tula says in one line
#     why it is not planned;
#   - --tula=off, no --tula, srun, and later het-job components change nothing and run nothing;
#   - dry-run changes nothing; $TULA_MODE / $TULA_WORKLOAD are the fallbacks; a bad
#     $TULA_MODE is reported with the valid values;
#   - user-supplied paths and workloads reach the CLI intact (single-quote escaping, no shell
#     injection); --wrap and a script on standard input (a regular file) are planned from a
#     temporary copy that is removed; a pipe on standard input gets the --tula-workload hint;
#   - --tula-epochs=fixed becomes tula plan --fixed-epochs (follow, or no option: nothing);
#   - the plan's partition, ranks per node and GPUs per node are set only where the user left
#     them open: -p (passed on as tula plan --partition), --ntasks-per-node (as
#     --ranks-per-node), --ntasks, --nodelist and --gpus-per-node are kept;
#   - --tula-deadline / --tula-budget (and $TULA_DEADLINE / $TULA_BUDGET) become --policy
#     deadline=HH:MM:SS / budget=X, turn Tula on by themselves, are validated, not both; a CLI
#     that rejects such a policy (usage error, exit 2) means one warning, job unchanged;
#   - the plugstack's site settings (TULA_PLUGSTACK_CONF/DB/MARGIN/STRICT, set by tula.so in
#     the sbatch process): --conf, a temporary tula.conf carrying db= and margin= as its only
#     system_db and time_margin lines (removed afterwards), and strict refusing the job with one
#     error line.
# Prints PASS/FAIL per case; exits non-zero on any failure. No cluster needed.
. "$(dirname "$0")/lib.sh"
command -v lua5.1 >/dev/null || fail "lua5.1 is not installed (apt-get install lua5.1)"
make_workdir

# The script as installed: placeholders substituted (like make install / scripts/tula-cluster).
sed -e "s|@TULA_BIN@|$T_WORK/bin/tula|g" -e "s|@TULA_CONF@|$T_WORK/etc/tula.conf|g" \
    "$REPO/etc/cli_filter.lua" > "$T_WORK/cli_filter.lua" || fail "cannot substitute etc/cli_filter.lua"
grep -q '@TULA_' "$T_WORK/cli_filter.lua" && fail "placeholders left in cli_filter.lua after substitution"
mkdir -p "$T_WORK/bin" "$T_WORK/etc"

# Fake CLI: logs its arguments (one per line) to $FAKE_LOG, copies the --script file to
# $FAKE_LOG.script, answers according to $FAKE_MODE.
cat > "$T_WORK/bin/tula" <<'EOF'
#!/bin/bash
log=${FAKE_LOG:?}
printf '%s\n' "$@" > "$log"
prev="" range="" tmo=""
for a in "$@"; do
    [ "$prev" = --script ] && cat -- "$a" > "$log.script" 2>/dev/null
    [ "$prev" = --node-range ] && range=$a
    [ "$prev" = --timeout ] && tmo=$a
    [ "$prev" = --conf ] && { cat -- "$a" > "$log.conf" 2>/dev/null || echo MISSING > "$log.conf"; }
    prev=$a
done
n=${FAKE_NODES:-2}
lo=$n hi=$n
if [ -n "$range" ]; then lo=${range%-*} hi=${range#*-} n=$hi; fi
table=lenet5@fashion-mnist
for ((k = lo; k <= hi; k++)); do table="$table;$k:$((64 * k)):10:123.4"; done
case ${FAKE_MODE:-ok} in
    ok|notable)
        printf '%s\n' status=ok workload=lenet5@fashion-mnist "nodes=$n" "global_batch=$((64 * n))" epochs=10 \
            predicted_seconds=123.4 cost=0.07 "time_limit=${FAKE_LIMIT:-5}" \
            "summary=tula: lenet5@fashion-mnist on $n nodes, global batch $((64 * n)), predicted 123 s"
        [ -n "${FAKE_SHAPE:-}" ] && printf '%s\n' partition=fast ranks_per_node=2 gpus_per_node=4
        [ "$FAKE_MODE" = notable ] || echo "table=$table"
        exit 0 ;;
    # writes 1 MiB without a newline, then sleeps in a child that keeps the output open
    flood) head -c 1048576 /dev/zero | tr '\0' x; sleep 30; exit 0 ;;
    error) echo status=error
           echo "message=tula: no profile for workload lenet5@fashion-mnist; run tula profile"
           exit 1 ;;
    # as the real `tula plan --timeout N`: killed by SIGALRM after N s (the sleep keeps this pid)
    hang) [ -n "$tmo" ] && [ "$tmo" -gt 0 ] && { sleep "$tmo"; kill -ALRM $$; } &
          exec sleep 30 ;;
    garbage) echo "Segmentation fault? no, just noise"; exit 0 ;;
    usage) echo "--policy: deadline=02:00:00 not in {auto,time,cost}" >&2
           echo "Run with --help for more information." >&2; exit 2 ;;
    toomany) printf '%s\n' status=ok nodes=99 time_limit=5 summary=x "table=a@b;99:64:1:1"; exit 0 ;;
esac
EOF
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
                    nodelist = f.nodelist, ["gpus-per-node"] = f.gpn }
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
    bare       = { tula = "set", argv = { script } },
    upper      = { tula = "TIME", argv = { script } },
    off        = { tula = "off", argv = { script } },
    none       = { argv = { script } },
    srun       = { type = "srun", tula = "auto", argv = { script } },
    salloc     = { type = "salloc", tula = "auto" },
    salloc_off = { type = "salloc" },
    range      = { tula = "auto", nodes = "1-4", argv = { script } },
    exact      = { tula = "auto", nodes = "1", argv = { script } },
    time_kept  = { tula = "auto", time = "00:03:00", argv = { script } },
    time_long  = { tula = "auto", time = "1-00:00:00", argv = { script } },
    unlimited  = { tula = "auto", time = "UNLIMITED", argv = { script } },
    dryrun     = { tula = "dry-run", argv = { script } },
    workload   = { tula = "cost", workload = "fmnist-cnn@fashion-mnist", argv = { script } },
    badwl      = { tula = "auto", workload = "a b'@c", argv = { script } },
    wrap       = { tula = "auto", wrap = "mpirun tula-train --model lenet5 --data fashion-mnist" },
    stdin      = { tula = "auto" },
    raise      = { tula = "auto", raise = true },
    deadline   = { tula = "auto", deadline = "02:00:00", argv = { script } },
    fixed      = { tula = "auto", epochs = "fixed", argv = { script } },
    follow     = { tula = "auto", epochs = "follow", argv = { script } },
    dl_only    = { deadline = "00:30:00", argv = { script } },
    dl_off     = { tula = "off", deadline = "00:30:00", argv = { script } },
    budget     = { tula = "time", budget = "2.5", argv = { script } },
    both       = { tula = "auto", deadline = "02:00:00", budget = "3", argv = { script } },
    bad_dl     = { tula = "auto", deadline = "2h'; touch INJECTED", argv = { script } },
    bad_budget = { tula = "auto", budget = "-1", argv = { script } },
    p_list     = { tula = "auto", partition = "cpu,fast", argv = { script } },
    rpn        = { tula = "auto", rpn = "3", argv = { script } },
    ntasks     = { tula = "auto", ntasks = "5", argv = { script } },
    nodelist   = { tula = "auto", nodelist = "n1,n2", argv = { script } },
    gpus       = { tula = "auto", gpn = "1", argv = { script } },
    bad_p      = { tula = "auto", partition = "cpu;touch INJECTED", argv = { script } },
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
has_arg_pair() { grep -qxF -- "$1" "$T_WORK/fake.log" 2>/dev/null && grep -A1 -xF -- "$1" "$T_WORK/fake.log" | tail -n 1 | grep -qxF -- "$2"; }
no_arg() { ! grep -qxF -- "$1" "$T_WORK/fake.log" 2>/dev/null; }
not_run() { [ ! -e "$T_WORK/fake.log" ]; }
# temp_removed: the --script file the CLI was given (a temporary copy) no longer exists.
temp_removed() {
    local f
    f=$(grep -A1 -xF -- --script "$T_WORK/fake.log" 2>/dev/null | tail -n 1)
    [ -n "$f" ] && [ "$f" != "$script" ] && [ ! -e "$f" ]
}
common_ok() { [ "$(get rc)" = 0 ] && [ "$(get defaults)" = 0 ] && [ "$(get post)" = 0 ]; }
unchanged_one_warning() {
    [ "$(get sets)" = "" ] && [ "$(get lines)" = 1 ] && common_ok &&
        get said | grep -qE '^tula: warning: .+; job submitted unchanged$'
}
silent_noop() { [ "$(get sets)" = "" ] && [ "$(get lines)" = 0 ] && common_ok && not_run; }

# ---- success ---------------------------------------------------------------------------------
scenario auto
check auto "nodes and time set from the plan" [ "$(get sets)" = "nodes=2,time=5" ]
check auto "the epochs follow the batch unless asked: no --fixed-epochs" no_arg --fixed-epochs
check auto "one summary line saying what changed" \
    eval '[ "$(get lines)" = 1 ] && get said | grep -qE "^tula: lenet5@fashion-mnist on 2 nodes.*; nodes default -> 2, time limit default -> 5 min$"'
check auto "CLI called with plan --format kv --policy auto --conf" \
    eval 'has_arg_pair --policy auto && has_arg_pair --format kv && has_arg_pair --conf "$T_WORK/etc/tula.conf" && [ "$(head -n 1 "$T_WORK/fake.log")" = plan ]'
check auto "script path with quotes, spaces, \$() and backquotes reaches the CLI intact" has_arg_pair --script "$script"
check auto "no shell injection through the script path" test ! -e "$T_WORK/INJECTED"
check auto "no --node-range without --nodes" no_arg --node-range
check auto "the plan table is written to the plugin's memory file" \
    eval '[ "$(cat "$T_WORK/plan.table")" = "lenet5@fashion-mnist;2:128:10:123.4" ]'
check auto "the CLI is given --timeout 5 (and runs under timeout(1))" \
    eval 'has_arg_pair --timeout 5 && [ "$(head -n 1 "$T_WORK/fake.log")" = plan ]'
check auto "returns SUCCESS from all three hooks" common_ok

scenario bare
check bare "bare --tula (shown as 'set') means auto" eval '[ "$(get sets)" = "nodes=2,time=5" ] && has_arg_pair --policy auto'
scenario upper
check upper "--tula=TIME is the time policy" eval '[ "$(get sets)" = "nodes=2,time=5" ] && has_arg_pair --policy time'

scenario range FAKE_NODES=8
check range "-N 1-4: --node-range 1-4, the range kept, a table row per count" \
    eval 'has_arg_pair --node-range 1-4 && [ "$(get sets)" = "time=5" ] && [ "$(get nodes)" = 1-4 ] && get said | grep -qF "nodes 1-4 kept" && [ "$(tr ";" "\n" < "$T_WORK/plan.table" | grep -c :)" = 4 ]'
scenario exact FAKE_NODES=3
check exact "-N 1: --node-range 1-1, kept on 1 node" \
    eval 'has_arg_pair --node-range 1-1 && [ "$(get nodes)" = 1 ] && [ "$(get sets)" = "time=5" ] && grep -qF ";1:64:10:" "$T_WORK/plan.table"'

scenario time_kept FAKE_LIMIT=5
check time_kept "explicit --time 3 min shorter than the plan's 5 is kept" \
    eval '[ "$(get sets)" = "nodes=2" ] && [ "$(get time)" = 00:03:00 ] && get said | grep -qF "time limit 3 min kept"'
scenario time_long FAKE_LIMIT=7
check time_long "explicit --time 1 day, longer than the plan's 7 min, is kept" \
    eval '[ "$(get sets)" = "nodes=2" ] && [ "$(get time)" = 1-00:00:00 ] && get said | grep -qF "time limit 1440 min kept (plan: 7 min)"'

scenario unlimited FAKE_LIMIT=7
check unlimited "--time=0 (UNLIMITED) counts as no limit: set to the plan's 7 min" \
    eval '[ "$(get sets)" = "nodes=2,time=7" ] && get said | grep -qF "time limit default -> 7 min"'

scenario workload
check workload "--tula-workload is passed as --workload, the script as --script (for its epochs), policy cost" \
    eval 'has_arg_pair --workload fmnist-cnn@fashion-mnist && has_arg_pair --script "$script" && has_arg_pair --policy cost && [ "$(get sets)" = "nodes=2,time=5" ]'
scenario none TULA_MODE=auto TULA_WORKLOAD=lenet5@fashion-mnist
check env "TULA_MODE / TULA_WORKLOAD are the fallbacks" \
    eval 'has_arg_pair --workload lenet5@fashion-mnist && [ "$(get sets)" = "nodes=2,time=5" ]'
scenario off TULA_MODE=auto
check env-off "--tula=off wins over TULA_MODE=auto" silent_noop

scenario wrap
check wrap "--wrap is planned from a temporary script holding the command" \
    eval '[ "$(get sets)" = "nodes=2,time=5" ] && grep -qF "mpirun tula-train --model lenet5" "$T_WORK/fake.log.script"'
check wrap "the temporary script is removed" temp_removed
scenario_stdin file
check stdin-file "a script on standard input (regular file) is planned from a copy" \
    eval '[ "$(get sets)" = "nodes=2,time=5" ] && cmp -s "$script" "$T_WORK/fake.log.script" && temp_removed'
scenario_stdin pipe
check stdin-pipe "a script through a pipe: unchanged, one warning naming --tula-workload" \
    eval 'unchanged_one_warning && get said | grep -qF -- "--tula-workload" && not_run'

# ---- nothing to do ---------------------------------------------------------------------------
scenario off
check off "--tula=off: nothing changed, nothing said, CLI not run" silent_noop
scenario none
check none "no --tula, no TULA_MODE: nothing changed, nothing said, CLI not run" silent_noop
scenario srun
check srun "srun (not sbatch): nothing" silent_noop
scenario salloc
check salloc "salloc --tula: one line saying why it is not planned, nothing changed, CLI not run" \
    eval '[ "$(get sets)" = "" ] && [ "$(get lines)" = 1 ] && get said | grep -qF "sbatch" && common_ok && not_run'
scenario salloc_off
check salloc-off "salloc without --tula: nothing" silent_noop
scenario auto TULA_PLUGSTACK_LOADED=
check no-plugin "--tula without the plugin loaded: unchanged, one warning, CLI not run" \
    eval 'unchanged_one_warning && get said | grep -qF "not loaded" && not_run'
scenario auto TULA_PLUGSTACK_DISABLED="tula: unknown plugstack argument 'bogus=1'" TULA_PLUGSTACK_STRICT=1
check disabled-strict "plugin disabled by bad arguments under strict: that --tula job is refused with one error line" \
    eval '[ "$(get rc)" = -1 ] && [ "$(get lines)" = 1 ] && get said | grep -qE "^tula: error: .*disabled.*bogus=1.*job not submitted" && not_run'
scenario none TULA_PLUGSTACK_DISABLED="tula: unknown plugstack argument 'bogus=1'" TULA_PLUGSTACK_STRICT=1
check disabled-strict-nontula "plugin disabled under strict: a job without --tula is untouched" silent_noop
scenario auto TULA_PLUGSTACK_DISABLED="tula: unknown plugstack argument 'bogus=1'"
check disabled "plugin disabled, not strict: unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "bogus=1" && not_run'
scenario auto OFFSET=1
check het "het job component 1: nothing" silent_noop
scenario dryrun
check dryrun "dry-run: the plan is shown, nothing changed" \
    eval '[ "$(get sets)" = "" ] && [ "$(get lines)" = 1 ] && get said | grep -qE "^tula: dry-run: .*would set nodes default -> 2.*job submitted unchanged$" && has_arg_pair --policy auto'

# ---- the job's shape: partition, ranks per node, GPUs per node -----------------------------
scenario auto FAKE_SHAPE=1
check shape "partition, ntasks-per-node and gpus-per-node set from the plan when left open" \
    eval '[ "$(get sets)" = "nodes=2,time=5,partition=fast,ntasks-per-node=2,gpus-per-node=4" ] && get said | grep -qF "partition default -> fast, ntasks-per-node default -> 2, gpus-per-node default -> 4"'
check shape "nothing asked of the shape: no --partition or --ranks-per-node to tula plan" \
    eval 'no_arg --partition && no_arg --ranks-per-node'
scenario auto
check shape-old "a plan without partition or ranks (an older tula): only nodes and time set" \
    eval '[ "$(get sets)" = "nodes=2,time=5" ]'
scenario p_list FAKE_SHAPE=1
check p-list "-p cpu,fast reaches tula plan --partition and is kept" \
    eval 'has_arg_pair --partition cpu,fast && [ "$(get partition)" = cpu,fast ] && ! get sets | grep -q partition='
scenario rpn FAKE_SHAPE=1
check rpn "--ntasks-per-node=3 reaches tula plan --ranks-per-node and is kept" \
    eval 'has_arg_pair --ranks-per-node 3 && [ "$(get rpn)" = 3 ] && [ "$(get sets)" = "nodes=2,time=5,partition=fast,gpus-per-node=4" ]'
scenario ntasks FAKE_SHAPE=1
check ntasks "--ntasks=5: the shape is kept, no ntasks-per-node set" \
    eval '! get sets | grep -q ntasks-per-node && get sets | grep -q partition=fast'
scenario nodelist FAKE_SHAPE=1
check nodelist "--nodelist: neither partition nor ntasks-per-node set" \
    eval '! get sets | grep -qE "partition=|ntasks-per-node="'
scenario gpus FAKE_SHAPE=1
check gpus "--gpus-per-node=1 is kept" eval '[ "$(get gpn)" = 1 ] && ! get sets | grep -q gpus-per-node='
scenario bad_p FAKE_SHAPE=1
check bad-p "a -p value that is not a name list is neither passed to tula plan nor replaced (Slurm rejects it itself)" \
    eval 'no_arg --partition && ! get sets | grep -q partition= && test ! -e "$T_WORK/INJECTED"'

# ---- failures: fail open -------------------------------------------------------------------
scenario auto FAKE_MODE=error
check error "CLI error: unchanged, one warning with its message" \
    eval 'unchanged_one_warning && get said | grep -qF "no profile for workload lenet5@fashion-mnist"'
check error "the CLI's 'tula: ' prefix is not doubled" eval '! get said | grep -qF "tula: warning: tula:"'
start=$(date +%s)
scenario auto FAKE_MODE=hang PLAN_TIMEOUT=1
check hang "CLI hangs: killed by SIGALRM after --timeout 1, unchanged, one warning" \
    eval 'has_arg_pair --timeout 1 && unchanged_one_warning && get said | grep -qF "did not answer within 1 s" && [ $(( $(date +%s) - start )) -lt 10 ]'
scenario auto FAKE_MODE=garbage
check garbage "garbage output with exit 0: unchanged, one warning" unchanged_one_warning
scenario auto FAKE_MODE=notable
check notable "a plan without a table (an older tula): unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "no plan table" && [ ! -s "$T_WORK/plan.table" ]'
start=$(date +%s)
scenario auto FAKE_MODE=flood PLAN_TIMEOUT=1
secs=$(( $(date +%s) - start ))
check flood "a CLI that writes 1 MiB and sleeps: read to its end, killed, unchanged, one warning, back in ${secs}s" \
    eval 'unchanged_one_warning && [ "$secs" -le 4 ]'
scenario range FAKE_MODE=toomany
check toomany "a plan outside the --nodes range: unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "outside the 1-4"'
chmod -x "$T_WORK/bin/tula"
scenario auto
check nocli "CLI not executable: unchanged, one warning" eval 'unchanged_one_warning && get said | grep -qF "cannot run"'
chmod +x "$T_WORK/bin/tula"
scenario auto FAKE_MODE=ok TULA_MODE=bogus
check env-mode "TULA_MODE ignored when --tula given" eval '[ "$(get sets)" = "nodes=2,time=5" ]'
scenario none TULA_MODE=bogus
check bad-env-mode "bad TULA_MODE: unchanged, one warning listing the valid values" \
    eval 'unchanged_one_warning && get said | grep -qF "auto, time, cost, off, dry-run" && get said | grep -qF bogus && not_run'
scenario badwl
check bad-workload "malformed workload: unchanged, one warning, CLI not run" eval 'unchanged_one_warning && not_run'
scenario raise
check lua-error "an error inside the hook: SUCCESS, unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "internal error"'

# ---- --tula-epochs ---------------------------------------------------------------------------
scenario fixed
check fixed "--tula-epochs=fixed reaches tula plan as --fixed-epochs" \
    eval 'grep -qxF -- --fixed-epochs "$T_WORK/fake.log" && [ "$(get sets)" = "nodes=2,time=5" ]'
scenario follow
check follow "--tula-epochs=follow: no --fixed-epochs" no_arg --fixed-epochs

# ---- deadline and budget ---------------------------------------------------------------------
scenario deadline
check deadline "--tula-deadline reaches tula plan as --policy deadline=HH:MM:SS" \
    eval 'has_arg_pair --policy deadline=02:00:00 && [ "$(get sets)" = "nodes=2,time=5" ]'
scenario dl_only
check dl-only "--tula-deadline alone turns Tula on" eval 'has_arg_pair --policy deadline=00:30:00 && [ "$(get sets)" = "nodes=2,time=5" ]'
scenario dl_off
check dl-off "--tula=off wins over --tula-deadline" silent_noop
scenario budget
check budget "--tula-budget reaches tula plan as --policy budget=X (over --tula=time)" \
    eval 'has_arg_pair --policy budget=2.5 && [ "$(get sets)" = "nodes=2,time=5" ]'
scenario auto TULA_DEADLINE=01:00:00
check env-deadline "TULA_DEADLINE is the fallback" has_arg_pair --policy deadline=01:00:00
scenario auto TULA_BUDGET=7
check env-budget "TULA_BUDGET is the fallback" has_arg_pair --policy budget=7
scenario none TULA_DEADLINE=01:00:00
check env-deadline-off "TULA_DEADLINE alone does not turn Tula on" silent_noop
scenario both
check both "deadline and budget together: unchanged, one warning, CLI not run" \
    eval 'unchanged_one_warning && get said | grep -qF "give one of them" && not_run'
scenario bad_dl
check bad-deadline "malformed deadline: unchanged, one warning naming HH:MM:SS, CLI not run" \
    eval 'unchanged_one_warning && get said | grep -qF "HH:MM:SS" && not_run && test ! -e "$T_WORK/INJECTED"'
scenario bad_budget
check bad-budget "negative budget: unchanged, one warning, CLI not run" eval 'unchanged_one_warning && not_run'
scenario deadline FAKE_MODE=usage
check policy-rejected "a CLI without the deadline policy (exit 2): unchanged, one warning" \
    eval 'unchanged_one_warning && get said | grep -qF "does not accept --policy deadline=02:00:00"'

# ---- site settings from the plugstack line ---------------------------------------------------
printf 'max_nodes = 4\ntime_margin = 0.25\ntime_overhead = 120\n' > "$T_WORK/site.conf"
scenario auto TULA_PLUGSTACK_CONF="$T_WORK/site.conf"
check site-conf "conf= of the plugstack line reaches tula plan" has_arg_pair --conf "$T_WORK/site.conf"
scenario auto TULA_PLUGSTACK_CONF="$T_WORK/site.conf" TULA_PLUGSTACK_DB="$T_WORK/site.db"
check site-db "db= becomes the only system_db of a temporary tula.conf (no --db: the user's database stays)" \
    eval 'grep -qx "system_db = $T_WORK/site.db" "$T_WORK/fake.log.conf" && [ "$(grep -c "^system_db" "$T_WORK/fake.log.conf")" = 1 ] && grep -qx "max_nodes = 4" "$T_WORK/fake.log.conf" && no_arg --db'
scenario auto TULA_PLUGSTACK_CONF="$T_WORK/site.conf" TULA_PLUGSTACK_MARGIN=0.5
check site-margin "margin= replaces time_margin in a temporary copy of tula.conf" \
    eval 'grep -qx "time_margin = 0.5" "$T_WORK/fake.log.conf" && [ "$(grep -c "^time_margin" "$T_WORK/fake.log.conf")" = 1 ] && grep -qx "time_overhead = 120" "$T_WORK/fake.log.conf"'
check site-margin "the temporary tula.conf is removed" \
    eval 'f=$(grep -A1 -xF -- --conf "$T_WORK/fake.log" | tail -n 1); [ "$f" != "$T_WORK/site.conf" ] && [ ! -e "$f" ]'
# a tula.conf with [partition] sections: the overriding lines stay site-wide (before the first
# section; appended after it they were read as section keys, and every plan failed)
printf 'max_nodes = 4\n[partition cpu]\nnodes = 4\n[partition fast]\nnodes = 2\n' > "$T_WORK/parts.conf"
scenario auto TULA_PLUGSTACK_CONF="$T_WORK/parts.conf" TULA_PLUGSTACK_DB="$T_WORK/site.db" TULA_PLUGSTACK_MARGIN=0.5
check site-sections "db= and margin= go before the first [partition] section of tula.conf" \
    eval 'awk "/^\\[/ { s = 1 } /^(system_db|time_margin) =/ { if (s) bad = 1; n++ } END { exit !(n == 2 && !bad) }" "$T_WORK/fake.log.conf" && grep -qx "system_db = $T_WORK/site.db" "$T_WORK/fake.log.conf" && grep -qx "nodes = 2" "$T_WORK/fake.log.conf"'
scenario auto TULA_PLUGSTACK_MARGIN="1; touch INJECTED"
check site-margin-bad "a malformed margin is ignored (default conf used)" \
    eval 'has_arg_pair --conf "$T_WORK/etc/tula.conf" && test ! -e "$T_WORK/INJECTED"'
scenario auto TULA_PLUGSTACK_DB=relative.db
check site-db-relative "a relative db path is ignored" has_arg_pair --conf "$T_WORK/etc/tula.conf"
scenario auto FAKE_MODE=error TULA_PLUGSTACK_STRICT=1
check strict "strict: a planning error refuses the job with one error line" \
    eval '[ "$(get rc)" = -1 ] && [ "$(get lines)" = 1 ] && get said | grep -qE "^tula: error: .*no profile.*job not submitted" && [ "$(get sets)" = "" ]'
scenario auto TULA_PLUGSTACK_STRICT=1
check strict-ok "strict: a good plan is applied as usual" eval '[ "$(get rc)" = 0 ] && [ "$(get sets)" = "nodes=2,time=5" ]'

# ---- one grammar: the shim's deadline check agrees with tula_parse_duration (via tula plan) ---
if [ -x "$TULA" ]; then
    for v in 02:00:00 90:00 1-00:00:00 1-12:00 0-00:00 1:2:3 3651-00:00:00 00:00:00 12345678:00 1:60:00 \
             99999:59:59 2h 01:00:00:00; do
        lua_ok=$(lua5.1 -e "slurm={SUCCESS=0,ERROR=-1}; dofile('$T_WORK/cli_filter.lua'); print(tula_cli_filter.valid_deadline('$v'))")
        out=$("$TULA" plan --workload no-such@workload --db "$T_WORK/none.db" --policy "deadline=$v" --format kv 2>&1)
        if grep -q 'deadline must be' <<<"$out"; then c_ok=false; else c_ok=true; fi
        OUT="lua: $lua_ok, tula plan: $c_ok"
        check grammar "deadline '$v': cli_filter.lua and tula_parse_duration agree" [ "$lua_ok" = "$c_ok" ]
    done
fi

if [ "$nfail" -gt 0 ]; then
    echo "FAIL $T_NAME: $nfail check(s) failed"
    exit 1
fi
note "ok: cli_filter.lua behaves"
