--[[
cli_filter.lua: Tula's shim for Slurm's cli_filter/lua plugin (Lua 5.1): transport only.

With `sbatch --tula[=auto|time|cost|dry-run]` (or $TULA_MODE, --tula-deadline, --tula-budget),
this script hands sbatch's options to `tula submit-filter` and applies its answer: the options
to set (`options["nodes"]`, `options["time"]`, partition, ntasks-per-node, gpus-per-node,
signal, requeue, time-min, exclusive, cpus-per-task, and export for a first job that measures
itself: no SPANK call can change them), the decision record for the SPANK plugin tula.so (the
mode, policy, workload and plan table, written verbatim into the plugin's memory file; the plugin
passes it to the job without deciding again; spank-tula(8)), the line to print, or the refusal of a
strict site. Every decision (mode, policy, the deadline and budget grammar, what the user left
open, the plugstack's conf=, db= and margin=) is made in `tula submit-filter` (tula(1)); see there
for the rules.

Installation: beside slurm.conf, with `CliFilterPlugins=cli_filter/lua` in slurm.conf. The
placeholder @TULA_BIN@ (the tula CLI) is substituted by `make install` and by
scripts/tula-cluster.

What this script does itself:
  * nothing at all, and no process is started, unless the submission names Tula: one of the
    plugin's options --tula, --tula-deadline, --tula-budget, or $TULA_MODE (jobs without
    Tula are never affected);
  * `tula submit-filter` runs under `timeout -k 1 5` (and its own --timeout 5): the whole call,
    from exec to exit, takes at most about 6 s, and its output is read to the end (what is
    past T.MAX_OUTPUT is dropped), so a `tula` that hangs or writes without end cannot hang
    sbatch; when it cannot answer, one line `tula: warning: ...; job submitted unchanged`
    (under strict, TULA_PLUGSTACK_STRICT=1 from the plugin: `tula: error: ...`, job refused);
  * the decision record goes to the plugin's memory file (TULA_PLUGSTACK_PLAN, /proc/self/fd/N
    of this sbatch process, which the child cannot open).

The helpers are in the global table `tula_cli_filter` so that tests can call them
(tests/integration/test_local_cli_filter_lua.sh).
]]

local T = {}
tula_cli_filter = T

T.TULA_BIN = "@TULA_BIN@"
T.PLAN_TIMEOUT = 5          -- seconds `tula submit-filter` may take before the job goes on unchanged
T.KILL_AFTER = 1            -- seconds after that until timeout(1) kills its whole process group
T.MAX_OUTPUT = 65536        -- bytes of its output kept (the rest is read and dropped)
T.MAX_LINE = 400            -- bytes of a message shown to the user

-- The Slurm options the filter reads, as cli_filter/lua shows them.
T.OPTIONS = { "nodes", "time", "partition", "ntasks", "ntasks-per-node", "nodelist", "gpus", "gpus-per-node",
              "gres", "gpus-per-task", "gpus-per-socket", "wrap", "signal", "requeue",
              "time-min", "exclusive", "oversubscribe", "cpus-per-task", "export" }
-- The plugin's options.
T.SPANK = { "tula", "tula-workload", "tula-deadline", "tula-budget", "tula-epochs", "tula-time-min" }
-- The options `tula submit-filter` may set.
T.SETTABLE = { nodes = true, time = true, partition = true, ["ntasks-per-node"] = true, ["gpus-per-node"] = true,
                signal = true, requeue = true, ["time-min"] = true, exclusive = true, ["cpus-per-task"] = true,
                export = true }

