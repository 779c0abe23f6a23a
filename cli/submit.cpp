// tula CLI: the submission filter's decisions (see submit.hpp).
#include "submit.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "common.hpp"
#include "text.hpp"
#include "tula/error.hpp"
#include "tula/tula.h"

namespace tula::cli {
namespace {

constexpr long kNoValMinutes = 4294967294L;  // Slurm's NO_VAL: a time limit that was not given
constexpr size_t kMaxReason = 320;           // bytes of a problem's reason in its one line

// The value of `key` in `m`, or nullptr when absent.
const std::string* find(const std::map<std::string, std::string>& m, const std::string& key) {
    const auto it = m.find(key);
    return it == m.end() ? nullptr : &it->second;
}

// `key` of `m` when present and not empty.
std::optional<std::string> given(const std::map<std::string, std::string>& m, const std::string& key) {
    const std::string* v = find(m, key);
    if (!v || v->empty()) return std::nullopt;
    return *v;
}

bool all_digits(const std::string& s) {
    if (s.empty()) return false;
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

// A plain name of letters, digits, '_', '.', '-' (or a comma list of them when `list`).
bool name_list(const std::string& s, bool list) {
    if (s.empty() || s.size() > 256 || s[0] == ',') return false;
    for (char c : s)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || (list && c == ',')))
            return false;
    return true;
}

// The canonical mode of a --tula or $TULA_MODE value ("" and "set", a bare flag, are auto), or
// nullopt with the message naming `source`.
std::optional<std::string> canonical_mode(const std::string& value, const std::string& source, std::string* why) {
    char mode[16], err[TULA_MSG_MAX];
    const std::string v = value == "set" ? std::string() : value;
    if (v.find('\0') == std::string::npos && tula_parse_mode(v.c_str(), mode, sizeof mode, err, sizeof err) == 0)
        return std::string(mode);
    std::string m = bare_message(err);
    const std::string from = "--tula value";
    if (m.find(from) != std::string::npos) m.replace(m.find(from), from.size(), source + " value");
    *why = m;
    return std::nullopt;
}

// The mode of the submission: --tula, else $TULA_MODE, else auto when --tula-deadline or
// --tula-budget was given, else off.
std::optional<std::string> mode_of(const SubmitInput& in, std::string* why) {
    if (const std::string* v = find(in.spank, "tula")) return canonical_mode(*v, "--tula", why);
    if (const auto e = given(in.env, "TULA_MODE")) return canonical_mode(*e, "TULA_MODE", why);
    if (given(in.spank, "tula-deadline") || given(in.spank, "tula-budget")) return std::string("auto");
    return std::string("off");
}

// The policy of the plan: a deadline or a budget (option, else $TULA_DEADLINE / $TULA_BUDGET),
// parsed with the one grammar (names.c); else the mode's (dry-run plans as auto).
std::optional<PolicySpec> policy_of(const SubmitInput& in, const std::string& mode, std::string* why) {
    auto pick = [&](const char* opt, const char* env, std::string* src) -> std::optional<std::string> {
        if (auto v = given(in.spank, opt)) {
            *src = std::string("--") + opt;
            return v;
        }
        if (auto v = given(in.env, env)) {
            *src = env;
            return v;
        }
        return std::nullopt;
    };
    std::string dsrc, bsrc;
    const auto d = pick("tula-deadline", "TULA_DEADLINE", &dsrc);
    const auto b = pick("tula-budget", "TULA_BUDGET", &bsrc);
    auto excerpt = [](const std::string& s) { return one_line(s.substr(0, 64), 64); };
    if (d && b) {
        *why = "both a deadline (" + dsrc + ") and a budget (" + bsrc + ") given; give one of them";
        return std::nullopt;
    }
    PolicySpec spec;
    if (d) {
        const long seconds = d->size() < 32 && d->find('\0') == std::string::npos ? tula_parse_duration(d->c_str(), nullptr, 0) : -1;
        if (seconds <= 0) {
            *why = "invalid " + dsrc + " value '" + excerpt(*d) + "'; give a duration HH:MM:SS, e.g. 02:00:00";
            return std::nullopt;
        }
        spec.policy = Policy::Deadline;
        spec.deadline_seconds = static_cast<double>(seconds);
        return spec;
    }
    if (b) {
        if (b->find('\0') != std::string::npos || tula_check_budget(b->c_str(), &spec.budget, nullptr, 0) != 0) {
            *why = "invalid " + bsrc + " value '" + excerpt(*b) + "'; give a positive number in the site's cost unit, e.g. 2.5";
            return std::nullopt;
        }
        spec.policy = Policy::Budget;
        return spec;
    }
    return parse_policy_spec(mode == "dry-run" ? "auto" : mode);  // auto, time and cost name their policy
}

// What the user fixed of the job's shape (Slurm 22.05 shows ntasks "1" and ntasks-per-node
// "-2" when not given): -p, --ntasks-per-node, --ntasks above 1, --nodelist, any GPUs, how
// the nodes are shared (--exclusive in any form, --oversubscribe), -c.
struct Shape {
    bool partition_given = false;
    std::string partition;  // the -p value when it is a name list (passed to the plan)
    int ranks_per_node = 0;
    bool ntasks = false, nodelist = false, gpus = false, sharing = false, cpus = false;
};

// Whether a cli_filter/lua value of `key` says the user gave the option: Slurm shows an unset
// --exclusive or --oversubscribe as "unset" (an unset -c as "0").
bool option_set(const std::map<std::string, std::string>& o, const char* key) {
    const auto v = given(o, key);
    return v && *v != "unset" && *v != "(null)" && *v != "0" && *v != "-1";
}

Shape shape_of(const std::map<std::string, std::string>& o) {
    auto set = [&](const char* k) {
        const auto v = given(o, k);
        return v && *v != "(null)";
    };
    Shape s;
    if (set("partition")) {
        s.partition_given = true;
        if (name_list(o.at("partition"), true)) s.partition = o.at("partition");
    }
    if (const auto r = given(o, "ntasks-per-node"); r && all_digits(*r) && r->size() <= 4) {
        const int n = std::atoi(r->c_str());
        if (n >= 1 && n <= 1024) s.ranks_per_node = n;
    }
    if (const auto n = given(o, "ntasks"); n && all_digits(*n) && n->size() <= 9) s.ntasks = std::atol(n->c_str()) > 1;
    s.nodelist = set("nodelist");
    s.sharing = option_set(o, "exclusive") || option_set(o, "oversubscribe");
    s.cpus = option_set(o, "cpus-per-task");
    for (const char* k : {"gpus", "gpus-per-node", "gres", "gpus-per-task", "gpus-per-socket"})
        if (set(k) && o.at(k) != "0") s.gpus = true;
    return s;
}

// The job's workload and/or script (PlanOptions), or a problem.
std::optional<std::string> job_source(const SubmitInput& in, PlanOptions* call) {
    std::optional<std::string> w = given(in.spank, "tula-workload");
    if (!w) w = given(in.env, "TULA_WORKLOAD");
    const auto argv1 = given(in.options, "argv1");
    if (w) {
        char err[TULA_MSG_MAX];
        if (w->size() >= TULA_NAME_MAX || tula_check_workload(w->c_str(), err, sizeof err) != 0)
            return "workload '" + one_line(w->substr(0, 64), 64) + "' is not of the form MODEL@DATASET (letters, digits, _ . -)";
        call->workload = *w;
        if (argv1) call->script = *argv1;  // still gives the epochs; the plan tolerates an unreadable one
        return std::nullopt;
    }
    if (argv1) {
        call->script = *argv1;
    } else if (const auto wrap = given(in.options, "wrap")) {
        call->script = "the --wrap command";
        call->script_text = "#!/bin/sh\n" + *wrap + "\n";
    } else if (in.stdin_script && !in.stdin_script->empty()) {
        call->script = "the batch script on standard input";
        call->script_text = *in.stdin_script;
    } else {
        return std::string("cannot read a batch script given through a pipe; pass --tula-workload=MODEL@DATASET");
    }
    return std::nullopt;
}

// The options to set beyond --nodes and --time, with what the line says of each: the plan's
// partition unless the user gave -p or --nodelist, its ranks per node unless --ntasks-per-node,
// --ntasks or --nodelist, its GPUs per node unless any GPUs were asked for, whole nodes
// (--exclusive) where the plan assumed them unless --exclusive or --oversubscribe was given,
// its CPUs per rank (--cpus-per-task) unless -c was given. --mem is never set.
std::vector<std::pair<std::string, std::string>> shape_changes(const Shape& s, const PlanAnswer& p,
                                                               std::vector<std::string>* say) {
    std::vector<std::pair<std::string, std::string>> sets;
    if (!p.partition.empty() && !s.partition_given && !s.nodelist) {
        sets.emplace_back("partition", p.partition);
        say->push_back("partition default -> " + p.partition);
    }
    if (p.ranks_per_node > 0 && !s.ranks_per_node && !s.ntasks && !s.nodelist) {
        sets.emplace_back("ntasks-per-node", std::to_string(p.ranks_per_node));
        say->push_back("ntasks-per-node default -> " + std::to_string(p.ranks_per_node));
    }
    if (p.gpus_per_node > 0 && !s.gpus) {
        sets.emplace_back("gpus-per-node", std::to_string(p.gpus_per_node));
        say->push_back("gpus-per-node default -> " + std::to_string(p.gpus_per_node));
    }
    if (p.exclusive && !s.sharing) {
        sets.emplace_back("exclusive", "exclusive");
        say->push_back("exclusive default -> whole nodes");
    }
    if (p.cpus_per_rank > 0 && !s.cpus) {
        sets.emplace_back("cpus-per-task", std::to_string(p.cpus_per_rank));
        say->push_back("cpus-per-task default -> " + std::to_string(p.cpus_per_rank));
    }
    return sets;
}

// Whether cli_filter/lua shows a --signal: Slurm writes an unset one as "0@0" (signal 0, time
// 0); absent, empty and "(null)" are unset too.
bool signal_given(const std::map<std::string, std::string>& o) {
    const auto v = given(o, "signal");
    return v && *v != "0@0" && *v != "0" && *v != "(null)";
}

// --signal and --requeue where the user left them open, with what the line says of each: the
// plan's stop signal, USR1 S seconds before the time limit (tula-train and tula.Requeue then
// checkpoint and requeue the job; tula-jobs(7)), and --requeue unless --requeue or
// --no-requeue was given (cli_filter/lua shows both as "unset", "requeue" or "no-requeue").
std::vector<std::pair<std::string, std::string>> stop_changes(const std::map<std::string, std::string>& o,
                                                              const PlanAnswer& p, std::vector<std::string>* say) {
    std::vector<std::pair<std::string, std::string>> sets;
    if (p.signal_seconds >= 1 && p.signal_seconds <= 65535 && !signal_given(o)) {
        sets.emplace_back("signal", "USR1@" + std::to_string(p.signal_seconds));
        say->push_back("signal default -> USR1@" + std::to_string(p.signal_seconds));
    }
    const std::string rq = given(o, "requeue").value_or("unset");
    if (p.signal_seconds >= 1 && rq == "unset") {
        sets.emplace_back("requeue", "requeue");
        say->push_back("requeue default -> yes");
    }
    return sets;
}

// --time-min where the job asks for it (--tula-time-min=yes, or tula.conf's time_min = yes
// unless --tula-time-min=no) and gave none, at most the time limit the job will have: the
// shortest part backfill may start it with (it then checkpoints and requeues itself).
std::vector<std::pair<std::string, std::string>> time_min_changes(const SubmitInput& in, const PlanAnswer& p,
                                                                  std::optional<long> user_minutes,
                                                                  std::vector<std::string>* say) {
    const std::string want = given(in.spank, "tula-time-min").value_or("");
    const bool on = want == "yes" || (want != "no" && p.time_min_default);
    if (!on || p.time_min < 1 || time_minutes(given(in.options, "time-min").value_or(""))) return {};
    long m = p.time_min;
    if (user_minutes) m = std::min(m, *user_minutes);
    say->push_back("time-min default -> " + std::to_string(m) + " min");
    return {{"time-min", std::to_string(m)}};
}

// A plan table as the plugin takes it: WORKLOAD;N:B:E:S[:R][;...], shorter than TULA_PLAN_MAX.
bool valid_table(const std::string& t) {
    const size_t semi = t.find(';');
    if (t.size() >= TULA_PLAN_MAX || semi == std::string::npos || semi + 1 >= t.size()) return false;
    if (tula_check_workload(t.substr(0, semi).c_str(), nullptr, 0) != 0) return false;
    for (size_t i = semi + 1; i < t.size(); ++i)
        if (!(std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == ':' || t[i] == '.' || t[i] == ';')) return false;
    return true;
}

}  // namespace

