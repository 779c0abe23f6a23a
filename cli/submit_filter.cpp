// tula CLI: `tula submit-filter` -- the submission filter that etc/cli_filter.lua runs at
// `sbatch --tula` (tula(1), "tula submit-filter"; spank-tula(8)). The Lua script only carries
// sbatch's options here and applies the answer; every decision is made in submit.cpp and the
// plan in this process (make_plan_report).
//
// Output, key=value lines: action=unchanged|changed|measure|refused, then set=OPTION=VALUE (in
// order), record=KEY=VALUE (the decision record's lines, tula/tula.h, which cli_filter.lua writes
// into the plugin's memory file) and say=LINE (to print), any of them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <CLI/CLI.hpp>

#include "common.hpp"
#include "plan.hpp"
#include "submit.hpp"
#include "tula/error.hpp"
#include "tula/stop.hpp"

namespace tula::cli {
namespace {

constexpr size_t kMaxScriptBytes = 1 << 20;

struct SubmitFilterOptions {
    std::string type = "sbatch";
    int offset = 0;
    std::vector<std::string> opts;   // --opt KEY=VALUE
    std::vector<std::string> spank;  // --spank KEY=VALUE
    int timeout = 0;
};

// KEY=VALUE pairs into a map (the first of a key wins). Errors: UsageError for one without '='.
std::map<std::string, std::string> pairs(const std::vector<std::string>& in, const char* option) {
    std::map<std::string, std::string> m;
    for (const std::string& s : in) {
        const size_t eq = s.find('=');
        if (eq == std::string::npos || eq == 0)
            throw UsageError(std::string(option) + " '" + one_line(s, 64) + "' is not KEY=VALUE");
        m.emplace(s.substr(0, eq), s.substr(eq + 1));
    }
    return m;
}

// The batch script on standard input when that is a regular file: opened again through
// /proc/self/fd/0 (its own offset, so sbatch's is not moved), at most 1 MiB. nullopt otherwise.
std::optional<std::string> stdin_script() {
    struct stat st;
    if (::fstat(0, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
    const int fd = ::open("/proc/self/fd/0", O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return std::nullopt;
    std::string text;
    char buf[16384];
    while (text.size() < kMaxScriptBytes) {
        const ssize_t n = ::read(fd, buf, std::min(sizeof buf, kMaxScriptBytes - text.size()));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return text;
}

// The plan of `o`, made in this process (make_plan_report): what decide_submission takes of it.
PlanAnswer plan_in_process(const PlanOptions& o) {
    std::vector<std::string> warnings;
    std::string table;
    std::optional<SimulatedModels> sim;
    PlanReport r;
    try {
        r = make_plan_report(o, &warnings, &table, &sim);
    } catch (const std::exception& e) {
        // the first warning often says why (a database that was skipped)
        std::string m = bare_message(e.what());
        if (!warnings.empty()) m += " (" + one_line(bare_message(warnings.front())) + ")";
        if (const auto* np = dynamic_cast<const NoProfileError*>(&e)) throw NoProfileError(m, np->workload);
        throw Error(m);
    }
    const Candidate& c = r.plan.choice();
    PlanAnswer a;
    a.nodes = c.nodes;
    a.time_limit = r.plan.time_limit_minutes;
    a.signal_seconds = c.signal_seconds;
    a.time_min = candidate_time_min(c, a.time_limit);
    a.time_min_default = r.time_min;
    a.summary = plan_summary(r);
    a.table = table;
    a.partition = c.partition;
    a.ranks_per_node = c.ranks_per_node;
    a.gpus_per_node = c.gpus_per_node;
    a.exclusive = c.exclusive;
    a.cpus_per_rank = r.cpus_per_rank;
    a.own_profile = c.own_profile;
    return a;
}

int run_submit_filter(const SubmitFilterOptions& o) {
    arm_timeout(o.timeout);
    SubmitInput in;
    in.type = o.type;
    in.offset = o.offset;
    in.options = pairs(o.opts, "--opt");
    in.spank = pairs(o.spank, "--spank");
    for (const char* k : {"TULA_MODE", "TULA_WORKLOAD", "TULA_DEADLINE", "TULA_BUDGET", "TULA_PLUGSTACK_LOADED",
                          "TULA_PLUGSTACK_PLAN", "TULA_PLUGSTACK_CONF", "TULA_PLUGSTACK_DB", "TULA_PLUGSTACK_MARGIN",
                          "TULA_PLUGSTACK_DISABLED", "TULA_PLUGSTACK_STRICT", "SBATCH_EXPORT"})
        if (const char* v = std::getenv(k)) in.env.emplace(k, v);
    if (!in.options.count("argv1") && !in.options.count("wrap")) in.stdin_script = stdin_script();
    const SubmitOutcome out = decide_submission(in, plan_in_process);
    KeyValues kv;
    kv.emplace_back("action", out.kind == SubmitOutcome::Kind::Changed   ? "changed"
                              : out.kind == SubmitOutcome::Kind::Measure ? "measure"
                              : out.kind == SubmitOutcome::Kind::Refused ? "refused"
                                                                         : "unchanged");
    for (const auto& [k, v] : out.sets) kv.emplace_back("set", k + "=" + v);
    for (const std::string& line : record_lines(out.record)) kv.emplace_back("record", line);
    for (const std::string& s : out.said) kv.emplace_back("say", s);
    std::fputs(render_kv(kv).c_str(), stdout);
    return kExitOk;
}

}  // namespace

void add_submit_filter_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<SubmitFilterOptions>();
    CLI::App* sub = app.add_subcommand(
        "submit-filter", "the submission filter cli_filter.lua runs at sbatch --tula: decide, plan, say what to set");
    sub->footer("Reads sbatch's options (--opt, --spank), the TULA_* and TULA_PLUGSTACK_* environment and a batch "
                "script on standard input (a regular file); prints action=, set=, record= and say= lines. See tula(1), "
                "\"tula submit-filter\", and spank-tula(8).");
    sub->add_option("--type", o->type, "sbatch, salloc or srun")->type_name("T");
    sub->add_option("--offset", o->offset, "the heterogeneous job component (0: the first)")->type_name("N");
    sub->add_option("--opt", o->opts, "a Slurm option as cli_filter shows it (repeatable; argv1: the script)")
        ->type_name("KEY=VALUE");
    sub->add_option("--spank", o->spank, "an option of the tula SPANK plugin that was given (repeatable)")
        ->type_name("KEY=VALUE");
    sub->add_option("--timeout", o->timeout, "give up after SECONDS (killed by SIGALRM); 0: no limit")
        ->type_name("SECONDS")
        ->check(CLI::Range(0, 86400));
    sub->callback([o, action] { *action = [o] { return run_submit_filter(*o); }; });
}

}  // namespace tula::cli
