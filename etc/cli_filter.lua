--[[
cli_filter.lua: Tula's shim for Slurm's cli_filter/lua plugin (Lua 5.1).

With `sbatch --tula[=auto|time|cost|dry-run]` (or $TULA_MODE), this script asks the `tula`
CLI for a plan before the job is submitted, fills in the node count and time limit the user
left open (`options["nodes"]`, `options["time"]`: no SPANK call can change them), and writes
the plan table (global batch, epochs and predicted seconds for every node count the job may
be given) into the memory file of the SPANK plugin tula.so (spank-tula(8)), which passes it
to the job. In slurmstepd the plugin only picks the row for the nodes actually allocated.

Installation: beside slurm.conf, with `CliFilterPlugins=cli_filter/lua` in slurm.conf. The
placeholders @TULA_BIN@ (the tula CLI) and @TULA_CONF@ (tula.conf) are substituted by
`make install` and by scripts/tula-cluster.

Rules:
  * only sbatch, only the first component of a heterogeneous job, only when Tula is on;
    `salloc --tula` prints one line saying why it is not planned (no batch step);
  * --tula on the command line or in #SBATCH lines wins over $TULA_MODE; a bare --tula is auto;
  * workload: --tula-workload, else $TULA_WORKLOAD, else the batch script (a file, --wrap, or
    a regular file on standard input; a pipe cannot be read again: then the user is told to
    pass --tula-workload);
  * what the user gave is kept, never cut: an explicit --nodes N (or a range LO-HI) is planned
    as `tula plan --node-range` with a row for each count and left as it is; an explicit
    --time (command line, #SBATCH, SBATCH_TIMELIMIT) is kept, and the line says "kept";
    Tula sets --nodes and --time only when they were not given;
  * the plan's partition, ranks per node and GPUs per node (kv keys partition, ranks_per_node,
    gpus_per_node) become --partition, --ntasks-per-node and --gpus-per-node only where the
    user left them open: -p (one partition or a list, passed on as `tula plan --partition`),
    --ntasks-per-node (passed on as `--ranks-per-node`), --ntasks, --nodelist and any --gpus*
    or --gres keep the user's shape;
  * --tula-deadline=HH:MM:SS (else $TULA_DEADLINE) becomes `tula plan --policy deadline=HH:MM:SS`,
    --tula-budget=X (else $TULA_BUDGET) `--policy budget=X`; giving either option on the command
    line or in #SBATCH turns Tula on (auto) unless --tula=off; both at once is an error;
  * `tula plan` runs under `timeout -k 1 5`: the whole call, from exec to exit, takes at most
    about 6 s, and its output is read to the end (what is past T.MAX_OUTPUT is dropped), so a
    `tula` that hangs or writes without end cannot hang sbatch; any failure prints one line
    `tula: warning: ...; job submitted unchanged` and the job goes on unchanged (fail open);
  * success prints one line saying what changed from what; dry-run prints the plan only.
  * site settings from the plugstack line reach this script through the sbatch process's
    environment, set by tula.so's slurm_spank_init (which runs before this hook) and removed
    again in slurm_spank_init_post_opt (after it, before the job's environment is taken):
    TULA_PLUGSTACK_LOADED=1 (the plugin is there), TULA_PLUGSTACK_PLAN (/proc/self/fd/N, the
    plugin's memory file for the plan table), TULA_PLUGSTACK_CONF (conf=, replaces @TULA_CONF@),
    TULA_PLUGSTACK_DB (db=) and TULA_PLUGSTACK_MARGIN (margin=): a temporary copy of tula.conf
    with that system_db and time_margin (the user's database stays in the list),
    TULA_PLUGSTACK_DISABLED (why the plugin refused its plugstack arguments: Tula is off),
    TULA_PLUGSTACK_STRICT=1 (strict: a Tula problem refuses that one `--tula` submission with one
    `tula: error: ...` line instead of the warning; jobs without --tula are never affected).

`tula plan --format kv` contract: exit 0 with status=ok, nodes=N, global_batch=B, epochs=E,
predicted_seconds=S, cost=C, time_limit=MINUTES, summary=LINE, table=WORKLOAD;N:B:E:S[:R][;...],
and optionally partition=NAME, ranks_per_node=R, gpus_per_node=G;
on failure a non-zero exit, status=error and message=LINE.

The helpers are in the global table `tula_cli_filter` so that tests can call them
(tests/integration/test_local_cli_filter_lua.sh).
]]

local T = {}
tula_cli_filter = T

T.TULA_BIN = "@TULA_BIN@"
T.TULA_CONF = "@TULA_CONF@"
T.PLAN_TIMEOUT = 5          -- seconds `tula plan` may take before the job goes on unchanged
T.KILL_AFTER = 1            -- seconds after that until timeout(1) kills its whole process group
T.MAX_OUTPUT = 65536        -- bytes of `tula plan` output kept (the rest is read and dropped)
T.MAX_TABLE = 4095          -- bytes of the plan table passed to the plugin (TULA_PLAN_MAX - 1)
T.MAX_TABLE_ROWS = 64       -- node counts of a -N LO-HI range the plan table covers
T.MAX_SCRIPT = 1048576      -- bytes of a batch script read from standard input
T.MAX_LINE = 400            -- bytes of a message shown to the user
T.NO_VAL_MINUTES = 4294967294  -- Slurm's NO_VAL: a time limit that was not given

local VALID_MODES = { auto = true, time = true, cost = true, off = true, ["dry-run"] = true }
local VALID_LIST = "auto, time, cost, off, dry-run"

-- Prints one line to the submitting user (sbatch's standard error).
function T.say(line)
    io.stderr:write(line .. "\n")
end

-- A warning that leaves the job unchanged.
function T.warn(msg)
    T.say("tula: warning: " .. msg .. "; job submitted unchanged")
end

-- Under `strict`: an error that refuses the submission.
function T.refuse(msg)
    T.say("tula: error: " .. msg .. "; job not submitted (the site runs Tula in strict mode)")
end

-- The string as one single-quoted shell word: safe for any content without NUL.
function T.shell_quote(s)
    return "'" .. (string.gsub(tostring(s), "'", "'\\''")) .. "'"
end

-- One printable line of at most T.MAX_LINE bytes, without a leading "tula: ".
function T.one_line(s)
    s = string.gsub(tostring(s or ""), "%c", " ")
    s = string.gsub(s, "^%s+", "")
    s = string.gsub(s, "%s+$", "")
    s = string.gsub(s, "^tula: ", "")
    if #s > T.MAX_LINE then s = string.sub(s, 1, T.MAX_LINE) .. "..." end
    return s
end

-- Canonical mode for an option or environment value: nil/"" impossible here; "set" (how
-- cli_filter shows a bare flag) and "" mean auto. Returns mode, or nil and a message.
function T.canonical_mode(value, source)
    if value == "" or value == "set" then return "auto" end
    local v = string.lower(value)
    if VALID_MODES[v] then return v end
    return nil, "invalid " .. source .. " value '" .. T.one_line(string.sub(value, 1, 64)) ..
        "'; valid values: " .. VALID_LIST
end

-- The value of one of the plugin's options (nil when not given or the plugin is not loaded).
function T.spank_option(options, name)
    local ok, sp = pcall(function() return options.spank end)
    if not ok or type(sp) ~= "table" or type(sp.tula) ~= "table" then return nil end
    local v = sp.tula[name]
    if type(v) ~= "string" then return nil end
    return v
end

-- The mode of this submission: --tula, else $TULA_MODE, else "auto" when --tula-deadline or
-- --tula-budget was given as an option, else "off". Returns mode, or nil and a message.
function T.mode_of(options)
    local v = T.spank_option(options, "tula")
    if v ~= nil then return T.canonical_mode(v, "--tula") end
    local e = os.getenv("TULA_MODE")
    if e ~= nil and e ~= "" then return T.canonical_mode(e, "TULA_MODE") end
    local d, b = T.spank_option(options, "tula-deadline"), T.spank_option(options, "tula-budget")
    if (d ~= nil and d ~= "") or (b ~= nil and b ~= "") then return "auto" end
    return "off"
end

-- True if `d` is a duration in the one grammar of tula_parse_duration (tula.h): HH:MM:SS,
-- MM:SS or D-HH:MM:SS (also D-MM:SS); the leading field 1 to 7 digits (at most 1000000), the
-- others two digits below 60, days 0 to 3650; not zero; shorter than 32 bytes.
function T.valid_deadline(d)
    if type(d) ~= "string" or #d >= 32 then return false end
    local days, rest = string.match(d, "^(%d%d?%d?%d?)%-(.*)$")
    if days then days = tonumber(days) else days, rest = 0, d end
    if days > 3650 then return false end
    local a, b, c = string.match(rest, "^(%d+):(%d%d):(%d%d)$")
    local secs
    if a then
        if #a > 7 then return false end
        a, b, c = tonumber(a), tonumber(b), tonumber(c)
        if a > 1000000 or b > 59 or c > 59 then return false end
        secs = a * 3600 + b * 60 + c
    else
        a, b = string.match(rest, "^(%d+):(%d%d)$")
        if not a or #a > 7 then return false end
        a, b = tonumber(a), tonumber(b)
        if a > 1000000 or b > 59 then return false end
        secs = a * 60 + b
    end
    return days * 86400 + secs > 0
end

-- True if `b` is a budget: a positive decimal number (cost units, as price_per_node_hour).
function T.valid_budget(b)
    if type(b) ~= "string" or #b > 24 then return false end
    if not (string.match(b, "^%d+%.?%d*$") or string.match(b, "^%.%d+$")) then return false end
    local v = tonumber(b)
    return v ~= nil and v > 0 and v < 1e15
end

-- The --policy value for `tula plan`: deadline=HH:MM:SS or budget=X when one was given (option,
-- else $TULA_DEADLINE / $TULA_BUDGET), else the mode (dry-run plans as auto).
-- Returns the policy, or nil and a message.
function T.policy_of(options, mode)
    local function pick(opt, env)
        local v = T.spank_option(options, opt)
        if v ~= nil and v ~= "" then return v, "--" .. opt end
        v = os.getenv(env)
        if v ~= nil and v ~= "" then return v, env end
        return nil
    end
    local d, dsrc = pick("tula-deadline", "TULA_DEADLINE")
    local b, bsrc = pick("tula-budget", "TULA_BUDGET")
    if d and b then
        return nil, "both a deadline (" .. dsrc .. ") and a budget (" .. bsrc .. ") given; give one of them"
    end
    if d then
        if not T.valid_deadline(d) then
            return nil, "invalid " .. dsrc .. " value '" .. T.one_line(string.sub(d, 1, 64)) ..
                "'; give a duration HH:MM:SS, e.g. 02:00:00"
        end
        return "deadline=" .. d
    end
    if b then
        if not T.valid_budget(b) then
            return nil, "invalid " .. bsrc .. " value '" .. T.one_line(string.sub(b, 1, 64)) ..
                "'; give a positive number in the site's cost unit, e.g. 2.5"
        end
        return "budget=" .. b
    end
    return (mode == "dry-run") and "auto" or mode
end

-- Site settings from the plugstack line (see the header): a table with conf, db, margin and
-- plan (the memory file for the plan table; strings or nil), strict and loaded (booleans) and
-- disabled (why the plugin refused its plugstack arguments, or nil). Bounded: over-long or
-- malformed values are ignored.
function T.site()
    local function path(name)
        local v = os.getenv(name)
        if type(v) ~= "string" or v == "" or #v > 1023 or string.sub(v, 1, 1) ~= "/" or
            string.find(v, "%c") then return nil end
        return v
    end
    local m = os.getenv("TULA_PLUGSTACK_MARGIN")
    if type(m) ~= "string" or #m > 32 or not string.match(m, "^%d*%.?%d*$") or tonumber(m) == nil then
        m = nil
    end
    local disabled = os.getenv("TULA_PLUGSTACK_DISABLED")
    if type(disabled) ~= "string" then disabled = nil end
    -- plan: /proc/self/fd/N from the plugin; written as the user, like any file the user names
    return { conf = path("TULA_PLUGSTACK_CONF"), db = path("TULA_PLUGSTACK_DB"), margin = m,
             plan = path("TULA_PLUGSTACK_PLAN"),
             strict = os.getenv("TULA_PLUGSTACK_STRICT") == "1",
             loaded = os.getenv("TULA_PLUGSTACK_LOADED") == "1",
             disabled = disabled and T.one_line(disabled) or nil }
end

-- A temporary copy of tula.conf `conf` (missing = empty) with the keys of `over` (a table
-- key -> value) set: its name, or nil. tula.conf allows each key once, so the original lines
-- of those keys are dropped.
function T.conf_with(conf, over)
    local lines, done, in_section = {}, {}, false
    local keys = { "system_db", "time_margin" }
    -- the overrides not written yet, as lines: before the first [partition] section (site-wide
    -- keys belong there), else at the end
    local function pending()
        for _, k in ipairs(keys) do
            if over[k] and not done[k] then lines[#lines + 1] = k .. " = " .. over[k]; done[k] = true end
        end
    end
    local f = io.open(conf, "r")
    if f then
        local text = f:read(T.MAX_OUTPUT) or ""
        f:close()
        for line in string.gmatch(text, "[^\n]*") do
            if not in_section and string.match(line, "^%s*%[") then
                pending()
                in_section = true
            end
            local k = string.match(line, "^%s*([%w_]+)%s*=")
            -- the overriding line in place of the overridden one keeps the line numbers of messages
            if k and over[k] and not in_section then
                line = done[k] and ("# " .. k .. " set by the plugstack line") or (k .. " = " .. over[k])
                done[k] = true
            end
            lines[#lines + 1] = line
        end
    end
    pending()
    return T.write_temp(table.concat(lines, "\n") .. "\n")
end

-- True if `w` is MODEL@DATASET over letters, digits, _ . - (shorter than 128 bytes).
function T.valid_workload(w)
    return type(w) == "string" and #w < 128 and
        string.match(w, "^[%w_%.%-]+@[%w_%.%-]+$") ~= nil
end

-- What the user asked for with --nodes (or #SBATCH -N, or SBATCH_NNODES), from what
-- options["nodes"] shows: nil when nothing was asked (Slurm shows "1-0", or nothing), else
-- lo, hi: "N" gives N, N; "LO-HI" gives LO, HI. Tula keeps what was asked: it plans a row of
-- the plan table for every count of the range and never changes options["nodes"].
function T.node_request(nodes)
    if type(nodes) ~= "string" then return nil end
    local n = string.match(nodes, "^%s*(%d+)%s*$")
    if n then
        n = tonumber(n)
        if n and n >= 1 and n <= 1000000 then return n, n end
        return nil
    end
    local lo, hi = string.match(nodes, "^%s*(%d+)%s*%-%s*(%d+)%s*$")
    lo, hi = tonumber(lo), tonumber(hi)
    if not lo or not hi or hi == 0 then return nil end   -- "1-0": not given
    if lo < 1 then lo = 1 end
    if hi < lo or hi > 1000000 then return nil end
    return lo, hi
end

-- Whole minutes (seconds rounded up) of a Slurm time string: M, M:S, H:M:S, D-H, D-H:M,
-- D-H:M:S. nil for UNLIMITED/INFINITE, 0, empty or anything unparsable (= no limit given),
-- and for NO_VAL: Slurm 22.05 shows a --time that was not given as 2982616-16:14:00, which
-- is NO_VAL (4294967294) minutes.
function T.minutes_of(t)
    if type(t) ~= "string" then return nil end
    t = string.gsub(t, "%s", "")
    local days = 0
    local d, rest = string.match(t, "^(%d+)%-(.+)$")
    local parts = {}
    if d then
        days = tonumber(d)
        for p in string.gmatch(rest, "[^:]+") do parts[#parts + 1] = p end
        if #parts < 1 or #parts > 3 then return nil end
        while #parts < 3 do parts[#parts + 1] = "0" end       -- D-H, D-H:M
    else
        for p in string.gmatch(t, "[^:]+") do parts[#parts + 1] = p end
        if #parts == 1 then parts = { "0", parts[1], "0" }     -- M
        elseif #parts == 2 then parts = { "0", parts[1], parts[2] } -- M:S
        elseif #parts ~= 3 then return nil end
    end
    if not string.find(t, "^[%d:%-]+$") then return nil end
    local h, m, s = tonumber(parts[1]), tonumber(parts[2]), tonumber(parts[3])
    if not (h and m and s) then return nil end
    local total = days * 1440 + h * 60 + m + ((s > 0) and math.ceil(s / 60) or 0)
    if total < 1 or total >= T.NO_VAL_MINUTES then return nil end
    return total
end

-- What the user fixed of the job's shape, from the options table (Slurm 22.05 shows what was
-- not given as nil, ntasks "1", ntasks-per-node "-2"): partition_given = true with any -p,
-- partition = the -p value when it is a name or a list "a,b" (passed to tula plan),
-- ranks_per_node = --ntasks-per-node (nil when not given),
-- ntasks = --ntasks above 1 (nil otherwise: an explicit -n 1 cannot be told from none),
-- nodelist = true with --nodelist, gpus = true with --gpus, --gpus-per-node or --gres.
-- Values that are not plain names or counts are dropped (Slurm itself rejects them later).
function T.shape_request(options)
    local shape = {}
    local part = options.partition
    if type(part) == "string" and part ~= "" and part ~= "(null)" then
        shape.partition_given = true
        if string.match(part, "^[%w_%.%-]+[%w_%.%-,]*$") and #part <= 256 then shape.partition = part end
    end
    local rpn = tonumber(string.match(tostring(options["ntasks-per-node"] or ""), "^%d+$") or "")
    if rpn and rpn >= 1 and rpn <= 1024 then shape.ranks_per_node = rpn end
    local nt = tonumber(string.match(tostring(options.ntasks or ""), "^%d+$") or "")
    if nt and nt > 1 then shape.ntasks = nt end
    local nl = options.nodelist
    shape.nodelist = type(nl) == "string" and nl ~= "" and nl ~= "(null)" or nil
    for _, k in ipairs({ "gpus", "gpus-per-node", "gres", "gpus-per-task", "gpus-per-socket" }) do
        local v = options[k]
        if type(v) == "string" and v ~= "" and v ~= "(null)" and v ~= "0" then shape.gpus = true end
    end
    return shape
end

-- The shell command that runs `tula plan`; its last output line is __tula_exit=STATUS.
-- conf (optional) overrides T.TULA_CONF. node_range "LO-HI" (optional): the counts the user
-- asked for. fixed_epochs (optional, true): every candidate trains the script's epochs.
-- timeout(1) bounds the whole call: after T.PLAN_TIMEOUT s it signals `tula` and its whole
-- process group (anything it started), and kills them T.KILL_AFTER s later, so the
-- output pipe closes however `tula` behaves; `tula plan --timeout` ends itself at the same
-- time (SIGALRM, status 142).
-- shape (optional): what the user fixed of the job's shape (T.shape_request): --partition
-- LIST and --ranks-per-node N narrow the plan's candidates.
function T.plan_command(policy, workload, script, node_range, conf, fixed_epochs, shape)
    local c = { "timeout", "-k", string.format("%d", T.KILL_AFTER), string.format("%d", T.PLAN_TIMEOUT),
                T.shell_quote(T.TULA_BIN), "plan", "--timeout", string.format("%d", T.PLAN_TIMEOUT),
                "--conf", T.shell_quote(conf or T.TULA_CONF), "--format kv", "--policy", T.shell_quote(policy) }
    -- Both when both are known: the workload from --tula-workload, the epochs from the script.
    if workload then c[#c + 1] = "--workload " .. T.shell_quote(workload) end
    if script then c[#c + 1] = "--script " .. T.shell_quote(script) end
    if node_range then c[#c + 1] = "--node-range " .. T.shell_quote(node_range) end
    if fixed_epochs then c[#c + 1] = "--fixed-epochs" end
    if shape and shape.partition then c[#c + 1] = "--partition " .. T.shell_quote(shape.partition) end
    if shape and shape.ranks_per_node then c[#c + 1] = "--ranks-per-node " .. shape.ranks_per_node end
    return table.concat(c, " ") .. " </dev/null 2>&1; echo \"__tula_exit=$?\""
end

-- key=value lines into a table (the first occurrence of a key wins).
function T.parse_kv(text)
    local kv = {}
    for line in string.gmatch(text or "", "[^\n]+") do
        local k, v = string.match(line, "^([%w_]+)=(.*)$")
        if k and kv[k] == nil then kv[k] = string.gsub(v, "\r$", "") end
    end
    return kv
end

-- Runs a shell command and reads its output to the end (so that it never blocks on a full
-- pipe); returns the first T.MAX_OUTPUT bytes of it plus the last line (where plan_command
-- puts the exit status) when more came; nil on failure.
function T.run(cmd)
    local f = io.popen(cmd, "r")
    if not f then return nil end
    local parts, kept, tail = {}, 0, ""
    while true do
        local chunk = f:read(16384)
        if not chunk then break end
        if kept < T.MAX_OUTPUT then
            local take = string.sub(chunk, 1, T.MAX_OUTPUT - kept)
            parts[#parts + 1] = take
            kept = kept + #take
        end
        tail = string.sub(tail .. chunk, -256)
    end
    f:close()
    local out = table.concat(parts)
    if kept >= T.MAX_OUTPUT then
        out = out .. "\n" .. (string.match(tail, "([^\n]*)\n?$") or "")
    end
    return out
end

-- The plan from `tula plan`'s key=value output, or nil and a message. lo, hi: the node counts
-- the user asked for (nil: none).
function T.evaluate(kv, lo, hi, policy)
    local code = tonumber(kv.__tula_exit)
    if kv.status == "ok" and code == 0 then
        local nodes = string.match(kv.nodes or "", "^%d+$") and tonumber(kv.nodes)
        local limit = string.match(kv.time_limit or "", "^%d+$") and tonumber(kv.time_limit)
        if not nodes or nodes < 1 or nodes > 1000000 or not limit or limit < 1 or limit > 525600 * 10 then
            return nil, "tula plan returned an unusable plan (nodes '" .. T.one_line(kv.nodes) ..
                "', time_limit '" .. T.one_line(kv.time_limit) .. "')"
        end
        if hi and (nodes > hi or nodes < lo) then
            return nil, "tula plan chose " .. nodes .. " nodes, outside the " .. lo .. "-" .. hi .. " of --nodes"
        end
        local tbl = kv.table
        if type(tbl) ~= "string" or #tbl > T.MAX_TABLE or
            not string.match(tbl, "^[%w_%.%-]+@[%w_%.%-]+;[%d:%.;]+$") then
            tbl = nil
        end
        local summary = T.one_line(kv.summary)
        if summary == "" then
            summary = (kv.workload and T.one_line(kv.workload) .. ": " or "") .. nodes .. " node(s), global batch " ..
                T.one_line(kv.global_batch) .. ", predicted " .. T.one_line(kv.predicted_seconds) .. " s"
        end
        -- The shape beyond the node count (absent from an older tula: nothing more is set).
        local partition = string.match(kv.partition or "", "^[%w_%.%-]+$")
        local rpn = string.match(kv.ranks_per_node or "", "^%d+$") and tonumber(kv.ranks_per_node)
        if rpn and (rpn < 1 or rpn > 1024) then rpn = nil end
        local gpn = string.match(kv.gpus_per_node or "", "^%d+$") and tonumber(kv.gpus_per_node)
        if gpn and (gpn < 1 or gpn > 1024) then gpn = nil end
        return { nodes = nodes, time_limit = limit, summary = summary, table = tbl, partition = partition,
                 ranks_per_node = rpn, gpus_per_node = gpn }
    end
    if kv.message and T.one_line(kv.message) ~= "" then
        -- the first warning often says why (e.g. a database that was skipped)
        local w = kv.warning and T.one_line(kv.warning) or ""
        return nil, T.one_line(kv.message .. (w ~= "" and (" (" .. w .. ")") or ""))
    end
    if code == 2 and policy and string.find(policy, "=", 1, true) then
        return nil, "this tula does not accept --policy " .. T.one_line(policy) ..
            " (tula plan exit status 2; is the installed Tula older than the plugin?)"
    end
    if code == 142 or code == 124 or code == 137 then  -- SIGALRM of --timeout; timeout(1)'s statuses
        return nil, "tula plan did not answer within " .. T.PLAN_TIMEOUT .. " s"
    elseif code == 126 or code == 127 then
        return nil, "cannot run " .. T.TULA_BIN .. " (is Tula installed?)"
    elseif code == nil then
        return nil, "tula plan could not be run"
    end
    return nil, "tula plan failed (exit status " .. code .. ") without saying why"
end

-- Writes `content` to a new private temporary file; its name, or nil.
function T.write_temp(content)
    local ok, name = pcall(os.tmpname)
    if not ok or not name then return nil end
    local f = io.open(name, "w")
    if not f then os.remove(name); return nil end
    local wrote = f:write(content)
    f:close()
    if not wrote then os.remove(name); return nil end
    return name
end

-- The batch script sbatch read from standard input, if that is a regular file (it can be
-- opened again from its start); nil for a pipe or a terminal.
function T.read_stdin_script()
    local out = T.run("if [ -f /dev/stdin ] && [ -r /dev/stdin ]; then exec head -c " ..
        string.format("%d", T.MAX_SCRIPT) .. " /dev/stdin; fi 2>/dev/null")
    if out == nil or out == "" then return nil end
    return out
end

-- The workload or the script to plan for: workload, script, temporary file to remove;
-- or nil, nil, nil and a message.
function T.job_source(options)
    local w = T.spank_option(options, "tula-workload")
    if w == nil or w == "" then w = os.getenv("TULA_WORKLOAD") end
    if w ~= nil and w ~= "" then
        if not T.valid_workload(w) then
            return nil, nil, nil, "workload '" .. T.one_line(string.sub(w, 1, 64)) ..
                "' is not of the form MODEL@DATASET (letters, digits, _ . -)"
        end
        -- The script (when named) still gives the epochs; tula plan tolerates an unreadable one.
        local a = options.argv
        local s = type(a) == "table" and a[1] or nil
        if type(s) ~= "string" or s == "" then s = nil end
        return w, s, nil
    end
    local argv = options.argv
    local script = type(argv) == "table" and argv[1] or nil
    if type(script) == "string" and script ~= "" then return nil, script, nil end
    local content
    local wrap = options.wrap
    if type(wrap) == "string" and wrap ~= "" then
        content = "#!/bin/sh\n" .. wrap .. "\n"
    else
        content = T.read_stdin_script()
        if not content then
            return nil, nil, nil, "cannot read a batch script given through a pipe; " ..
                "pass --tula-workload=MODEL@DATASET"
        end
    end
    local tmp = T.write_temp(content)
    if not tmp then return nil, nil, nil, "cannot write a temporary copy of the batch script" end
    return nil, tmp, tmp
end

-- Writes the plan table into the plugin's memory file (site.plan); true on success.
-- The options to set beyond --nodes and --time, as a list of { option, value, say }: the
-- plan's partition unless the user gave -p or --nodelist; its ranks per node unless the user
-- gave --ntasks-per-node, --ntasks or --nodelist; its GPUs per node unless the user asked for
-- GPUs in any form. Pure.
function T.shape_changes(shape, plan)
    local sets = {}
    shape = shape or {}
    if plan.partition and not shape.partition_given and not shape.nodelist then
        sets[#sets + 1] = { option = "partition", value = plan.partition, say = "partition default -> " .. plan.partition }
    end
    if plan.ranks_per_node and not shape.ranks_per_node and not shape.ntasks and not shape.nodelist then
        sets[#sets + 1] = { option = "ntasks-per-node", value = tostring(plan.ranks_per_node),
                            say = "ntasks-per-node default -> " .. plan.ranks_per_node }
    end
    if plan.gpus_per_node and not shape.gpus then
        sets[#sets + 1] = { option = "gpus-per-node", value = tostring(plan.gpus_per_node),
                            say = "gpus-per-node default -> " .. plan.gpus_per_node }
    end
    return sets
end

function T.pass_table(site, tbl)
    if not site.plan or not tbl then return false end
    local f = io.open(site.plan, "w")
    if not f then return false end
    local ok = f:write(tbl)
    f:close()
    return ok and true or false
end

-- The work of slurm_cli_pre_submit (may raise; the caller catches). Returns nil when the job
-- goes on (changed or not), or a message when a strict site refuses it.
function T.pre_submit(options, offset)
    if options.type ~= "sbatch" and options.type ~= "salloc" then return end
    if offset ~= nil and tonumber(offset) ~= 0 then return end   -- het job: first component only
    local site = T.site()
    local function problem(msg)
        if site.strict then return msg end
        T.warn(msg)
    end
    local mode, err = T.mode_of(options)
    if not mode then return problem(err) end
    if mode == "off" then return end
    if options.type == "salloc" then
        -- an allocation has no batch step to give the batch size to
        T.say("tula: --tula plans batch jobs (sbatch) only: an salloc allocation has no batch script to " ..
              "give the planned batch size to; allocation requested unchanged")
        return
    end
    if site.disabled then
        return problem("the Tula plugin is disabled: " .. site.disabled .. " (tell your administrator)")
    end
    if not site.loaded then
        return problem("the Tula SPANK plugin is not loaded (plugstack.conf), so no plan can reach the job")
    end
    local policy, perr = T.policy_of(options, mode)
    if not policy then return problem(perr) end

    local workload, script, tmp, why = T.job_source(options)
    if why then return problem(why) end

    local conf, conf_tmp = site.conf, nil
    if site.margin or site.db then
        conf_tmp = T.conf_with(conf or T.TULA_CONF, { time_margin = site.margin, system_db = site.db })
        if not conf_tmp then
            if tmp then os.remove(tmp) end
            return problem("cannot write a temporary tula.conf for the plugstack's db=/margin=")
        end
        conf = conf_tmp
    end
    local nodes_before = options.nodes
    local lo, hi = T.node_request(nodes_before)
    if hi and hi - lo + 1 > T.MAX_TABLE_ROWS then
        if tmp then os.remove(tmp) end
        if conf_tmp then os.remove(conf_tmp) end
        return problem("--nodes " .. T.one_line(nodes_before) .. " spans more than " .. T.MAX_TABLE_ROWS ..
            " node counts; give a narrower range")
    end
    local range = hi and (lo .. "-" .. hi) or nil
    -- --tula-epochs=fixed (validated by the plugin's option callback): the script's epochs at
    -- every batch; follow (the default): the epochs the planned batch needs.
    local fixed_epochs = T.spank_option(options, "tula-epochs") == "fixed"
    local shape = T.shape_request(options)
    local out = T.run(T.plan_command(policy, workload, script, range, conf, fixed_epochs, shape))
    if tmp then os.remove(tmp) end
    if conf_tmp then os.remove(conf_tmp) end
    local plan, msg = T.evaluate(T.parse_kv(out), lo, hi, policy)
    if not plan then
        -- name the site's tula.conf, not the temporary copy
        if conf_tmp then
            msg = string.gsub(msg, string.gsub(conf_tmp, "%p", "%%%0"), (string.gsub(site.conf or T.TULA_CONF, "%%", "%%%%")))
        end
        return problem(msg)
    end

    -- What the user gave explicitly is kept: --nodes (a count or a range) and --time
    -- (command line, #SBATCH or SBATCH_TIMELIMIT). Tula fills in only what was left open.
    local node_change
    if hi then
        node_change = "nodes " .. T.one_line(nodes_before) .. " kept"
    else
        node_change = "nodes default -> " .. plan.nodes
    end
    local user_minutes = T.minutes_of(options.time)
    local time_change
    if user_minutes then
        time_change = "time limit " .. user_minutes .. " min kept (plan: " .. plan.time_limit .. " min" ..
            (user_minutes < plan.time_limit and "; the job may not finish within it" or "") .. ")"
    else
        time_change = "time limit default -> " .. plan.time_limit .. " min"
    end
    local change = node_change .. ", " .. time_change
    -- Partition, ranks per node and GPUs per node: set only where the user left them open
    -- (--partition, --ntasks, --ntasks-per-node, --nodelist, --gpus* keep their shape).
    local sets = T.shape_changes(shape, plan)
    for _, s in ipairs(sets) do change = change .. ", " .. s.say end

    if mode == "dry-run" then
        T.say("tula: dry-run: " .. plan.summary .. "; would set " .. change .. "; job submitted unchanged")
        return
    end
    if not T.pass_table(site, plan.table) then
        return problem("the plan could not be passed to the job (" ..
            (plan.table and "the plugin's memory file cannot be written" or "tula plan gave no plan table") .. ")")
    end
    if not hi then options["nodes"] = tostring(plan.nodes) end
    if not user_minutes then options["time"] = tostring(plan.time_limit) end
    for _, s in ipairs(sets) do options[s.option] = s.value end
    T.say("tula: " .. plan.summary .. "; " .. change)
end

function slurm_cli_setup_defaults(options, early)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
    local ok, err = pcall(T.pre_submit, options, pack_offset)
    if not ok then
        pcall(T.warn, "internal error in cli_filter.lua (" .. T.one_line(tostring(err)) .. ")")
    elseif err ~= nil then
        pcall(T.refuse, err)
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
    return slurm.SUCCESS
end