SiteSettings site_settings(const std::map<std::string, std::string>& env) {
    auto path = [&](const char* k) {
        const auto v = given(env, k);
        if (!v || v->size() > 1023 || (*v)[0] != '/') return std::string();
        for (char c : *v)
            if (std::iscntrl(static_cast<unsigned char>(c))) return std::string();
        return *v;
    };
    SiteSettings s;
    s.conf = path("TULA_PLUGSTACK_CONF");
    s.db = path("TULA_PLUGSTACK_DB");
    s.plan = path("TULA_PLUGSTACK_PLAN");
    if (const auto m = given(env, "TULA_PLUGSTACK_MARGIN"); m && m->size() <= 32) {
        double v = 0;
        if (m->find('\0') == std::string::npos && tula_parse_plain_decimal(m->c_str(), 33, &v) == 0 && v <= 100)
            s.margin = v;
    }
    if (const std::string* d = find(env, "TULA_PLUGSTACK_DISABLED")) s.disabled = one_line(bare_message(*d));
    s.loaded = given(env, "TULA_PLUGSTACK_LOADED").value_or("") == "1";
    s.strict = given(env, "TULA_PLUGSTACK_STRICT").value_or("") == "1";
    return s;
}

std::optional<long> time_minutes(const std::string& in) {
    std::string t;
    for (char c : in)
        if (!std::isspace(static_cast<unsigned char>(c))) t += c;
    if (t.empty() || t.size() > 32) return std::nullopt;
    for (char c : t)
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == ':' || c == '-')) return std::nullopt;
    long days = 0;
    std::string rest = t;
    const size_t dash = t.find('-');
    if (dash != std::string::npos) {
        if (dash == 0 || !all_digits(t.substr(0, dash))) return std::nullopt;
        days = std::atol(t.substr(0, dash).c_str());
        rest = t.substr(dash + 1);
    }
    std::vector<std::string> parts;
    size_t from = 0;
    for (;;) {
        const size_t c = rest.find(':', from);
        parts.push_back(rest.substr(from, c == std::string::npos ? std::string::npos : c - from));
        if (c == std::string::npos) break;
        from = c + 1;
    }
    for (const std::string& p : parts)
        if (!all_digits(p) || p.size() > 9) return std::nullopt;
    if (dash != std::string::npos) {
        if (parts.size() > 3) return std::nullopt;
        while (parts.size() < 3) parts.push_back("0");  // D-H, D-H:M
    } else if (parts.size() == 1) {
        parts = {"0", parts[0], "0"};  // M
    } else if (parts.size() == 2) {
        parts = {"0", parts[0], parts[1]};  // M:S
    } else if (parts.size() != 3) {
        return std::nullopt;
    }
    const long h = std::atol(parts[0].c_str()), m = std::atol(parts[1].c_str()), s = std::atol(parts[2].c_str());
    if (days > 100000000L) return std::nullopt;
    const long total = days * 1440 + h * 60 + m + (s > 0 ? (s + 59) / 60 : 0);
    if (total < 1 || total >= kNoValMinutes) return std::nullopt;
    return total;
}