-- Prints one line to the submitting user (sbatch's standard error).
function T.say(line)
    io.stderr:write(line .. "\n")
end

-- One printable line of at most T.MAX_LINE bytes.
function T.one_line(s)
    s = string.gsub(tostring(s or ""), "%c", " ")
    if #s > T.MAX_LINE then s = string.sub(s, 1, T.MAX_LINE) .. "..." end
    return s
end

-- A problem of the transport itself: a warning, or under strict a refusal (returns its line).
function T.problem(msg)
    if os.getenv("TULA_PLUGSTACK_STRICT") == "1" then
        return "tula: error: " .. msg .. "; job not submitted (the site runs Tula in strict mode)"
    end
    T.say("tula: warning: " .. msg .. "; job submitted unchanged")
end

-- The string as one single-quoted shell word: safe for any content without NUL.
function T.shell_quote(s)
    return "'" .. (string.gsub(tostring(s), "'", "'\\''")) .. "'"
end

-- The value of one of the plugin's options (nil when not given or the plugin is not loaded).
function T.spank_option(options, name)
    local ok, sp = pcall(function() return options.spank end)
    if not ok or type(sp) ~= "table" or type(sp.tula) ~= "table" then return nil end
    local v = sp.tula[name]
    if type(v) ~= "string" then return nil end
    return v
end

-- True when the submission names Tula (an option of the plugin or $TULA_MODE).
function T.names_tula(options)
    for _, k in ipairs({ "tula", "tula-deadline", "tula-budget" }) do
        local v = T.spank_option(options, k)
        if v ~= nil and (k == "tula" or v ~= "") then return true end
    end
    local m = os.getenv("TULA_MODE")
    return m ~= nil and m ~= ""
end

-- The shell command that runs `tula submit-filter` with sbatch's options; its last output
-- line is __tula_exit=STATUS. Standard input stays sbatch's (a script given there is read
-- from it when it is a regular file).
function T.filter_command(options, offset)
    local c = { "timeout", "-k", string.format("%d", T.KILL_AFTER), string.format("%d", T.PLAN_TIMEOUT),
                T.shell_quote(T.TULA_BIN), "submit-filter", "--timeout", string.format("%d", T.PLAN_TIMEOUT),
                "--type", T.shell_quote(options.type), "--offset", string.format("%d", tonumber(offset) or 0) }
    for _, k in ipairs(T.OPTIONS) do
        local v = options[k]
        -- --export's values stay out of the command line (they may hold secrets): only that it was given
        if k == "export" and type(v) == "string" then v = (v ~= "" and v ~= "unset") and "given" or nil end
        if type(v) == "string" then c[#c + 1] = "--opt " .. T.shell_quote(k .. "=" .. v) end
    end
    local argv = options.argv
    local script = type(argv) == "table" and argv[1] or nil
    if type(script) == "string" and script ~= "" then c[#c + 1] = "--opt " .. T.shell_quote("argv1=" .. script) end
    for _, k in ipairs(T.SPANK) do
        local v = T.spank_option(options, k)
        if v ~= nil then c[#c + 1] = "--spank " .. T.shell_quote(k .. "=" .. v) end
    end
    return table.concat(c, " ") .. " 2>&1; echo \"__tula_exit=$?\""
end

-- Runs a shell command and reads its output to the end (so that it never blocks on a full
-- pipe); returns the first T.MAX_OUTPUT bytes of it plus the last line (where filter_command
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

-- The answer of `tula submit-filter` (key=value lines): a table with action, sets (a list of
-- { option, value }), record (the decision record's lines, in order) and said (lines); or nil
-- and why it gave none.
function T.parse(out)
    local a = { sets = {}, record = {}, said = {} }
    for line in string.gmatch(out or "", "[^\n]+") do
        local k, v = string.match(line, "^([%w_]+)=(.*)$")
        if k == "action" and a.action == nil then a.action = v
        elseif k == "set" then
            local o, val = string.match(v, "^([%w%-]+)=(.*)$")
            if o and T.SETTABLE[o] then a.sets[#a.sets + 1] = { o, val } end
        elseif k == "record" then
            if string.match(v, "^[%w_]+=") then a.record[#a.record + 1] = v end
        elseif k == "say" then a.said[#a.said + 1] = T.one_line(v)
        elseif k == "__tula_exit" then a.exit = tonumber(v) end
    end
    if a.exit == 0 and (a.action == "unchanged" or a.action == "changed" or a.action == "measure" or
                        a.action == "refused") then return a end
    local code = a.exit
    if code == 142 or code == 124 or code == 137 then  -- SIGALRM of --timeout; timeout(1)'s statuses
        return nil, "tula submit-filter did not answer within " .. T.PLAN_TIMEOUT .. " s"
    elseif code == 126 or code == 127 then
        return nil, "cannot run " .. T.TULA_BIN .. " (is Tula installed?)"
    elseif code == nil then
        return nil, "tula submit-filter could not be run"
    elseif code == 2 then
        return nil, "this tula has no submit-filter command (exit status 2; is the installed Tula older than the plugin?)"
    end
    return nil, "tula submit-filter failed (exit status " .. code .. ") without an answer"
end

-- Writes the decision record's lines into the plugin's memory file, as they came; true on
-- success (and when there are none: Tula is off for the submission).
function T.pass_record(lines)
    if #lines == 0 then return true end
    local path = os.getenv("TULA_PLUGSTACK_PLAN")
    if not path or path == "" then return false end
    local f = io.open(path, "w")
    if not f then return false end
    local ok = f:write(table.concat(lines, "\n") .. "\n")
    f:close()
    return ok and true or false
end

-- The work of slurm_cli_pre_submit (may raise; the caller catches). Returns nil when the job
-- goes on (changed or not), or the line that refuses it.
function T.pre_submit(options, offset)
    if options.type ~= "sbatch" and options.type ~= "salloc" then return end
    if offset ~= nil and tonumber(offset) ~= 0 then return end   -- het job: first component only
    if not T.names_tula(options) then return end
    local answer, why = T.parse(T.run(T.filter_command(options, offset)))
    if not answer then return T.problem(why) end
    if answer.action == "refused" then return answer.said[1] or "tula: error: job refused" end
    -- the record also when unchanged: the job then knows that no plan reached it
    if not T.pass_record(answer.record) and answer.action == "changed" then
        return T.problem("the plan could not be passed to the job (the plugin's memory file cannot be written)")
    end
    if answer.action == "changed" or answer.action == "measure" then
        for _, s in ipairs(answer.sets) do options[s[1]] = s[2] end
    end
    for _, l in ipairs(answer.said) do T.say(l) end
end

function slurm_cli_setup_defaults(options, early)
    return slurm.SUCCESS
end

function slurm_cli_pre_submit(options, pack_offset)
    local ok, err = pcall(T.pre_submit, options, pack_offset)
    if not ok then  -- a fault of this script: the job goes on unchanged, also under strict
        pcall(T.say, "tula: warning: internal error in cli_filter.lua (" .. T.one_line(tostring(err)) ..
            "); job submitted unchanged")
    elseif err ~= nil then
        pcall(T.say, err)
        return slurm.ERROR
    end
    return slurm.SUCCESS
end

function slurm_cli_post_submit(offset, jobid, stepid)
    return slurm.SUCCESS
end
