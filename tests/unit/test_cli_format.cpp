// Unit tests of the tula CLI's pure helpers (cli/format.hpp): one-line sanitizing, names and
// job ids, shell quoting (checked against a real /bin/sh), durations (converted back), the
// error percentage, text tables (column alignment read back), and the `tula plan --format kv`
// contract (values read back and compared with the plan they came from).
#include <cppunit/extensions/HelperMacros.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "cli/format.hpp"
#include "record_builders.hpp"

namespace {

using namespace tula::cli;

// Runs `/bin/sh -c "printf %s <quoted>"` and returns what the shell printed: the shell is the
// independent reference for shell_quote.
std::string through_shell(const std::string& quoted) {
    const std::string cmd = "printf %s " + quoted;
    int fds[2];
    if (pipe(fds) != 0) return "<pipe failed>";
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        _exit(127);
    }
    close(fds[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return out;
}

// key=value lines into a map (first occurrence wins), as cli_filter.lua reads them.
std::map<std::string, std::string> parse_kv(const std::string& text) {
    std::map<std::string, std::string> m;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        const size_t eq = line.find('=');
        if (eq == std::string::npos) continue;
        m.emplace(line.substr(0, eq), line.substr(eq + 1));
    }
    return m;
}

// A plan with `n` candidates built from simple arithmetic (not from libtula's planner).
tula::Plan synthetic_plan(size_t chosen) {
    tula::Plan p;
    for (int k = 1; k <= 2; ++k)
        for (int b : {64, 256}) {
            tula::Candidate c;
            c.nodes = k;
            c.global_batch = b;
            c.local_batch = b / k;
            c.iter_seconds = 0.001 * (1 + c.local_batch / 10.0);
            c.epoch_seconds = std::ceil(60000.0 / b) * c.iter_seconds;
            c.epochs_to_target = 7 * (1 + b / 1024.0) / (1 + 64 / 1024.0);
            c.epochs = static_cast<int>(std::ceil(c.epochs_to_target));  // 7 at 64, 9 at 256
            c.total_seconds = c.epochs * c.epoch_seconds;
            c.node_hours = k * c.total_seconds / 3600;
            c.cost = 2.5 * c.node_hours;
            c.pareto = (b == 256);
            c.total_seconds_upper = 1.1 * c.total_seconds;
            c.cost_upper = 2.5 * k * c.total_seconds_upper / 3600;
            c.memory_bytes = 5e6 + 1e6 * c.local_batch;
            c.expected_accuracy = k == 1 ? 0.9 - 0.01 * std::log2(b) : std::nan("");
            p.candidates.push_back(c);
        }
    p.chosen = chosen;
    p.reason = "line one\nline two\twith a tab";
    p.time_limit_minutes = 4;
    p.max_local_batch = 300;
    p.gamma = 1.5;
    p.allreduce_bucket_bytes = 26214400;
    p.last_batch = tula::LastBatch::Keep;
    p.convergence.noise_scale = 432.5;
    p.convergence.measured_runs = 3;
    p.reference_batch = 64;
    return p;
}

// A plan report of `workload` over `epochs` epochs under `policy` with the plan `plan`;
// everything else at PlanReport's defaults.
PlanReport report(const std::string& workload, int epochs, tula::Policy policy, tula::Plan plan) {
    PlanReport r;
    r.workload = workload;
    r.epochs = epochs;
    r.policy = policy;
    r.plan = std::move(plan);
    return r;
}

}  // namespace

class CliFormatTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CliFormatTest);
    CPPUNIT_TEST(test_one_line);
    CPPUNIT_TEST(test_bare_message);
    CPPUNIT_TEST(test_workload_names);
    CPPUNIT_TEST(test_job_ids);
    CPPUNIT_TEST(test_shell_quote_against_sh);
    CPPUNIT_TEST(test_duration_converts_back);
    CPPUNIT_TEST(test_error_percent);
    CPPUNIT_TEST(test_table_alignment);
    CPPUNIT_TEST(test_plan_kv_contract);
    CPPUNIT_TEST(test_error_kv);
    CPPUNIT_TEST(test_plan_json);
    CPPUNIT_TEST(test_explain_kv);
    CPPUNIT_TEST(test_measuring_jobs);
    CPPUNIT_TEST(test_policy_phrase);
    CPPUNIT_TEST(test_plan_kv_json_carry_every_field);
    CPPUNIT_TEST(test_plan_kv_json_partition);
    CPPUNIT_TEST(test_compute_fit_lines);
    CPPUNIT_TEST(test_round_spread);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_one_line() {
        CPPUNIT_ASSERT_EQUAL(std::string("a b  c"), one_line("  a\nb\t\rc \n"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), one_line("\n\n\t"));
        CPPUNIT_ASSERT_EQUAL(std::string("x y"), one_line("x\033y"));
        // Cut at a byte budget, never inside a UTF-8 sequence.
        const std::string s = "ab\xC3\xA9" "cd";  // "abécd": é is 2 bytes at offsets 2..3
        CPPUNIT_ASSERT_EQUAL(std::string("ab..."), one_line(s, 3));
        CPPUNIT_ASSERT_EQUAL(std::string("ab\xC3\xA9..."), one_line(s, 4));
        CPPUNIT_ASSERT_EQUAL(s, one_line(s, 6));
        std::mt19937 rng(7);
        for (int i = 0; i < 200; ++i) {
            std::string r;
            const int n = static_cast<int>(rng() % 40);
            for (int j = 0; j < n; ++j) r += static_cast<char>(rng() % 256);
            const std::string o = one_line(r, 16);
            for (unsigned char c : o) CPPUNIT_ASSERT(c >= 0x20 && c != 0x7f);
            CPPUNIT_ASSERT(o.size() <= 16 + 3);
        }
    }

    void test_bare_message() {
        CPPUNIT_ASSERT_EQUAL(std::string("x"), bare_message("tula: x"));
        CPPUNIT_ASSERT_EQUAL(std::string("x"), bare_message("tula: tula: x"));
        CPPUNIT_ASSERT_EQUAL(std::string("tula-train: x"), bare_message("tula-train: x"));
    }

    void test_workload_names() {
        CPPUNIT_ASSERT(valid_workload_name("lenet5@fashion-mnist"));
        CPPUNIT_ASSERT(valid_workload_name("a_b.c@D-1"));
        for (const char* bad : {"", "lenet5", "@x", "x@", "a b@c", "a@b@c", "a'@b", "a@b;rm", "a/b@c"})
            CPPUNIT_ASSERT_MESSAGE(bad, !valid_workload_name(bad));
        CPPUNIT_ASSERT(!valid_workload_name(std::string(100, 'a') + "@" + std::string(30, 'b')));
        std::string m, d;
        CPPUNIT_ASSERT(split_workload("fmnist-cnn@fashion-mnist", &m, &d));
        CPPUNIT_ASSERT_EQUAL(std::string("fmnist-cnn"), m);
        CPPUNIT_ASSERT_EQUAL(std::string("fashion-mnist"), d);
        CPPUNIT_ASSERT(!split_workload("nope", &m, &d));
    }

    void test_job_ids() {
        for (const char* ok : {"1", "42", "123_4", "77+0"}) CPPUNIT_ASSERT_MESSAGE(ok, valid_job_id(ok));
        for (const char* bad : {"", "4 2", "1;2", "$(x)", "a/b"}) CPPUNIT_ASSERT_MESSAGE(bad, !valid_job_id(bad));
        CPPUNIT_ASSERT(!valid_job_id(std::string(65, '1')));
    }

    void test_shell_quote_against_sh() {
        const std::vector<std::string> cases = {"plain", "with space", "it's", "''", "$HOME", "`id`", "a\"b",
                                                "back\\slash", "new\nline", "*?[x]", "-n", ""};
        for (const auto& s : cases) CPPUNIT_ASSERT_EQUAL(s, through_shell(shell_quote(s)));
        std::mt19937 rng(11);
        for (int i = 0; i < 30; ++i) {
            std::string r;
            const int n = 1 + static_cast<int>(rng() % 20);
            for (int j = 0; j < n; ++j) r += static_cast<char>(1 + rng() % 126);  // no NUL
            CPPUNIT_ASSERT_EQUAL(r, through_shell(shell_quote(r)));
        }
    }

    void test_duration_converts_back() {
        const std::map<std::string, double> unit = {{"ms", 1e-3}, {"s", 1}, {"min", 60}, {"h", 3600}, {"d", 86400}};
        for (double s : {0.0123, 0.5, 3.3, 42.0, 99.4, 110.0, 500.0, 5000.0, 50000.0, 500000.0}) {
            const std::string f = format_duration(s);
            std::istringstream in(f);
            double v = 0;
            std::string u;
            in >> v >> u;
            CPPUNIT_ASSERT_MESSAGE(f, unit.count(u) == 1);
            const double back = v * unit.at(u);
            CPPUNIT_ASSERT_MESSAGE(f, std::fabs(back - s) <= 0.05 * s + 0.0005);
        }
        CPPUNIT_ASSERT_EQUAL(std::string("n/a"), format_duration(-1));
        CPPUNIT_ASSERT_EQUAL(std::string("n/a"), format_duration(NAN));
    }

    void test_error_percent() {
        // measured m, predicted p: the prediction p = m (1 - e/100) for a chosen e.
        for (double e : {-30.0, -5.0, 0.0, 2.5, 12.0}) {
            const double m = 80.0;
            const double p = m * (1 - e / 100);
            const auto got = error_percent(m, p);
            CPPUNIT_ASSERT(got.has_value());
            CPPUNIT_ASSERT_DOUBLES_EQUAL(e, *got, 1e-9);
        }
        CPPUNIT_ASSERT(!error_percent(80, 0).has_value());
        CPPUNIT_ASSERT(!error_percent(0, 10).has_value());
        CPPUNIT_ASSERT(!error_percent(NAN, 10).has_value());
    }

    void test_table_alignment() {
        std::mt19937 rng(3);
        Table t;
        t.header = {"name", "n", "value"};
        t.right = {false, true, true};
        for (int i = 0; i < 12; ++i)
            t.rows.push_back({std::string(1 + rng() % 9, 'a'), std::to_string(rng() % 100000),
                              std::string(1 + rng() % 6, '7')});
        const std::vector<std::string> lines = render_table_lines(t, "  ");
        CPPUNIT_ASSERT_EQUAL(t.rows.size() + 1, lines.size());
        // Widths from the data, independently of the renderer.
        size_t w0 = 4, w1 = 1, w2 = 5;
        for (const auto& r : t.rows) {
            w0 = std::max(w0, r[0].size());
            w1 = std::max(w1, r[1].size());
            w2 = std::max(w2, r[2].size());
        }
        const size_t end1 = 2 + w0 + 2 + w1, end2 = end1 + 2 + w2;
        for (size_t i = 1; i < lines.size(); ++i) {
            const std::string& l = lines[i];
            const auto& r = t.rows[i - 1];
            CPPUNIT_ASSERT_EQUAL(r[0], l.substr(2, r[0].size()));          // left-aligned at the indent
            CPPUNIT_ASSERT_EQUAL(r[1], l.substr(end1 - r[1].size(), r[1].size()));  // right-aligned
            CPPUNIT_ASSERT_EQUAL(end2, l.size());                           // last column ends the line
            CPPUNIT_ASSERT_EQUAL(r[2], l.substr(end2 - r[2].size()));
        }
        // A short row prints empty cells; no trailing blanks.
        Table s{{"a", "b"}, {false, false}, {{"x"}}};
        CPPUNIT_ASSERT_EQUAL(std::string("a  b\nx\n"), render_table(s, ""));
    }

    void test_plan_kv_contract() {
        PlanReport r = report("lenet5@fashion-mnist", 7, tula::Policy::Auto, synthetic_plan(3));
        r.price_per_node_hour = 2.5;
        r.warnings = {"tula: profile database /x: locked\nretry"};
        const std::string text = render_kv(plan_kv(r));
        // Every line is key=value with a key of [a-z_].
        std::istringstream in(text);
        std::string line;
        std::vector<std::string> keys;
        while (std::getline(in, line)) {
            const size_t eq = line.find('=');
            CPPUNIT_ASSERT_MESSAGE(line, eq != std::string::npos && eq > 0);
            for (size_t i = 0; i < eq; ++i) CPPUNIT_ASSERT(line[i] == '_' || (line[i] >= 'a' && line[i] <= 'z'));
            keys.push_back(line.substr(0, eq));
        }
        const std::vector<std::string> contract = {"status",    "workload",   "nodes",      "global_batch",
                                                   "local_batch", "epochs",   "predicted_seconds"};
        for (size_t i = 0; i < contract.size(); ++i) CPPUNIT_ASSERT_EQUAL(contract[i], keys.at(i));
        const auto kv = parse_kv(text);
        const tula::Candidate& c = r.plan.candidates[3];
        CPPUNIT_ASSERT_EQUAL(std::string("ok"), kv.at("status"));
        CPPUNIT_ASSERT_EQUAL(c.nodes, std::stoi(kv.at("nodes")));
        CPPUNIT_ASSERT_EQUAL(c.global_batch, std::stoi(kv.at("global_batch")));
        CPPUNIT_ASSERT_EQUAL(c.local_batch, std::stoi(kv.at("local_batch")));
        CPPUNIT_ASSERT_EQUAL(9, c.epochs);  // the chosen candidate (batch 256) trains 9 epochs
        CPPUNIT_ASSERT_EQUAL(9, std::stoi(kv.at("epochs")));
        CPPUNIT_ASSERT_EQUAL(7, std::stoi(kv.at("requested_epochs")));
        CPPUNIT_ASSERT_EQUAL(64, std::stoi(kv.at("reference_batch")));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c.total_seconds, std::stod(kv.at("predicted_seconds")), 0.05 + 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c.cost, std::stod(kv.at("cost")), 0.00005 + 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c.node_hours, std::stod(kv.at("node_hours")), 0.00005 + 1e-12);
        CPPUNIT_ASSERT_EQUAL(4, std::stoi(kv.at("time_limit")));
        CPPUNIT_ASSERT_EQUAL(4, std::stoi(kv.at("candidates")));
        CPPUNIT_ASSERT_EQUAL(std::string("auto"), kv.at("policy"));
        CPPUNIT_ASSERT_EQUAL(std::string("line one line two with a tab"), kv.at("reason"));
        CPPUNIT_ASSERT_EQUAL(std::string("profile database /x: locked retry"), kv.at("warning"));
        const std::string& sum = kv.at("summary");
        CPPUNIT_ASSERT(sum.rfind("lenet5@fashion-mnist: 2 nodes x global batch 256, predicted ", 0) == 0);
        CPPUNIT_ASSERT(sum.find("(knee of the time/cost Pareto front)") != std::string::npos);
        CPPUNIT_ASSERT(sum.find("cost ") != std::string::npos);  // price != 1: the cost is named
    }

    void test_error_kv() {
        const auto kv = parse_kv(render_kv(error_kv("tula: no profile\nfor x", {"w1"})));
        CPPUNIT_ASSERT_EQUAL(std::string("error"), kv.at("status"));
        CPPUNIT_ASSERT_EQUAL(std::string("no profile for x"), kv.at("message"));
        CPPUNIT_ASSERT_EQUAL(std::string("w1"), kv.at("warning"));
    }

    void test_plan_json() {
        PlanReport r = report("w@d", 3, tula::Policy::Cost, synthetic_plan(1));
        const Json j = Json::parse(plan_json(r).dump());
        CPPUNIT_ASSERT_EQUAL(std::string("ok"), j.at("status").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(std::string("cost"), j.at("policy").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(size_t{4}, j.at("candidates").size());
        for (size_t i = 0; i < 4; ++i) {
            const auto& c = j.at("candidates")[i];
            CPPUNIT_ASSERT_EQUAL(i == 1, c.at("chosen").get<bool>());
            CPPUNIT_ASSERT_EQUAL(r.plan.candidates[i].global_batch, c.at("global_batch").get<int>());
            CPPUNIT_ASSERT_DOUBLES_EQUAL(r.plan.candidates[i].total_seconds, c.at("total_seconds").get<double>(), 1e-12);
        }
        CPPUNIT_ASSERT_EQUAL(size_t{1}, j.at("chosen").get<size_t>());
        CPPUNIT_ASSERT_EQUAL(432.5, j.at("noise_scale").get<double>());
        CPPUNIT_ASSERT_EQUAL(std::string("measured"), j.at("noise_scale_source").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(3, j.at("noise_scale_runs").get<int>());
        CPPUNIT_ASSERT_EQUAL(64, j.at("reference_batch").get<int>());
        CPPUNIT_ASSERT_EQUAL(26214400.0, j.at("allreduce_bucket_bytes").get<double>());
        CPPUNIT_ASSERT_EQUAL(std::string("keep"), j.at("last_batch").get<std::string>());
        CPPUNIT_ASSERT_EQUAL(r.plan.candidates[1].nodes, j.at("choice").at("nodes").get<int>());
    }

    // The deadline and budget policies are named with their argument; the deadline is read
    // back as seconds, the budget as node-hours (budget / price).
    void test_policy_phrase() {
        CPPUNIT_ASSERT_EQUAL(std::string("cheapest meeting deadline 01:30:00"),
                             policy_phrase(tula::Policy::Deadline, 5400, 0, 1.0));
        CPPUNIT_ASSERT_EQUAL(std::string("cheapest meeting deadline 1-02:00:05"),
                             policy_phrase(tula::Policy::Deadline, 86400 + 7205, 0, 1.0));
        CPPUNIT_ASSERT_EQUAL(std::string("fastest within budget 3.5 node-hours"),
                             policy_phrase(tula::Policy::Budget, 0, 3.5, 1.0));
        const std::string b = policy_phrase(tula::Policy::Budget, 0, 5, 2.5);
        CPPUNIT_ASSERT_MESSAGE(b, b.find("(= 2 node-hours at 2.5 per node-hour)") != std::string::npos);
        for (auto p : {tula::Policy::Auto, tula::Policy::Time, tula::Policy::Cost, tula::Policy::Deadline, tula::Policy::Budget})
            CPPUNIT_ASSERT(policy_phrase(p, 60, 1, 1).find('?') == std::string::npos);
        // format_hms read back: h*3600 + m*60 + s (+ d*86400).
        std::mt19937 rng(3);
        for (int i = 0; i < 200; ++i) {
            const double sec = static_cast<double>(rng() % 400000);
            const std::string t = format_hms(sec);
            long d = 0, h = 0, m = 0, s2 = 0;
            if (t.find('-') != std::string::npos) CPPUNIT_ASSERT(std::sscanf(t.c_str(), "%ld-%ld:%ld:%ld", &d, &h, &m, &s2) == 4);
            else CPPUNIT_ASSERT(std::sscanf(t.c_str(), "%ld:%ld:%ld", &h, &m, &s2) == 3);
            CPPUNIT_ASSERT(h < 24 && m < 60 && s2 < 60);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(sec, d * 86400.0 + h * 3600.0 + m * 60.0 + s2, 0.0);
        }
        CPPUNIT_ASSERT_EQUAL(std::string("n/a"), format_hms(-1));
        // The summary names the deadline.
        PlanReport r = report("w@d", 3, tula::Policy::Deadline, synthetic_plan(0));
        r.deadline_seconds = 5400;
        CPPUNIT_ASSERT(plan_summary(r).find("(cheapest meeting deadline 01:30:00)") != std::string::npos);
        CPPUNIT_ASSERT(plan_summary(r).rfind("simulated", 0) == std::string::npos);
        r.simulated = true;
        CPPUNIT_ASSERT(plan_summary(r).rfind("simulated: ", 0) == 0);
    }

    // Every candidate field of the table (bounds, memory, accuracy, Pareto flag) and the
    // policy reach --format kv (the choice) and json (every candidate), read back.
    // The chosen candidate's shape (partition, ranks and GPUs per node, the class it was scaled
    // from) in kv after the existing keys, every candidate's in JSON, and each left-out
    // partition as one left_out= line; without sections the partition is empty.
    void test_plan_kv_json_partition() {
        PlanReport r = report("w@d", 7, tula::Policy::Auto, synthetic_plan(3));
        const auto plain = parse_kv(render_kv(plan_kv(r)));
        CPPUNIT_ASSERT_EQUAL(std::string(""), plain.at("partition"));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), plain.at("ranks_per_node"));
        for (size_t i = 0; i < r.plan.candidates.size(); ++i) {
            tula::Candidate& c = r.plan.candidates[i];
            c.partition = i % 2 ? "gpu" : "cpu";
            c.ranks_per_node = i % 2 ? 4 : 2;
            c.gpus_per_node = i % 2 ? 4 : 0;
            c.scaled_from = i % 2 ? "a100" : "";
        }
        r.plan.left_out = {"odd: no profile of class x", "tiny: nothing fits"};
        const std::string text = render_kv(plan_kv(r));
        const auto kv = parse_kv(text);
        CPPUNIT_ASSERT_EQUAL(std::string("gpu"), kv.at("partition"));  // candidate 3
        CPPUNIT_ASSERT_EQUAL(std::string("4"), kv.at("ranks_per_node"));
        CPPUNIT_ASSERT_EQUAL(std::string("4"), kv.at("gpus_per_node"));
        CPPUNIT_ASSERT_EQUAL(std::string("a100"), kv.at("scaled_from"));
        CPPUNIT_ASSERT(text.find("\nleft_out=odd: no profile of class x\nleft_out=tiny: nothing fits\n") != std::string::npos);
        CPPUNIT_ASSERT(text.find("flagged_runs=") < text.find("partition="));  // appended after the existing keys
        const Json j = Json::parse(plan_json(r).dump());
        CPPUNIT_ASSERT_EQUAL(size_t(2), j.at("left_out").size());
        for (size_t i = 0; i < r.plan.candidates.size(); ++i) {
            const tula::Candidate& c = r.plan.candidates[i];
            const Json& x = j.at("candidates")[i];
            CPPUNIT_ASSERT_EQUAL(c.partition, x.at("partition").get<std::string>());
            CPPUNIT_ASSERT_EQUAL(c.ranks_per_node, x.at("ranks_per_node").get<int>());
            CPPUNIT_ASSERT_EQUAL(c.gpus_per_node, x.at("gpus_per_node").get<int>());
            CPPUNIT_ASSERT_EQUAL(c.scaled_from, x.at("scaled_from").get<std::string>());
        }
    }

    void test_plan_kv_json_carry_every_field() {
        for (size_t chosen : {size_t{1}, size_t{3}}) {
            PlanReport r = report("w@d", 7, tula::Policy::Budget, synthetic_plan(chosen));
            r.budget = 4.25;
            r.price_per_node_hour = 2.5;
            r.simulated = true;
            r.hardware = "h.json (cluster x)";
            const tula::Candidate& c = r.plan.candidates[chosen];
            const auto kv = parse_kv(render_kv(plan_kv(r)));
            CPPUNIT_ASSERT_EQUAL(std::string("budget"), kv.at("policy"));
            CPPUNIT_ASSERT_DOUBLES_EQUAL(4.25, std::stod(kv.at("budget")), 1e-12);
            CPPUNIT_ASSERT(kv.at("policy_phrase").rfind("fastest within budget 4.25", 0) == 0);
            CPPUNIT_ASSERT(kv.count("deadline_seconds") == 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.total_seconds_upper, std::stod(kv.at("predicted_seconds_upper")), 0.05 + 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.cost_upper, std::stod(kv.at("cost_upper")), 0.00005 + 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.iter_seconds, std::stod(kv.at("iter_seconds")), c.iter_seconds * 1e-5);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.memory_bytes, std::stod(kv.at("memory_bytes")), 0.5);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.epochs_to_target, std::stod(kv.at("epochs_to_target")), 0.0005 + 1e-12);
            if (std::isfinite(c.expected_accuracy))
                CPPUNIT_ASSERT_DOUBLES_EQUAL(c.expected_accuracy, std::stod(kv.at("expected_accuracy")), 0.00005 + 1e-12);
            else
                CPPUNIT_ASSERT_EQUAL(std::string(""), kv.at("expected_accuracy"));
            CPPUNIT_ASSERT_EQUAL(std::string(c.pareto ? "1" : "0"), kv.at("pareto"));
            CPPUNIT_ASSERT_EQUAL(300, std::stoi(kv.at("max_local_batch")));
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, std::stod(kv.at("gamma")), 1e-12);
            CPPUNIT_ASSERT_EQUAL(std::string("26214400"), kv.at("allreduce_bucket_bytes"));
            CPPUNIT_ASSERT_EQUAL(std::string("keep"), kv.at("last_batch"));
            CPPUNIT_ASSERT_EQUAL(std::string("1"), kv.at("simulated"));
            CPPUNIT_ASSERT_EQUAL(r.hardware, kv.at("hardware"));
            CPPUNIT_ASSERT_EQUAL(std::string(""), kv.at("flagged_runs"));

            const Json j = Json::parse(plan_json(r).dump());
            CPPUNIT_ASSERT_EQUAL(std::string("budget"), j.at("policy").get<std::string>());
            CPPUNIT_ASSERT_DOUBLES_EQUAL(4.25, j.at("budget").get<double>(), 0.0);
            CPPUNIT_ASSERT_EQUAL(kv.at("policy_phrase"), j.at("policy_phrase").get<std::string>());
            CPPUNIT_ASSERT(j.at("simulated").get<bool>());
            CPPUNIT_ASSERT_EQUAL(300, j.at("max_local_batch").get<int>());
            for (size_t i = 0; i < r.plan.candidates.size(); ++i) {
                const tula::Candidate& e = r.plan.candidates[i];
                const Json& x = j.at("candidates")[i];
                CPPUNIT_ASSERT_DOUBLES_EQUAL(e.total_seconds_upper, x.at("total_seconds_upper").get<double>(), 0.0);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(e.cost_upper, x.at("cost_upper").get<double>(), 0.0);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(e.memory_bytes, x.at("memory_bytes").get<double>(), 0.0);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(e.epochs_to_target, x.at("epochs_to_target").get<double>(), 0.0);
                CPPUNIT_ASSERT_EQUAL(e.epochs, x.at("epochs").get<int>());
                CPPUNIT_ASSERT_EQUAL(e.pareto, x.at("pareto").get<bool>());
                if (std::isfinite(e.expected_accuracy))
                    CPPUNIT_ASSERT_DOUBLES_EQUAL(e.expected_accuracy, x.at("expected_accuracy").get<double>(), 0.0);
                else
                    CPPUNIT_ASSERT(x.at("expected_accuracy").is_null());
            }
        }
        PlanReport d;
        d.workload = "w@d";
        d.policy = tula::Policy::Deadline;
        d.deadline_seconds = 3600;
        d.plan = synthetic_plan(0);
        const auto kv = parse_kv(render_kv(plan_kv(d)));
        CPPUNIT_ASSERT_EQUAL(3600, std::stoi(kv.at("deadline_seconds")));
        CPPUNIT_ASSERT_EQUAL(std::string("0"), kv.at("simulated"));
        CPPUNIT_ASSERT(kv.count("hardware") == 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3600.0, plan_json(d).at("deadline_seconds").get<double>(), 0.0);
        // Flagged runs: job ids in kv, every field in json.
        tula::RunCheck f{"42", 2, 256, 5, 0.0, 61.0, 44.2, 40.1, 48.3, true, true};  // validate.hpp's field order
        d.plan.flagged_runs = {f, f};
        d.plan.flagged_runs[1].job_id = "";
        CPPUNIT_ASSERT_EQUAL(std::string("42,-"), parse_kv(render_kv(plan_kv(d))).at("flagged_runs"));
        const Json fj = plan_json(d).at("flagged_runs");
        CPPUNIT_ASSERT_EQUAL(size_t{2}, fj.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(40.1, fj[0].at("lower_seconds").get<double>(), 0.0);
        CPPUNIT_ASSERT(fj[0].at("flagged").get<bool>());
        const std::string line = run_check_line(f);
        CPPUNIT_ASSERT_MESSAGE(line, line.find("job 42 (2 nodes x 256, 5 epochs): measured 61.0 s, outside the 95 % "
                                               "prediction interval 40.1..48.3 s") == 0);
        f.flagged = false;
        CPPUNIT_ASSERT(run_check_line(f).find(", inside the 95 %") != std::string::npos);
        // explain kv: flagged and the interval, or an empty flagged= when not checked.
        tula::RunRecord run = tula_test::run_record("42", "", 2, 256, 5, 61, 0);
        CPPUNIT_ASSERT_EQUAL(std::string(""), parse_kv(render_kv(explain_kv(run, "/db"))).at("flagged"));
        f.flagged = true;
        const auto ek = parse_kv(render_kv(explain_kv(run, "/db", f)));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), ek.at("flagged"));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(40.1, std::stod(ek.at("interval_lower")), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(48.3, std::stod(ek.at("interval_upper")), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(44.2, std::stod(ek.at("refit_predicted_seconds")), 1e-9);
    }

    // The rounds' spread against a naive computation: per batch (max - min) / median, then the
    // median over batches; one-sample batches, other ranks and bad times left out; none: NaN.
    void test_round_spread() {
        std::vector<tula::ComputeSample> s;
        auto add = [&](int b, double secs, int ranks = 1) {
            tula::ComputeSample x;
            x.local_batch = b;
            x.seconds_per_iter = secs;
            x.ranks = ranks;
            s.push_back(x);
        };
        CPPUNIT_ASSERT(std::isnan(round_spread_percent(s)));
        add(16, 1.0);
        CPPUNIT_ASSERT(std::isnan(round_spread_percent(s)));  // one sample: no spread
        add(16, 1.2);
        add(16, 1.1);               // batch 16: (1.2 - 1.0) / 1.1 = 18.18 %
        add(32, 2.0);
        add(32, 3.0);               // batch 32: (3 - 2) / 2.5 = 40 %
        add(64, 4.0);
        add(64, 4.4);
        add(64, 4.2);
        add(64, 4.0);               // batch 64: 0.4 / 4.1 = 9.756 %
        add(128, 8.0);              // one sample: left out
        add(64, 100.0, 2);          // several ranks at once: left out
        add(64, std::nan(""));      // not a time: left out
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100.0 * 0.2 / 1.1, round_spread_percent(s), 1e-9);  // median of 3
        add(256, 10.0);
        add(256, 10.0);             // batch 256: 0 %; median of 4 = (9.756 + 18.18) / 2
        CPPUNIT_ASSERT_DOUBLES_EQUAL((100.0 * 0.4 / 4.1 + 100.0 * 0.2 / 1.1) / 2, round_spread_percent(s), 1e-9);
    }

    // The fit summary names the chosen form and its residuals: read back, each residual is the
    // measured mean minus the model at that batch, computed here from the samples.
    void test_compute_fit_lines() {
        tula::ComputeModel m = tula_test::linear_compute(0.002, 0.0001, 8, 128);
        m.t_min = 0.005;
        m.flat = true;
        m.aic_linear = -10;
        m.aic_flat = -20;
        std::vector<tula::ComputeSample> s;
        for (int b : {8, 16, 64, 128})
            for (int rep = 0; rep < 2; ++rep) {
                tula::ComputeSample x;
                x.local_batch = b;
                x.seconds_per_iter = std::max(0.005, 0.002 + 0.0001 * b) * (1.0 + (rep ? 0.02 : -0.01));
                s.push_back(x);
            }
        tula::ComputeSample bad;
        bad.local_batch = 32;
        bad.seconds_per_iter = std::nan("");
        s.push_back(bad);
        const auto lines = compute_fit_lines(m, s);
        CPPUNIT_ASSERT(lines.at(0).rfind("fit: flat-then-linear (AIC -10.0 linear, -20.0 flat-then-linear)", 0) == 0);
        CPPUNIT_ASSERT(lines.at(0).find("max(5 ms, 2 ms + 0.1 ms x b)") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(size_t{1 + 1 + 4}, lines.size());  // NaN sample (batch 32) left out
        const int batches[] = {8, 16, 64, 128};
        for (int i = 0; i < 4; ++i) {
            std::istringstream in(lines[2 + i]);
            double b, n, meas, pred, res, pct;
            in >> b >> n >> meas >> pred >> res >> pct;
            CPPUNIT_ASSERT_EQUAL(double(batches[i]), b);
            CPPUNIT_ASSERT_EQUAL(2.0, n);
            const double truth = std::max(0.005, 0.002 + 0.0001 * batches[i]);
            const double mean = truth * (1.0 + (0.02 - 0.01) / 2);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(mean * 1e3, meas, mean * 1e3 * 1e-3);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(truth * 1e3, pred, truth * 1e3 * 1e-3);
            CPPUNIT_ASSERT_DOUBLES_EQUAL((mean - truth) * 1e3, res, std::fabs(mean - truth) * 1e3 * 1e-2);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, pct, 0.005);
        }
        m.flat = false;
        m.aic_flat = INFINITY;
        CPPUNIT_ASSERT(compute_fit_lines(m, s).at(0).rfind("fit: linear (AIC -10.0 linear, flat-then-linear not considered)", 0) == 0);
        // A fitted model with 3+ batch sizes says which form serves inside the profiled range.
        std::vector<tula::ComputeSample> convex;
        for (int b : {16, 32, 64, 128, 256}) {
            tula::ComputeSample x;
            x.local_batch = b;
            x.seconds_per_iter = 1e-3 + 1e-6 * b * b;
            convex.push_back(x);
        }
        const auto mi = tula::ComputeModel::fit(convex);
        const auto li = compute_fit_lines(mi, convex);
        CPPUNIT_ASSERT(mi.interpolated);
        CPPUNIT_ASSERT(li.at(1).rfind("inside local batch 16..256: interpolated between the 5 batch sizes' medians", 0) == 0);
        CPPUNIT_ASSERT_EQUAL(size_t{1 + 1 + 1 + 5}, li.size());
    }

    // The jobs that measured a profile: each once, first seen first, unknown ("") left out; the
    // phrase names at most max_shown of them.
    void test_measuring_jobs() {
        std::vector<tula::ComputeSample> s(5);
        const char* ids[] = {"12", "", "13", "12", "7"};
        for (size_t i = 0; i < s.size(); ++i) s[i].job_id = ids[i];
        const std::vector<std::string> jobs = measuring_jobs(s);
        CPPUNIT_ASSERT((jobs == std::vector<std::string>{"12", "13", "7"}));
        CPPUNIT_ASSERT(measuring_jobs({}).empty());
        CPPUNIT_ASSERT_EQUAL(std::string(""), jobs_phrase({}));
        CPPUNIT_ASSERT_EQUAL(std::string("job 12"), jobs_phrase({"12"}));
        CPPUNIT_ASSERT_EQUAL(std::string("jobs 12 and 13"), jobs_phrase({"12", "13"}));
        CPPUNIT_ASSERT_EQUAL(std::string("jobs 12, 13 and 7"), jobs_phrase(jobs));
        CPPUNIT_ASSERT_EQUAL(std::string("jobs 12, 13 and 1 more"), jobs_phrase(jobs, 2));
        tula::RunRecord run = tula_test::run_record("13", "w@d", 1, 64, 1, 5, 0);
        CPPUNIT_ASSERT_EQUAL(std::string("12,13,7"), parse_kv(render_kv(explain_kv(run, "/db", std::nullopt, jobs))).at("profile_jobs"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), parse_kv(render_kv(explain_kv(run, "/db"))).at("profile_jobs"));
    }

    void test_explain_kv() {
        tula::RunRecord run = tula_test::run_record("17", "w@d", 2, 128, 3, 50, 0);
        run.predicted_seconds = 45;
        run.test_accuracy = 0.8765;
        auto kv = parse_kv(render_kv(explain_kv(run, "/db")));
        CPPUNIT_ASSERT_EQUAL(std::string("64"), kv.at("local_batch"));
        CPPUNIT_ASSERT_DOUBLES_EQUAL((50.0 - 45.0) / 50.0 * 100, std::stod(kv.at("error_percent")), 0.05);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(run.test_accuracy, std::stod(kv.at("test_accuracy")), 5e-5);
        run.predicted_seconds = 0;
        kv = parse_kv(render_kv(explain_kv(run, "/db")));
        CPPUNIT_ASSERT_EQUAL(std::string(""), kv.at("error_percent"));
        // run_json: the noise scale, null when not measured
        CPPUNIT_ASSERT(run_json(run).at("noise_scale").is_null());
        run.noise_scale = 173.5;
        run.noise_observations = 94;
        CPPUNIT_ASSERT_EQUAL(173.5, run_json(run).at("noise_scale").get<double>());
        CPPUNIT_ASSERT_EQUAL(94, run_json(run).at("noise_observations").get<int>());
        // run_json: the parts, their seconds null with one part
        CPPUNIT_ASSERT_EQUAL(1, run_json(run).at("parts").get<int>());
        CPPUNIT_ASSERT(run_json(run).at("part_seconds").is_null());
        run.parts = 2;
        run.part_seconds = {20.0, 25.0};
        CPPUNIT_ASSERT_EQUAL(2, run_json(run).at("parts").get<int>());
        CPPUNIT_ASSERT(run_json(run).at("part_seconds") == Json::array({20.0, 25.0}));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CliFormatTest);