std::optional<std::pair<int, int>> node_request(const std::string& in) {
    std::string n;
    for (char c : in)
        if (!std::isspace(static_cast<unsigned char>(c))) n += c;
    const size_t dash = n.find('-');
    const std::string a = n.substr(0, dash), b = dash == std::string::npos ? a : n.substr(dash + 1);
    if (!all_digits(a) || !all_digits(b) || a.size() > 7 || b.size() > 7) return std::nullopt;
    long lo = std::atol(a.c_str()), hi = std::atol(b.c_str());
    if (dash == std::string::npos && (lo < 1 || lo > 1000000)) return std::nullopt;
    if (hi == 0) return std::nullopt;  // "1-0": not given
    if (lo < 1) lo = 1;
    if (hi < lo || hi > 1000000) return std::nullopt;
    return std::make_pair(static_cast<int>(lo), static_cast<int>(hi));
}

namespace {

// Whether the user chose the job's exported environment (--export, SBATCH_EXPORT): Tula then
// cannot add TULA_PROFILE=1 to it.
bool export_chosen(const SubmitInput& in) {
    const std::string exported = given(in.options, "export").value_or("");
    return (!exported.empty() && exported != "unset" && exported != "(null)") || given(in.env, "SBATCH_EXPORT");
}

// The set and the words of a planned job whose partition's class has no compute profile of its
// own (PlanAnswer::own_profile: its step scaled from another class, or the rows of unknown
// class; the plan's reason says which): it measures its step there (TULA_PROFILE=1 through
// --export, tula-jobs(7)) while it trains as planned, so that the next plan there uses what it
// measured; with the user's own --export, words that say what to add.
std::vector<std::pair<std::string, std::string>> measure_class_changes(const SubmitInput& in, const PlanAnswer& p,
                                                                       std::vector<std::string>* say) {
    if (p.own_profile) return {};
    if (export_chosen(in)) {
        say->push_back("add TULA_PROFILE=1 to --export to measure its step here");
        return {};
    }
    say->push_back("measures its step here (TULA_PROFILE=1)");
    return {{"export", "ALL,TULA_PROFILE=1"}};
}

}  // namespace

