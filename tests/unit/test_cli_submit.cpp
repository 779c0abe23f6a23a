// Unit tests of the submission filter's decisions (cli/submit.hpp), with a fake planner that
// records what it was asked and answers as told: every behaviour the Lua filter had, now in
// C++. The Lua transport is tested by tests/integration/test_local_cli_filter_lua.sh.
#include <cppunit/extensions/HelperMacros.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/common.hpp"
#include "cli/submit.hpp"
#include "plugin/tula_plugin.h"
#include "test_util.hpp"
#include "tula/error.hpp"
#include "tula/tula.h"

namespace {

using namespace tula::cli;
using tula_test::contains;

// Whether the plan's policy `p` is a deadline of `seconds`, or a budget of `budget`.
bool is_deadline(const tula::PolicySpec& p, double seconds) {
    return p.policy == tula::Policy::Deadline && p.deadline_seconds == seconds;
}
bool is_budget(const tula::PolicySpec& p, double budget) { return p.policy == tula::Policy::Budget && p.budget == budget; }

// The fake planner: what it was asked, and what it answers.
struct Fake {
    int calls = 0;
    PlanOptions call;
    PlanAnswer answer;
    std::string error;  // non-empty: the planner throws this
    std::string no_profile;  // non-empty: the planner throws tula::NoProfileError of this workload
    Fake() {
        answer.nodes = 2;
        answer.time_limit = 5;
        answer.summary = "lenet5@fashion-mnist: 2 nodes x global batch 128, predicted 123 s";
        answer.table = "lenet5@fashion-mnist;2:128:10:123.4";
    }
    Planner planner() {
        return [this](const PlanOptions& c) {
            ++calls;
            call = c;
            if (!error.empty()) throw std::runtime_error(error);
            if (!no_profile.empty())
                throw tula::NoProfileError("no profile for workload " + no_profile + "; run `tula profile compute`", no_profile);
            return answer;
        };
    }
};

// An sbatch submission with `--tula=MODE` (nullptr: no --tula) of the script /job.sbatch,
// with the plugin loaded and its memory file named.
SubmitInput sbatch(const char* mode) {
    SubmitInput in;
    in.options["argv1"] = "/job.sbatch";
    in.options["nodes"] = "1-0";
    in.options["ntasks"] = "1";
    in.options["ntasks-per-node"] = "-2";
    if (mode) in.spank["tula"] = mode;
    in.env["TULA_PLUGSTACK_LOADED"] = "1";
    in.env["TULA_PLUGSTACK_PLAN"] = "/proc/self/fd/9";
    return in;
}

using Sets = std::vector<std::pair<std::string, std::string>>;

bool unchanged_one_warning(const SubmitOutcome& o) {
    return o.kind == SubmitOutcome::Kind::Unchanged && o.sets.empty() && o.said.size() == 1 &&
           o.said[0].rfind("tula: warning: ", 0) == 0 && contains(o.said[0], "; job submitted unchanged");
}
bool silent(const SubmitOutcome& o) {
    return o.kind == SubmitOutcome::Kind::Unchanged && o.sets.empty() && o.said.empty();
}

}  // namespace

class CliSubmitTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CliSubmitTest);
    CPPUNIT_TEST(test_success);
    CPPUNIT_TEST(test_modes);
    CPPUNIT_TEST(test_nodes_and_time_kept);
    CPPUNIT_TEST(test_sources);
    CPPUNIT_TEST(test_nothing_to_do);
    CPPUNIT_TEST(test_plugin_and_strict);
    CPPUNIT_TEST(test_shape);
    CPPUNIT_TEST(test_whole_nodes_and_cpus);
    CPPUNIT_TEST(test_stop_signal_and_requeue);
    CPPUNIT_TEST(test_time_min);
    CPPUNIT_TEST(test_plan_failures);
    CPPUNIT_TEST(test_no_profile_measures);
    CPPUNIT_TEST(test_scaled_class_measures);
    CPPUNIT_TEST(test_deadline_and_budget);
    CPPUNIT_TEST(test_decision_record);
    CPPUNIT_TEST(test_record_reaches_the_plugin);
    CPPUNIT_TEST(test_site_settings);
    CPPUNIT_TEST(test_one_duration_grammar);
    CPPUNIT_TEST(test_time_minutes);
    CPPUNIT_TEST(test_site_overrides_of_tula_conf);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_success() {
        Fake f;
        const SubmitOutcome o = decide_submission(sbatch("auto"), f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Changed);
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}}));
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5@fashion-mnist;2:128:10:123.4"), o.record.table);
        CPPUNIT_ASSERT_EQUAL(size_t(1), o.said.size());
        CPPUNIT_ASSERT_EQUAL(std::string("tula: lenet5@fashion-mnist: 2 nodes x global batch 128, predicted 123 s; "
                                         "nodes default -> 2, time limit default -> 5 min"),
                             o.said[0]);
        CPPUNIT_ASSERT(f.call.policy.policy == tula::Policy::Auto);
        CPPUNIT_ASSERT_EQUAL(std::string("/job.sbatch"), f.call.script);
        CPPUNIT_ASSERT(f.call.workload.empty() && !f.call.node_range && !f.call.fixed_epochs);
        // a "tula: " in the planner's summary is not doubled
        f.answer.summary = "tula: x@y: 2 nodes";
        CPPUNIT_ASSERT(!contains(decide_submission(sbatch("auto"), f.planner()).said[0], "tula: tula:"));
    }

    void test_modes() {
        Fake f;
        decide_submission(sbatch("set"), f.planner());  // a bare --tula, as cli_filter shows it
        CPPUNIT_ASSERT(f.call.policy.policy == tula::Policy::Auto);
        decide_submission(sbatch("TIME"), f.planner());
        CPPUNIT_ASSERT(f.call.policy.policy == tula::Policy::Time);
        SubmitInput env = sbatch(nullptr);
        env.env["TULA_MODE"] = "cost";
        decide_submission(env, f.planner());
        CPPUNIT_ASSERT(f.call.policy.policy == tula::Policy::Cost);
        SubmitInput off = sbatch("off");  // --tula=off wins over TULA_MODE
        off.env["TULA_MODE"] = "auto";
        const int before = f.calls;
        CPPUNIT_ASSERT(silent(decide_submission(off, f.planner())));
        CPPUNIT_ASSERT_EQUAL(before, f.calls);
        SubmitInput given = sbatch("auto");  // TULA_MODE is ignored when --tula is given
        given.env["TULA_MODE"] = "bogus";
        CPPUNIT_ASSERT(decide_submission(given, f.planner()).kind == SubmitOutcome::Kind::Changed);
        SubmitInput bad = sbatch(nullptr);
        bad.env["TULA_MODE"] = "bogus";
        const SubmitOutcome b = decide_submission(bad, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(b));
        CPPUNIT_ASSERT(contains(b.said[0], "auto, time, cost, off, dry-run") && contains(b.said[0], "TULA_MODE value 'bogus'"));
        const SubmitOutcome dry = decide_submission(sbatch("dry-run"), f.planner());
        CPPUNIT_ASSERT(dry.kind == SubmitOutcome::Kind::Unchanged && dry.sets.empty() && dry.record.table.empty());
        CPPUNIT_ASSERT_EQUAL(size_t(1), dry.said.size());
        CPPUNIT_ASSERT(dry.said[0].rfind("tula: dry-run: ", 0) == 0 && contains(dry.said[0], "would set nodes default -> 2") &&
                       contains(dry.said[0], "job submitted unchanged"));
        CPPUNIT_ASSERT(f.call.policy.policy == tula::Policy::Auto);  // dry-run plans as auto
    }

    void test_nodes_and_time_kept() {
        Fake f;
        SubmitInput range = sbatch("auto");
        range.options["nodes"] = "1-4";
        f.answer.nodes = 4;
        SubmitOutcome o = decide_submission(range, f.planner());
        CPPUNIT_ASSERT(f.call.node_range == std::make_optional(std::make_pair(1, 4)));
        CPPUNIT_ASSERT(o.sets == (Sets{{"time", "5"}}));
        CPPUNIT_ASSERT(contains(o.said[0], "nodes 1-4 kept"));
        SubmitInput exact = sbatch("auto");
        exact.options["nodes"] = "1";
        f.answer.nodes = 1;
        o = decide_submission(exact, f.planner());
        CPPUNIT_ASSERT(f.call.node_range == std::make_optional(std::make_pair(1, 1)));
        CPPUNIT_ASSERT(o.sets == (Sets{{"time", "5"}}));
        f.answer.nodes = 99;  // a plan outside the range
        o = decide_submission(range, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "outside the 1-4"));
        SubmitInput wide = sbatch("auto");
        wide.options["nodes"] = "1-100";
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(wide, f.planner())));
        f.answer.nodes = 2;
        SubmitInput t = sbatch("auto");
        t.options["time"] = "00:03:00";
        o = decide_submission(t, f.planner());
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}}));
        CPPUNIT_ASSERT(contains(o.said[0], "time limit 3 min kept (plan: 5 min; the job may not finish within it)"));
        f.answer.time_limit = 7;
        t.options["time"] = "1-00:00:00";
        o = decide_submission(t, f.planner());
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}}) && contains(o.said[0], "time limit 1440 min kept (plan: 7 min)"));
        for (const char* unset : {"UNLIMITED", "2982616-16:14:00", "0", ""}) {  // no limit given
            t.options["time"] = unset;
            o = decide_submission(t, f.planner());
            CPPUNIT_ASSERT_MESSAGE(unset, o.sets == (Sets{{"nodes", "2"}, {"time", "7"}}));
            CPPUNIT_ASSERT(contains(o.said[0], "time limit default -> 7 min"));
        }
        t.options.erase("time");  // nil from Slurm 23.11
        CPPUNIT_ASSERT(decide_submission(t, f.planner()).sets == (Sets{{"nodes", "2"}, {"time", "7"}}));
    }

    void test_sources() {
        Fake f;
        SubmitInput w = sbatch("cost");
        w.spank["tula-workload"] = "fmnist-cnn@fashion-mnist";
        decide_submission(w, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string("fmnist-cnn@fashion-mnist"), f.call.workload);
        CPPUNIT_ASSERT_EQUAL(std::string("/job.sbatch"), f.call.script);  // still gives the epochs
        SubmitInput env = sbatch("auto");
        env.env["TULA_WORKLOAD"] = "lenet5@fashion-mnist";
        decide_submission(env, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5@fashion-mnist"), f.call.workload);
        SubmitInput bad = sbatch("auto");
        bad.spank["tula-workload"] = "a b'@c";
        const int before = f.calls;
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(bad, f.planner())));
        CPPUNIT_ASSERT_EQUAL(before, f.calls);
        SubmitInput wrap = sbatch("auto");
        wrap.options.erase("argv1");
        wrap.options["wrap"] = "mpirun tula-train --model lenet5 --data fashion-mnist";
        decide_submission(wrap, f.planner());
        CPPUNIT_ASSERT(contains(f.call.script_text, "mpirun tula-train --model lenet5") && !f.call.script.empty());
        SubmitInput in = sbatch("auto");
        in.options.erase("argv1");
        in.stdin_script = std::string("#!/bin/bash\ntula-train --model lenet5 --data fashion-mnist\n");
        CPPUNIT_ASSERT(decide_submission(in, f.planner()).kind == SubmitOutcome::Kind::Changed);
        CPPUNIT_ASSERT_EQUAL(*in.stdin_script, f.call.script_text);
        in.stdin_script.reset();  // a pipe
        const SubmitOutcome p = decide_submission(in, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(p) && contains(p.said[0], "--tula-workload"));
        SubmitInput fixed = sbatch("auto");
        fixed.spank["tula-epochs"] = "fixed";
        decide_submission(fixed, f.planner());
        CPPUNIT_ASSERT(f.call.fixed_epochs);
        fixed.spank["tula-epochs"] = "follow";
        decide_submission(fixed, f.planner());
        CPPUNIT_ASSERT(!f.call.fixed_epochs);
    }

    void test_nothing_to_do() {
        Fake f;
        CPPUNIT_ASSERT(silent(decide_submission(sbatch(nullptr), f.planner())));  // no --tula, no TULA_MODE
        SubmitInput srun = sbatch("auto");
        srun.type = "srun";
        CPPUNIT_ASSERT(silent(decide_submission(srun, f.planner())));
        SubmitInput het = sbatch("auto");
        het.offset = 1;
        CPPUNIT_ASSERT(silent(decide_submission(het, f.planner())));
        SubmitInput salloc = sbatch("auto");
        salloc.type = "salloc";
        const SubmitOutcome s = decide_submission(salloc, f.planner());
        CPPUNIT_ASSERT(s.kind == SubmitOutcome::Kind::Unchanged && s.said.size() == 1 && contains(s.said[0], "sbatch"));
        salloc.spank.clear();
        CPPUNIT_ASSERT(silent(decide_submission(salloc, f.planner())));
        CPPUNIT_ASSERT_EQUAL(0, f.calls);
    }

    void test_plugin_and_strict() {
        Fake f;
        SubmitInput none = sbatch("auto");
        none.env.erase("TULA_PLUGSTACK_LOADED");
        SubmitOutcome o = decide_submission(none, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "not loaded"));
        SubmitInput dis = sbatch("auto");
        dis.env["TULA_PLUGSTACK_DISABLED"] = "tula: unknown plugstack argument 'bogus=1'";
        o = decide_submission(dis, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "bogus=1"));
        dis.env["TULA_PLUGSTACK_STRICT"] = "1";
        o = decide_submission(dis, f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Refused && o.said.size() == 1);
        CPPUNIT_ASSERT(o.said[0].rfind("tula: error: ", 0) == 0 && contains(o.said[0], "disabled") &&
                       contains(o.said[0], "job not submitted"));
        dis.spank.clear();  // a job without --tula is untouched, strict or not
        CPPUNIT_ASSERT(silent(decide_submission(dis, f.planner())));
        CPPUNIT_ASSERT_EQUAL(0, f.calls);
        SubmitInput strict = sbatch("auto");
        strict.env["TULA_PLUGSTACK_STRICT"] = "1";
        CPPUNIT_ASSERT(decide_submission(strict, f.planner()).kind == SubmitOutcome::Kind::Changed);
        f.error = "tula: no profile for workload lenet5@fashion-mnist; run tula profile";
        o = decide_submission(strict, f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Refused && o.sets.empty() && contains(o.said[0], "no profile"));
        SubmitInput noplan = sbatch("auto");
        noplan.env.erase("TULA_PLUGSTACK_PLAN");
        f.error.clear();
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(noplan, f.planner())));
    }

    // --signal=USR1@S and --requeue are set where the user left them open (cli_filter/lua shows
    // an unset --signal as "0@0" and --requeue/--no-requeue as "unset"), kept otherwise.
    // The plan's whole nodes and CPUs per rank are asked for; the user's --exclusive (in any
    // form), --oversubscribe and -c are kept, as cli_filter/lua shows them (unset: "unset",
    // "0"); --mem is never set.
    void test_whole_nodes_and_cpus() {
        Fake f;
        f.answer.exclusive = true;
        f.answer.cpus_per_rank = 2;
        SubmitInput in = sbatch("auto");
        in.options["exclusive"] = "unset";
        in.options["oversubscribe"] = "unset";
        in.options["cpus-per-task"] = "0";
        SubmitOutcome o = decide_submission(in, f.planner());
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"exclusive", "exclusive"}, {"cpus-per-task", "2"}}));
        CPPUNIT_ASSERT(contains(o.said[0], "exclusive default -> whole nodes, cpus-per-task default -> 2"));
        for (const char* given : {"exclusive", "user", "mcs", "oversubscribe"}) {
            SubmitInput e = in;
            e.options["exclusive"] = given;
            o = decide_submission(e, f.planner());
            CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"cpus-per-task", "2"}}));
        }
        SubmitInput over = in;
        over.options["oversubscribe"] = "set";
        CPPUNIT_ASSERT(decide_submission(over, f.planner()).sets ==
                       (Sets{{"nodes", "2"}, {"time", "5"}, {"cpus-per-task", "2"}}));
        SubmitInput c = in;
        c.options["cpus-per-task"] = "1";
        c.options["mem"] = "1G";
        CPPUNIT_ASSERT(decide_submission(c, f.planner()).sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"exclusive", "exclusive"}}));
        Fake shared;  // a plan of shared nodes and no --threads: neither is asked for
        CPPUNIT_ASSERT(decide_submission(in, shared.planner()).sets == (Sets{{"nodes", "2"}, {"time", "5"}}));
    }

    void test_stop_signal_and_requeue() {
        Fake f;
        f.answer.signal_seconds = 95;
        SubmitInput in = sbatch("auto");
        in.options["signal"] = "0@0";
        in.options["requeue"] = "unset";
        SubmitOutcome o = decide_submission(in, f.planner());
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"signal", "USR1@95"}, {"requeue", "requeue"}}));
        CPPUNIT_ASSERT(contains(o.said[0], "signal default -> USR1@95, requeue default -> yes"));
        o = decide_submission(sbatch("auto"), f.planner());  // options not shown at all: open too
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"signal", "USR1@95"}, {"requeue", "requeue"}}));
        for (const char* given : {"USR2@300", "B:USR1", "10"}) {
            SubmitInput g = in;
            g.options["signal"] = given;
            o = decide_submission(g, f.planner());
            CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"requeue", "requeue"}}));
        }
        for (const char* given : {"requeue", "no-requeue"}) {
            SubmitInput g = in;
            g.options["requeue"] = given;
            o = decide_submission(g, f.planner());
            CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"signal", "USR1@95"}}));
        }
        SubmitInput d = in;  // dry-run says it and sets nothing
        d.spank["tula"] = "dry-run";
        o = decide_submission(d, f.planner());
        CPPUNIT_ASSERT(o.sets.empty() && contains(o.said[0], "signal default -> USR1@95"));
        Fake none;  // a plan without a stop signal: neither is set
        CPPUNIT_ASSERT(decide_submission(in, none.planner()).sets == (Sets{{"nodes", "2"}, {"time", "5"}}));
    }

    // --time-min: with --tula-time-min=yes, or tula.conf's time_min unless --tula-time-min=no;
    // never over an explicit --time-min; at most the user's --time. 22.05 shows an unset one as
    // Slurm's NO_VAL duration.
    void test_time_min() {
        Fake f;
        f.answer.time_min = 3;
        auto time_min_set = [](const SubmitOutcome& o) -> std::string {
            for (const auto& s : o.sets)
                if (s.first == "time-min") return s.second;
            return "";
        };
        SubmitInput in = sbatch("auto");
        in.options["time-min"] = "2982616-04:14:00";
        CPPUNIT_ASSERT_EQUAL(std::string(""), time_min_set(decide_submission(in, f.planner())));  // not asked for
        SubmitInput yes = in;
        yes.spank["tula-time-min"] = "yes";
        SubmitOutcome o = decide_submission(yes, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string("3"), time_min_set(o));
        CPPUNIT_ASSERT(contains(o.said[0], "time-min default -> 3 min"));
        f.answer.time_min_default = true;  // tula.conf time_min = yes
        CPPUNIT_ASSERT_EQUAL(std::string("3"), time_min_set(decide_submission(in, f.planner())));
        SubmitInput no = in;
        no.spank["tula-time-min"] = "no";
        CPPUNIT_ASSERT_EQUAL(std::string(""), time_min_set(decide_submission(no, f.planner())));
        SubmitInput own = in;  // an explicit --time-min is kept
        own.options["time-min"] = "10";
        CPPUNIT_ASSERT_EQUAL(std::string(""), time_min_set(decide_submission(own, f.planner())));
        SubmitInput shorter = in;  // at most the user's --time
        shorter.options["time"] = "2";
        CPPUNIT_ASSERT_EQUAL(std::string("2"), time_min_set(decide_submission(shorter, f.planner())));
    }

    void test_shape() {
        Fake f;
        f.answer.partition = "fast";
        f.answer.ranks_per_node = 2;
        f.answer.gpus_per_node = 4;
        SubmitOutcome o = decide_submission(sbatch("auto"), f.planner());
        CPPUNIT_ASSERT(o.sets ==
                       (Sets{{"nodes", "2"}, {"time", "5"}, {"partition", "fast"}, {"ntasks-per-node", "2"}, {"gpus-per-node", "4"}}));
        CPPUNIT_ASSERT(contains(o.said[0], "partition default -> fast, ntasks-per-node default -> 2, gpus-per-node default -> 4"));
        CPPUNIT_ASSERT(f.call.partition.empty() && f.call.ranks_per_node == 0);
        SubmitInput p = sbatch("auto");
        p.options["partition"] = "cpu,fast";
        o = decide_submission(p, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string("cpu,fast"), f.call.partition);
        for (const auto& s : o.sets) CPPUNIT_ASSERT(s.first != "partition");
        SubmitInput r = sbatch("auto");
        r.options["ntasks-per-node"] = "3";
        o = decide_submission(r, f.planner());
        CPPUNIT_ASSERT_EQUAL(3, f.call.ranks_per_node);
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"partition", "fast"}, {"gpus-per-node", "4"}}));
        SubmitInput n = sbatch("auto");
        n.options["ntasks"] = "5";
        o = decide_submission(n, f.planner());
        for (const auto& s : o.sets) CPPUNIT_ASSERT(s.first != "ntasks-per-node");
        SubmitInput l = sbatch("auto");
        l.options["nodelist"] = "n1,n2";
        o = decide_submission(l, f.planner());
        for (const auto& s : o.sets) CPPUNIT_ASSERT(s.first != "ntasks-per-node" && s.first != "partition");
        SubmitInput g = sbatch("auto");
        g.options["gpus-per-node"] = "1";
        o = decide_submission(g, f.planner());
        for (const auto& s : o.sets) CPPUNIT_ASSERT(s.first != "gpus-per-node");
        SubmitInput bad = sbatch("auto");  // not a name list: neither passed on nor replaced
        bad.options["partition"] = "cpu;touch INJECTED";
        o = decide_submission(bad, f.planner());
        CPPUNIT_ASSERT(f.call.partition.empty());
        for (const auto& s : o.sets) CPPUNIT_ASSERT(s.first != "partition");
        Fake old;  // a plan of no partition: only nodes and time
        CPPUNIT_ASSERT(decide_submission(sbatch("auto"), old.planner()).sets == (Sets{{"nodes", "2"}, {"time", "5"}}));
    }

    void test_plan_failures() {
        Fake f;
        f.error = "tula: no profile for workload lenet5@fashion-mnist; run tula profile";
        SubmitOutcome o = decide_submission(sbatch("auto"), f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "no profile for workload lenet5@fashion-mnist"));
        CPPUNIT_ASSERT(!contains(o.said[0], "tula: warning: tula:"));
        // a long reason (tula.conf's list of valid keys) is cut, not the line's ending: the line
        // fits cli_filter.lua's 400 bytes (T.MAX_LINE) whole, also under strict
        f.error = "tula.conf line 89: unknown key 'bogus' (valid keys: " + std::string(600, 'k') + ")";
        o = decide_submission(sbatch("auto"), f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && o.said[0].size() <= 400);
        SubmitInput strict = sbatch("auto");
        strict.env["TULA_PLUGSTACK_STRICT"] = "1";
        o = decide_submission(strict, f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Refused && o.said[0].size() <= 400 &&
                       contains(o.said[0], "; job not submitted (the site runs Tula in strict mode)"));
        f.error.clear();
        f.answer.table.clear();  // no plan table
        o = decide_submission(sbatch("auto"), f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "no plan table"));
        f.answer.table = "not a table";
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(sbatch("auto"), f.planner())));
        f.answer.table = "lenet5@fashion-mnist;2:128:10:123.4";
        f.answer.time_limit = 0;  // unusable
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(sbatch("auto"), f.planner())));
    }

    // A workload with no profile: the job runs as submitted with TULA_PROFILE=1 exported (strict
    // or not), one line; the user's own --export or SBATCH_EXPORT is kept (a warning says what to
    // add); dry-run says it and sets nothing.
    void test_no_profile_measures() {
        Fake f;
        f.no_profile = "net@data";
        const Sets measure = {{"export", "ALL,TULA_PROFILE=1"}};
        for (const bool strict : {false, true}) {
            SubmitInput in = sbatch("auto");
            if (strict) in.env["TULA_PLUGSTACK_STRICT"] = "1";
            in.options["export"] = "unset";
            const SubmitOutcome o = decide_submission(in, f.planner());
            CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Measure && o.sets == measure && o.record.table.empty());
            CPPUNIT_ASSERT_EQUAL(size_t(1), o.said.size());
            CPPUNIT_ASSERT_MESSAGE(o.said[0], o.said[0].rfind("tula: no profile of net@data yet: the job runs as submitted "
                                                              "and measures its step first (TULA_PROFILE=1", 0) == 0);
        }
        SubmitInput own = sbatch("auto");
        own.options["export"] = "given";
        SubmitOutcome o = decide_submission(own, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "add TULA_PROFILE=1 to --export"));
        SubmitInput env = sbatch("auto");
        env.env["SBATCH_EXPORT"] = "NONE";
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(env, f.planner())));
        o = decide_submission(sbatch("dry-run"), f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Unchanged && o.sets.empty() && o.said.size() == 1);
        CPPUNIT_ASSERT_MESSAGE(o.said[0], o.said[0].rfind("tula: dry-run: no profile of net@data yet", 0) == 0 &&
                                              contains(o.said[0], "would set export ALL,TULA_PROFILE=1"));
    }

    // A plan whose step was scaled from another hardware class: the job is planned as usual and
    // also measures its step on its partition (TULA_PROFILE=1 exported); with the user's own
    // --export, the line says what to add and nothing is exported; a measured class sets nothing.
    void test_scaled_class_measures() {
        Fake f;
        f.answer.partition = "gpu";
        f.answer.own_profile = false;
        SubmitOutcome o = decide_submission(sbatch("auto"), f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Changed && !o.record.table.empty());
        CPPUNIT_ASSERT(o.sets == (Sets{{"nodes", "2"}, {"time", "5"}, {"partition", "gpu"}, {"export", "ALL,TULA_PROFILE=1"}}));
        // first after the plan's summary: the line may be cut after it
        CPPUNIT_ASSERT_MESSAGE(o.said[0], contains(o.said[0], "predicted 123 s; measures its step here (TULA_PROFILE=1), "
                                                              "nodes default -> 2"));
        SubmitInput own = sbatch("auto");
        own.options["export"] = "given";
        o = decide_submission(own, f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Changed);
        for (const auto& kv : o.sets) CPPUNIT_ASSERT(kv.first != "export");
        CPPUNIT_ASSERT_MESSAGE(o.said[0], contains(o.said[0], "add TULA_PROFILE=1 to --export to measure its step here"));
        f.answer.own_profile = true;
        o = decide_submission(sbatch("auto"), f.planner());
        for (const auto& kv : o.sets) CPPUNIT_ASSERT(kv.first != "export");
        CPPUNIT_ASSERT(!contains(o.said[0], "TULA_PROFILE"));
    }

    void test_deadline_and_budget() {
        Fake f;
        SubmitInput d = sbatch("auto");
        d.spank["tula-deadline"] = "02:00:00";
        decide_submission(d, f.planner());
        CPPUNIT_ASSERT(is_deadline(f.call.policy, 7200));  // 02:00:00
        SubmitInput only = sbatch(nullptr);  // turns Tula on by itself
        only.spank["tula-deadline"] = "00:30:00";
        CPPUNIT_ASSERT(decide_submission(only, f.planner()).kind == SubmitOutcome::Kind::Changed);
        CPPUNIT_ASSERT(is_deadline(f.call.policy, 1800));  // 00:30:00
        SubmitInput off = sbatch("off");
        off.spank["tula-deadline"] = "00:30:00";
        CPPUNIT_ASSERT(silent(decide_submission(off, f.planner())));
        SubmitInput b = sbatch("time");
        b.spank["tula-budget"] = "2.5";
        decide_submission(b, f.planner());
        CPPUNIT_ASSERT(is_budget(f.call.policy, 2.5));
        SubmitInput ed = sbatch("auto");
        ed.env["TULA_DEADLINE"] = "01:00:00";
        decide_submission(ed, f.planner());
        CPPUNIT_ASSERT(is_deadline(f.call.policy, 3600));  // 01:00:00
        SubmitInput eb = sbatch("auto");
        eb.env["TULA_BUDGET"] = "7";
        decide_submission(eb, f.planner());
        CPPUNIT_ASSERT(is_budget(f.call.policy, 7));
        SubmitInput env_only = sbatch(nullptr);  // TULA_DEADLINE alone does not turn Tula on
        env_only.env["TULA_DEADLINE"] = "01:00:00";
        const int before = f.calls;
        CPPUNIT_ASSERT(silent(decide_submission(env_only, f.planner())));
        SubmitInput both = sbatch("auto");
        both.spank["tula-deadline"] = "02:00:00";
        both.spank["tula-budget"] = "3";
        SubmitOutcome o = decide_submission(both, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "give one of them"));
        SubmitInput bad = sbatch("auto");
        bad.spank["tula-deadline"] = "2h'; touch INJECTED";
        o = decide_submission(bad, f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o) && contains(o.said[0], "HH:MM:SS"));
        SubmitInput neg = sbatch("auto");
        neg.spank["tula-budget"] = "-1";
        CPPUNIT_ASSERT(unchanged_one_warning(decide_submission(neg, f.planner())));
        CPPUNIT_ASSERT_EQUAL(before, f.calls);
    }

    // The decision record holds what was decided, whatever the action: the mode, a deadline or
    // budget policy, the workload given, and the plan table only when the job was changed.
    void test_decision_record() {
        Fake f;
        SubmitInput d = sbatch("auto");
        d.spank["tula-deadline"] = "02:00:00";
        d.spank["tula-workload"] = "lenet5@fashion-mnist";
        SubmitOutcome o = decide_submission(d, f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Changed);
        CPPUNIT_ASSERT(record_lines(o.record) ==
                       (std::vector<std::string>{"mode=auto", "policy=deadline=02:00:00", "workload=lenet5@fashion-mnist",
                                                 "table=lenet5@fashion-mnist;2:128:10:123.4"}));
        SubmitInput b = sbatch("TIME");
        b.env["TULA_BUDGET"] = "2.5";
        o = decide_submission(b, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string("time"), o.record.mode);
        CPPUNIT_ASSERT_EQUAL(std::string("budget=2.5"), o.record.policy);
        // a problem: the job is unchanged, and its record says that Tula was on
        f.error = "tula: error: no such partition";
        o = decide_submission(sbatch("cost"), f.planner());
        CPPUNIT_ASSERT(unchanged_one_warning(o));
        CPPUNIT_ASSERT(record_lines(o.record) == std::vector<std::string>{"mode=cost"});
        f.error.clear();
        // dry-run: the record without a table
        o = decide_submission(sbatch("dry-run"), f.planner());
        CPPUNIT_ASSERT(record_lines(o.record) == std::vector<std::string>{"mode=dry-run"});
        // a first job that measures itself
        f.no_profile = "net@data";
        SubmitInput m = sbatch("auto");
        m.spank["tula-workload"] = "net@data";
        o = decide_submission(m, f.planner());
        CPPUNIT_ASSERT(o.kind == SubmitOutcome::Kind::Measure);
        CPPUNIT_ASSERT(record_lines(o.record) == (std::vector<std::string>{"mode=auto", "workload=net@data"}));
        f.no_profile.clear();
        // off, and a bad mode: no record
        CPPUNIT_ASSERT(record_lines(decide_submission(sbatch("off"), f.planner()).record).empty());
        CPPUNIT_ASSERT(record_lines(decide_submission(sbatch(nullptr), f.planner()).record).empty());
        SubmitInput bad = sbatch(nullptr);
        bad.env["TULA_MODE"] = "bogus";
        CPPUNIT_ASSERT(record_lines(decide_submission(bad, f.planner()).record).empty());
    }

    // What decide_submission writes, the plugin reads back field for field (tula_plugin_record,
    // the C parser of the same format), for deadlines of a day and more and budgets of every size.
    void test_record_reaches_the_plugin() {
        Fake f;
        f.answer.table = "lenet5@fashion-mnist;1:64:3:10.0;2:128:3:6.5:2";
        f.answer.nodes = 1;
        struct Case {
            const char* option;
            const char* value;
            const char* policy;  // as the record shows it
        } cases[] = {{nullptr, nullptr, ""},
                     {"tula-deadline", "01:30:00", "deadline=01:30:00"},
                     {"tula-deadline", "90:00", "deadline=01:30:00"},
                     {"tula-deadline", "2-01:00:00", "deadline=2-01:00:00"},
                     {"tula-budget", "7", "budget=7"},
                     {"tula-budget", "0.1", "budget=0.1"},
                     {"tula-budget", "0.0000001", "budget=0.0000001"},
                     {"tula-budget", "999999999999999", "budget=999999999999999"}};
        for (const Case& c : cases) {
            SubmitInput in = sbatch("auto");
            in.options["nodes"] = "1-2";
            in.spank["tula-workload"] = "lenet5@fashion-mnist";
            if (c.option) in.spank[c.option] = c.value;
            const SubmitOutcome o = decide_submission(in, f.planner());
            CPPUNIT_ASSERT_MESSAGE(c.policy, o.kind == SubmitOutcome::Kind::Changed);
            CPPUNIT_ASSERT_EQUAL(std::string(c.policy), o.record.policy);
            std::string text;
            for (const std::string& l : record_lines(o.record)) text += l + "\n";  // as cli_filter.lua writes it
            tula_record r;
            char err[TULA_MSG_MAX];
            CPPUNIT_ASSERT_EQUAL_MESSAGE(text + err, 0, tula_plugin_record(text.c_str(), &r, err, sizeof err));
            CPPUNIT_ASSERT_EQUAL(o.record.mode, std::string(r.mode));
            CPPUNIT_ASSERT_EQUAL(o.record.policy, std::string(r.policy));
            CPPUNIT_ASSERT_EQUAL(o.record.workload, std::string(r.workload));
            CPPUNIT_ASSERT_EQUAL(o.record.table, std::string(r.table));
        }
    }

    void test_site_settings() {
        Fake f;
        SubmitInput in = sbatch("auto");
        in.env["TULA_PLUGSTACK_CONF"] = "/etc/site/tula.conf";
        in.env["TULA_PLUGSTACK_DB"] = "/var/lib/tula/site.db";
        in.env["TULA_PLUGSTACK_MARGIN"] = "0.5";
        decide_submission(in, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string("/etc/site/tula.conf"), f.call.common.conf);
        CPPUNIT_ASSERT_EQUAL(std::string("/var/lib/tula/site.db"), f.call.common.system_db);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, f.call.common.time_margin, 0);
        in.env["TULA_PLUGSTACK_MARGIN"] = "1; touch INJECTED";  // malformed: ignored
        in.env["TULA_PLUGSTACK_DB"] = "relative.db";           // not absolute: ignored
        decide_submission(in, f.planner());
        CPPUNIT_ASSERT(f.call.common.time_margin < 0 && f.call.common.system_db.empty());
        in.env.erase("TULA_PLUGSTACK_CONF");  // the site's default tula.conf, never the user's $TULA_CONF
        decide_submission(in, f.planner());
        CPPUNIT_ASSERT_EQUAL(std::string(default_conf_path()), f.call.common.conf);
        const SiteSettings none = site_settings({});
        CPPUNIT_ASSERT(none.conf.empty() && none.db.empty() && none.margin < 0 && !none.loaded && !none.strict);
    }

    // One grammar: the filter accepts a deadline exactly when tula_parse_duration (names.c,
    // which tula plan's --policy and the plugin use) does.
    void test_one_duration_grammar() {
        for (const char* v : {"02:00:00", "90:00", "1-00:00:00", "1-12:00", "0-00:00", "1:2:3", "3651-00:00:00", "00:00:00",
                              "12345678:00", "1:60:00", "99999:59:59", "2h", "01:00:00:00"}) {
            Fake f;
            SubmitInput in = sbatch("auto");
            in.spank["tula-deadline"] = v;
            const bool accepted = decide_submission(in, f.planner()).kind == SubmitOutcome::Kind::Changed;
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, tula_parse_duration(v, nullptr, 0) > 0, accepted);
        }
    }

    void test_time_minutes() {
        CPPUNIT_ASSERT_EQUAL(3L, *time_minutes("00:03:00"));
        CPPUNIT_ASSERT_EQUAL(2L, *time_minutes("1:30"));  // M:S, seconds rounded up
        CPPUNIT_ASSERT_EQUAL(90L, *time_minutes("90"));
        CPPUNIT_ASSERT_EQUAL(1440L + 120, *time_minutes("1-2"));
        CPPUNIT_ASSERT_EQUAL(1440L + 125, *time_minutes("1-2:05"));
        for (const char* none : {"UNLIMITED", "INFINITE", "0", "", "2982616-16:14:00", "1:2:3:4", "x", "-5"})
            CPPUNIT_ASSERT_MESSAGE(none, !time_minutes(none));
        CPPUNIT_ASSERT(node_request("3") == std::make_pair(3, 3));
        CPPUNIT_ASSERT(node_request("2-8") == std::make_pair(2, 8));
        CPPUNIT_ASSERT(!node_request("1-0") && !node_request("") && !node_request("5-2") && !node_request("a"));
    }

    // The plugstack's db= and margin= reach the plan as options of the configuration
    // (CommonOptions::system_db, time_margin), not as a rewritten tula.conf: a file with
    // [partition] sections keeps them, and its own system_db and time_margin are replaced.
    void test_site_overrides_of_tula_conf() {
        tula_test::TempDir d;
        const std::string conf = d / "tula.conf";
        FILE* f = std::fopen(conf.c_str(), "w");
        std::fputs("system_db = /old.db\ntime_margin = 0.25\nmax_nodes = 4\n[partition cpu]\nnodes = 4\n"
                   "[partition fast]\nnodes = 2\n", f);
        std::fclose(f);
        CommonOptions o;
        o.conf = conf;
        o.system_db = "/site.db";
        o.time_margin = 0.5;
        const LoadedConfig lc = load_cli_config(o);
        CPPUNIT_ASSERT_EQUAL(std::string("/site.db"), lc.config.system_db);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, lc.config.time_margin, 0);
        CPPUNIT_ASSERT_EQUAL(size_t(2), lc.config.partitions.size());
        CPPUNIT_ASSERT_EQUAL(2, lc.config.partitions[1].nodes);
        o.system_db.clear();
        o.time_margin = -1;
        CPPUNIT_ASSERT_EQUAL(std::string("/old.db"), load_cli_config(o).config.system_db);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CliSubmitTest);