// A workload with no profile: the job runs as submitted and measures itself (TULA_PROFILE=1 in
// its environment through --export, tula-jobs(7)), unless the user chose the exported
// environment (export_chosen): then `problem` with what to add.
template <typename Problem>
SubmitOutcome measure_first(const SubmitInput& in, const std::string& mode, const NoProfileError& e, Problem problem) {
    if (export_chosen(in))
        return problem(std::string(e.what()) + "; or add TULA_PROFILE=1 to --export so that the job measures itself");
    SubmitOutcome out;
    const std::string what = "no profile of " + one_line(e.workload, 80) + " yet: the job runs as submitted and measures its "
                             "step first (TULA_PROFILE=1, at most 60 s; tula-jobs(7)), and its next submission is planned "
                             "from what it measured";
    if (mode == "dry-run") {
        out.said.push_back("tula: dry-run: " + what + "; would set export ALL,TULA_PROFILE=1; job submitted unchanged");
        return out;
    }
    out.kind = SubmitOutcome::Kind::Measure;
    out.sets.emplace_back("export", "ALL,TULA_PROFILE=1");
    out.said.push_back("tula: " + what);
    return out;
}

std::vector<std::string> record_lines(const SubmitRecord& r) {
    std::vector<std::string> lines;
    if (r.mode.empty()) return lines;
    lines.push_back("mode=" + r.mode);
    if (!r.policy.empty()) lines.push_back("policy=" + r.policy);
    if (!r.workload.empty()) lines.push_back("workload=" + r.workload);
    if (!r.table.empty()) lines.push_back("table=" + r.table);
    return lines;
}

std::string policy_text(const PolicySpec& p) {
    if (p.policy == Policy::Deadline) return "deadline=" + format_hms(p.deadline_seconds);
    if (p.policy != Policy::Budget) return "";
    char buf[64];
    for (int decimals = 0; decimals <= 30; ++decimals) {  // the shortest plain decimal that reads back
        std::snprintf(buf, sizeof buf, "%.*f", decimals, p.budget);
        if (std::strtod(buf, nullptr) == p.budget) break;
    }
    return std::string("budget=") + buf;
}

SubmitOutcome decide_submission(const SubmitInput& in, const Planner& planner) {
    SubmitOutcome out;
    if (in.type != "sbatch" && in.type != "salloc") return out;
    if (in.offset != 0) return out;  // a heterogeneous job: its first component only
    const SiteSettings site = site_settings(in.env);
    // The reason is cut to kMaxReason bytes so that the whole line, with its ending, fits what
    // cli_filter.lua prints (T.MAX_LINE, 400 bytes).
    auto problem = [&](const std::string& msg) {
        const std::string m = one_line(bare_message(msg), kMaxReason);
        if (site.strict) {
            out.kind = SubmitOutcome::Kind::Refused;
            out.said.push_back("tula: error: " + m + "; job not submitted (the site runs Tula in strict mode)");
        } else {
            out.said.push_back("tula: warning: " + m + "; job submitted unchanged");
        }
        return out;
    };
    std::string why;
    const std::optional<std::string> mode = mode_of(in, &why);
    if (!mode) return problem(why);
    if (*mode == "off") return out;
    out.record.mode = *mode;
    if (in.type == "salloc") {  // an allocation has no batch step to give the batch size to
        out.said.push_back("tula: --tula plans batch jobs (sbatch) only: an salloc allocation has no batch script to "
                           "give the planned batch size to; allocation requested unchanged");
        return out;
    }
    if (!site.disabled.empty()) return problem("the Tula plugin is disabled: " + site.disabled + " (tell your administrator)");
    if (!site.loaded) return problem("the Tula SPANK plugin is not loaded (plugstack.conf), so no plan can reach the job");
    PlanOptions call;  // tula plan's options: the site's configuration, then the job's
    call.common.conf = site.conf.empty() ? std::string(default_conf_path()) : site.conf;  // never the user's $TULA_CONF
    call.common.system_db = site.db;
    call.common.time_margin = site.margin;
    const std::optional<PolicySpec> policy = policy_of(in, *mode, &why);
    if (!policy) return problem(why);
    call.policy = *policy;
    out.record.policy = policy_text(*policy);
    if (const auto bad = job_source(in, &call)) return problem(*bad);
    out.record.workload = call.workload;
    const std::string nodes_before = given(in.options, "nodes").value_or("");
    const auto range = node_request(nodes_before);
    if (range && range->second - range->first + 1 > TULA_PLAN_ROWS_MAX)
        return problem("--nodes " + one_line(nodes_before) + " spans more than " + std::to_string(TULA_PLAN_ROWS_MAX) +
                       " node counts; give a narrower range");
    call.node_range = range;
    // --tula-epochs=fixed (checked by the plugin's option callback): the script's epochs at every batch
    call.fixed_epochs = given(in.spank, "tula-epochs").value_or("") == "fixed";
    // --tula-time-min=yes|no (checked by the plugin's option callback): the plan looks for a hole
    const std::string time_min = given(in.spank, "tula-time-min").value_or("");
    if (time_min == "yes" || time_min == "no") call.time_min = time_min;
    const Shape shape = shape_of(in.options);
    call.partition = shape.partition;
    call.ranks_per_node = shape.ranks_per_node;
    PlanAnswer plan;
    try {
        plan = planner(call);
    } catch (const NoProfileError& e) {
        SubmitOutcome measure = measure_first(in, *mode, e, problem);
        measure.record = out.record;
        return measure;
    } catch (const std::exception& e) {
        return problem(e.what());
    }
    if (plan.nodes < 1 || plan.nodes > 1000000 || plan.time_limit < 1 || plan.time_limit > 5256000)
        return problem("tula plan returned an unusable plan (nodes " + std::to_string(plan.nodes) + ", time limit " +
                       std::to_string(plan.time_limit) + ")");
    if (range && (plan.nodes > range->second || plan.nodes < range->first))
        return problem("tula plan chose " + std::to_string(plan.nodes) + " nodes, outside the " +
                       std::to_string(range->first) + "-" + std::to_string(range->second) + " of --nodes");
    if (!name_list(plan.partition, false)) plan.partition.clear();
    if (plan.ranks_per_node < 1 || plan.ranks_per_node > 1024) plan.ranks_per_node = 0;
    if (plan.gpus_per_node < 1 || plan.gpus_per_node > 1024) plan.gpus_per_node = 0;

    // What the user gave explicitly is kept: --nodes (a count or a range) and --time. Tula fills
    // in only what was left open.
    std::vector<std::string> change;
    // first: the line is cut at cli_filter.lua's length
    const auto measure_sets = measure_class_changes(in, plan, &change);
    change.push_back(range ? "nodes " + one_line(nodes_before) + " kept" : "nodes default -> " + std::to_string(plan.nodes));
    const std::optional<long> user_minutes = time_minutes(given(in.options, "time").value_or(""));
    if (user_minutes)
        change.push_back("time limit " + std::to_string(*user_minutes) + " min kept (plan: " +
                         std::to_string(plan.time_limit) + " min" +
                         (*user_minutes < plan.time_limit ? "; the job may not finish within it" : "") + ")");
    else
        change.push_back("time limit default -> " + std::to_string(plan.time_limit) + " min");
    auto shape_sets = shape_changes(shape, plan, &change);
    for (auto& s : stop_changes(in.options, plan, &change)) shape_sets.push_back(std::move(s));
    for (auto& s : time_min_changes(in, plan, user_minutes, &change)) shape_sets.push_back(std::move(s));
    for (const auto& s : measure_sets) shape_sets.push_back(s);
    std::string changes;
    for (const std::string& c : change) changes += (changes.empty() ? "" : ", ") + c;
    const std::string summary = one_line(bare_message(plan.summary));
    if (*mode == "dry-run") {
        out.said.push_back("tula: dry-run: " + summary + "; would set " + changes + "; job submitted unchanged");
        return out;
    }
    if (!valid_table(plan.table)) return problem("the plan could not be passed to the job (tula plan gave no plan table)");
    if (site.plan.empty())
        return problem("the plan could not be passed to the job (the plugin named no memory file for it)");
    if (!range) out.sets.emplace_back("nodes", std::to_string(plan.nodes));
    if (!user_minutes) out.sets.emplace_back("time", std::to_string(plan.time_limit));
    for (const auto& s : shape_sets) out.sets.push_back(s);
    out.record.table = plan.table;
    out.kind = SubmitOutcome::Kind::Changed;
    out.said.push_back("tula: " + summary + "; " + changes);
    return out;
}

}  // namespace tula::cli
