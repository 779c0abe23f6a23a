// Unit tests of the SPANK plugin's pure helpers (plugin/tula_plugin.h): plugstack argument
// parsing, modes, workload names, node counts, the plan table (against a std::regex reference),
// the job environment built from a row, and one-line messages. References are independent: std::string searches for names,
// strtol for node counts, strtod to read values back.
#include <cppunit/extensions/HelperMacros.h>

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "tula_plugin.h"

namespace {

// Runs the parser on `args`; returns its status, fills cfg and err.
int parse(const std::vector<std::string>& args, tula_plugin_config& cfg, std::string& err) {
    std::vector<char*> av;
    std::vector<std::string> copy(args);
    for (auto& a : copy) av.push_back(&a[0]);
    av.push_back(nullptr);
    char buf[TULA_MSG_MAX];
    std::memset(buf, 'X', sizeof buf);
    const int rc = tula_plugin_config_parse(&cfg, static_cast<int>(args.size()), av.data(), buf, sizeof buf);
    err = buf;  // NUL-terminated within the buffer, else this would overrun (checked below)
    CPPUNIT_ASSERT(std::memchr(buf, '\0', sizeof buf) != nullptr);
    return rc;
}

bool defaults(const tula_plugin_config& c) { return c.conf[0] == '\0' && c.db[0] == '\0' && c.strict == 0; }

// Reference for workload names: MODEL@DATASET over [A-Za-z0-9_.-], shorter than TULA_NAME_MAX.
bool reference_workload_ok(const std::string& s) {
    static const std::string allowed =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
    const size_t at = s.find('@');
    if (s.size() >= TULA_NAME_MAX || at == std::string::npos) return false;
    const std::string model = s.substr(0, at), dataset = s.substr(at + 1);
    return !model.empty() && !dataset.empty() && model.find_first_not_of(allowed) == std::string::npos &&
           dataset.find_first_not_of(allowed) == std::string::npos;
}

// Reference for node counts: digits only, strtol, 1..1e6.
int reference_nodes(const std::string& s) {
    if (s.empty() || s.size() > 7) return -1;
    for (char c : s)
        if (c < '0' || c > '9') return -1;
    const long v = std::strtol(s.c_str(), nullptr, 10);
    return (v >= 1 && v <= 1000000) ? static_cast<int>(v) : -1;
}

tula_plan_row make_plan(int nodes, int batch, int epochs, long tenths, const char* wl, int ranks_per_node = 1) {
    tula_plan_row p;
    std::memset(&p, 0, sizeof p);
    p.nodes = nodes;
    p.ranks_per_node = ranks_per_node;
    p.global_batch = batch;
    p.epochs = epochs;
    p.predicted_tenths = tenths;
    std::snprintf(p.workload, sizeof p.workload, "%s", wl);
    return p;
}

// Reference for plan tables: std::regex for the shape, std::stoll for the fields. Returns -1
// (malformed), 0 (no row for `nodes`) or the row count, and the row for `nodes` in *out.
int reference_table(const std::string& t, int nodes, tula_plan_row* out) {
    static const std::regex shape(
        R"(([A-Za-z0-9_.-]+@[A-Za-z0-9_.-]+)((;[0-9]{1,7}:[0-9]{1,8}:[0-9]{1,7}:[0-9]{1,10}(\.[0-9])?(:[0-9]{1,4})?)+))");
    static const std::regex row(R"(;([0-9]+):([0-9]+):([0-9]+):([0-9]+)(\.([0-9]))?(:([0-9]+))?)");
    std::smatch m;
    if (t.size() >= TULA_PLAN_MAX || !std::regex_match(t, m, shape) || m[1].str().size() >= TULA_NAME_MAX) return -1;
    const std::string rows = m[2].str();
    std::vector<long long> seen;
    int found = 0;
    for (auto it = std::sregex_iterator(rows.begin(), rows.end(), row); it != std::sregex_iterator(); ++it) {
        const long long n = std::stoll((*it)[1]), b = std::stoll((*it)[2]), e = std::stoll((*it)[3]);
        const long long tenths = std::stoll((*it)[4]) * 10 + ((*it)[6].matched ? std::stoll((*it)[6]) : 0);
        const long long rpn = (*it)[8].matched ? std::stoll((*it)[8]) : 1;
        if (n < 1 || n > 1000000 || b < 1 || b > 16777216 || e < 1 || e > 1000000 || tenths > 10000000000LL) return -1;
        if (rpn < 1 || rpn > TULA_PLAN_RANKS_MAX) return -1;
        for (long long x : seen)
            if (x == n) return -1;
        seen.push_back(n);
        if (seen.size() > TULA_PLAN_ROWS_MAX) return -1;
        if (n == nodes && out) {
            *out = make_plan(int(n), int(b), int(e), long(tenths), m[1].str().c_str(), int(rpn));
            found = 1;
        }
    }
    if (nodes > 0 && !found) return 0;
    return int(seen.size());
}

}  // namespace

class PluginConfigTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(PluginConfigTest);
    CPPUNIT_TEST(test_no_arguments);
    CPPUNIT_TEST(test_valid_arguments);
    CPPUNIT_TEST(test_unknown_key_rejected);
    CPPUNIT_TEST(test_strict);
    CPPUNIT_TEST(test_empty_value_rejected);
    CPPUNIT_TEST(test_overlong_value_rejected);
    CPPUNIT_TEST(test_relative_and_control_rejected);
    CPPUNIT_TEST(test_repeated_key_rejected);
    CPPUNIT_TEST(test_bad_vectors);
    CPPUNIT_TEST(test_tiny_error_buffer);
    CPPUNIT_TEST(test_modes);
    CPPUNIT_TEST(test_workload_names);
    CPPUNIT_TEST(test_parse_nodes);
    CPPUNIT_TEST(test_plan_table);
    CPPUNIT_TEST(test_decision_record);
    CPPUNIT_TEST(test_rank_batch);
    CPPUNIT_TEST(test_plan_env);
    CPPUNIT_TEST(test_plan_env_rejects_bad_plans);
    CPPUNIT_TEST(test_one_line);
    CPPUNIT_TEST(test_margin);
    CPPUNIT_TEST(test_deadline);
    CPPUNIT_TEST(test_budget);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_no_arguments() {
        tula_plugin_config c;
        std::memset(&c, 0x5a, sizeof c);  // garbage must be reset
        std::string err;
        CPPUNIT_ASSERT_EQUAL(0, parse({}, c, err));
        CPPUNIT_ASSERT(defaults(c));
        CPPUNIT_ASSERT_EQUAL(std::string(), err);
    }

    void test_valid_arguments() {
        tula_plugin_config c;
        std::string err;
        CPPUNIT_ASSERT_EQUAL(0, parse({"conf=/etc/slurm/tula.conf", "db=/var/lib/tula/profiles.db"}, c, err));
        CPPUNIT_ASSERT_EQUAL(std::string("/etc/slurm/tula.conf"), std::string(c.conf));
        CPPUNIT_ASSERT_EQUAL(std::string("/var/lib/tula/profiles.db"), std::string(c.db));
        CPPUNIT_ASSERT_EQUAL(0, c.strict);
        // order does not matter; a value may contain '='
        CPPUNIT_ASSERT_EQUAL(0, parse({"db=/a=b/x.db", "conf=/c"}, c, err));
        CPPUNIT_ASSERT_EQUAL(std::string("/a=b/x.db"), std::string(c.db));
        CPPUNIT_ASSERT_EQUAL(std::string("/c"), std::string(c.conf));
    }

    void test_unknown_key_rejected() {
        tula_plugin_config c;
        std::string err;
        for (const char* bad : {"margins=0.1", "timeout=5", "Conf=/x", "confx=/x", "config=/etc/slurm/tula.conf", "verbose",
                                "=/x", "conf"}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, parse({"conf=/ok", bad}, c, err));
            CPPUNIT_ASSERT_MESSAGE(bad, defaults(c));  // nothing half-applied
            CPPUNIT_ASSERT_MESSAGE(err, err.rfind("tula: ", 0) == 0);
            // the message names what was wrong and lists what is valid
            CPPUNIT_ASSERT_MESSAGE(err, err.find(bad) != std::string::npos);
            CPPUNIT_ASSERT_MESSAGE(err, err.find("conf=PATH") != std::string::npos);
            CPPUNIT_ASSERT_MESSAGE(err, err.find("strict") != std::string::npos);
        }
    }

    void test_strict() {
        tula_plugin_config c;
        std::string err;
        CPPUNIT_ASSERT_EQUAL(0, parse({"strict"}, c, err));
        CPPUNIT_ASSERT_EQUAL(1, c.strict);
        CPPUNIT_ASSERT_EQUAL(0, parse({"conf=/x", "strict", "db=/y"}, c, err));
        CPPUNIT_ASSERT_EQUAL(1, c.strict);
        CPPUNIT_ASSERT_EQUAL(std::string("/y"), std::string(c.db));
        for (const char* bad : {"strict=1", "strict=", "strict=yes"}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, parse({bad}, c, err));
            CPPUNIT_ASSERT_MESSAGE(err, err.find("strict") != std::string::npos);
            CPPUNIT_ASSERT(defaults(c));
        }
        CPPUNIT_ASSERT_EQUAL(-1, parse({"strict", "strict"}, c, err));
        // A strict site fails closed: strict holds even when another argument is wrong,
        // and nothing else is applied.
        for (const std::vector<std::string>& args :
             {std::vector<std::string>{"conf=/a", "margin=300", "strict"}, {"strict", "db="}, {"bogus", "strict"}}) {
            CPPUNIT_ASSERT_EQUAL(-1, parse(args, c, err));
            CPPUNIT_ASSERT_EQUAL(1, c.strict);
            CPPUNIT_ASSERT(c.conf[0] == '\0' && c.db[0] == '\0');
        }
        CPPUNIT_ASSERT_EQUAL(-1, parse({"conf=/a", "margin=-3"}, c, err));
        CPPUNIT_ASSERT_EQUAL(0, c.strict);
    }

    void test_empty_value_rejected() {
        tula_plugin_config c;
        std::string err;
        for (const char* bad : {"conf=", "db="}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, parse({bad}, c, err));
            CPPUNIT_ASSERT_MESSAGE(err, err.find("empty") != std::string::npos);
            CPPUNIT_ASSERT(defaults(c));
        }
    }

    void test_overlong_value_rejected() {
        tula_plugin_config c;
        std::string err;
        // The longest accepted path fills the buffer but for its NUL.
        const std::string longest = "/" + std::string(TULA_PLUGIN_PATH_MAX - 2, 'a');
        CPPUNIT_ASSERT_EQUAL(size_t(TULA_PLUGIN_PATH_MAX - 1), longest.size());
        CPPUNIT_ASSERT_EQUAL(0, parse({"conf=" + longest}, c, err));
        CPPUNIT_ASSERT_EQUAL(longest, std::string(c.conf));
        for (size_t extra : {size_t(1), size_t(100000)}) {
            const std::string too_long = longest + std::string(extra, 'b');
            CPPUNIT_ASSERT_EQUAL(-1, parse({"db=" + too_long}, c, err));
            CPPUNIT_ASSERT_MESSAGE(err, err.find("too long") != std::string::npos);
            CPPUNIT_ASSERT(err.size() < TULA_MSG_MAX);
            CPPUNIT_ASSERT(defaults(c));
        }
    }

    void test_relative_and_control_rejected() {
        tula_plugin_config c;
        std::string err;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"conf=tula.conf"}, c, err));
        CPPUNIT_ASSERT_MESSAGE(err, err.find("absolute") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"db=/x\ny"}, c, err));
        CPPUNIT_ASSERT_MESSAGE(err, err.find("control") != std::string::npos);
        CPPUNIT_ASSERT(err.find('\n') == std::string::npos);  // the message stays one line
    }

    void test_repeated_key_rejected() {
        tula_plugin_config c;
        std::string err;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"conf=/a", "conf=/b"}, c, err));
        CPPUNIT_ASSERT_MESSAGE(err, err.find("twice") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"db=/a", "db=/a"}, c, err));
    }

    void test_bad_vectors() {
        tula_plugin_config c;
        char err[TULA_MSG_MAX];
        char* av[] = {nullptr};
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_config_parse(&c, 1, av, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_config_parse(&c, 2, nullptr, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_config_parse(&c, -1, av, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_config_parse(nullptr, 0, av, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(0, tula_plugin_config_parse(&c, 0, nullptr, err, sizeof err));
        // no error buffer at all is allowed
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_config_parse(&c, 1, av, nullptr, 0));
    }

    void test_tiny_error_buffer() {
        tula_plugin_config c;
        std::string arg = "unknown=" + std::string(5000, 'z');
        char* av[] = {&arg[0]};
        for (size_t len : {size_t(1), size_t(3), size_t(7), size_t(20)}) {
            char buf[32];
            std::memset(buf, '#', sizeof buf);
            CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_config_parse(&c, 1, av, buf, len));
            CPPUNIT_ASSERT(std::strlen(buf) <= len - 1);
            for (size_t i = len; i < sizeof buf; ++i) CPPUNIT_ASSERT_EQUAL('#', buf[i]);
        }
    }

    void test_modes() {
        struct { const char* mode; int active, plans; } cases[] = {
            {"auto", 1, 1}, {"time", 1, 1}, {"cost", 1, 1}, {"dry-run", 1, 0},
            {"off", 0, 0},  {"", 0, 0},     {"AUTO", 0, 0}, {"auto ", 0, 0}, {"set", 0, 0},
        };
        for (const auto& k : cases) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(k.mode, k.active, tula_plugin_mode_active(k.mode));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(k.mode, k.plans, tula_plugin_mode_plans(k.mode));
        }
        CPPUNIT_ASSERT_EQUAL(0, tula_plugin_mode_active(nullptr));
        CPPUNIT_ASSERT_EQUAL(0, tula_plugin_mode_plans(nullptr));
        // Every mode tula_plugin_parse_mode accepts is classified (the two lists agree).
        for (const char* v : {"auto", "time", "cost", "off", "dry-run", ""}) {
            char mode[16], err[TULA_MSG_MAX];
            CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode(v, mode, sizeof mode, err, sizeof err));
            CPPUNIT_ASSERT_EQUAL(std::strcmp(mode, "off") != 0 ? 1 : 0, tula_plugin_mode_active(mode));
        }
    }

    // The plan table against the regex reference, on valid, hostile and boundary tables.
    // The decision record: what is accepted, stored as given (the mode canonical), and what is
    // refused with one tula: line and an empty record.
    void test_decision_record() {
        const std::string t = "table=lenet5@fashion-mnist;2:128:12:95.5";
        struct Good {
            std::string text, mode, policy, workload, table;
        } good[] = {
            {"mode=auto\n", "auto", "", "", ""},
            {"mode=auto", "auto", "", "", ""},
            {"mode=dry-run\npolicy=deadline=01:00:00\nworkload=a@b\n" + t + "\n", "dry-run", "deadline=01:00:00", "a@b",
             t.substr(6)},
            {t + "\nworkload=a@b\nmode=cost", "cost", "", "a@b", t.substr(6)},  // any order
            {"mode=time\npolicy=budget=2.5\nfuture=anything at all\n", "time", "budget=2.5", "", ""},  // a newer key
            {"mode=auto\npolicy=deadline=2-01:00:00", "auto", "deadline=2-01:00:00", "", ""},
        };
        for (const Good& g : good) {
            tula_record r;
            char err[TULA_MSG_MAX];
            CPPUNIT_ASSERT_EQUAL_MESSAGE(g.text + " " + err, 0, tula_plugin_record(g.text.c_str(), &r, err, sizeof err));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(g.text, g.mode, std::string(r.mode));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(g.text, g.policy, std::string(r.policy));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(g.text, g.workload, std::string(r.workload));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(g.text, g.table, std::string(r.table));
        }
        std::vector<std::string> bad = {
            "", "\n", "mode=auto\n\n", "policy=deadline=01:00:00\n", "mode=auto\nmode=auto\n", "mode=bogus",
            "mode=auto\npolicy=deadline=1h", "mode=auto\npolicy=budget=1e5", "mode=auto\npolicy=sometimes",
            "mode=auto\npolicy=deadline=", "mode=auto\npolicy=budget=-1", "mode=auto\nworkload=bad name",
            "mode=auto\nworkload=a@b@c", "mode=auto\ntable=garbage", "mode=auto\ntable=", "=x\nmode=auto",
            "mode=auto\nno equals sign", "mode=auto\npolicy=deadline=" + std::string(60, '1'),
            "mode=auto\nfuture=" + std::string(TULA_RECORD_MAX, 'x'),
        };
        for (const std::string& text : bad) {
            tula_record r;
            std::memset(&r, 'x', sizeof r);
            char err[TULA_MSG_MAX];
            CPPUNIT_ASSERT_EQUAL_MESSAGE(text, -1, tula_plugin_record(text.c_str(), &r, err, sizeof err));
            CPPUNIT_ASSERT_MESSAGE(text + ": " + err, std::string(err).rfind("tula: ", 0) == 0);
            CPPUNIT_ASSERT_MESSAGE(text, r.mode[0] == '\0' && r.policy[0] == '\0' && r.workload[0] == '\0' && r.table[0] == '\0');
        }
        char err[TULA_MSG_MAX];
        tula_record r;
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_record(nullptr, &r, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_record("mode=auto", nullptr, err, sizeof err));
    }

    void test_plan_table() {
        const std::string w = "lenet5@fashion-mnist";
        std::vector<std::string> cases = {
            w + ";2:128:12:95.5", w + ";2:128:12:95.5;3:192:12:71;4:256:12:60.0", w + ";1:32:1:0",
            w + ";1000000:16777216:1000000:9999999999.9", w + ";2:128:12:95.5;2:64:12:90",  // repeated count
            w + ";0:128:12:1", w + ";2:0:12:1", w + ";2:128:0:1", w + ";1000001:1:1:1", w + ";2:16777217:1:1",
            w + ";2:128:12:95.55", w + ";2:128:12:.5", w + ";2:128:12:", w + ";2:128:12", w + ";2:128",
            w + ";", w, ";2:128:12:1", "bad name@x;2:1:1:1", w + ";2:128:12:1;", w + ";2:128:12:1;;3:1:1:1",
            w + ";-2:128:12:1", w + ";+2:128:12:1", w + ";2 :128:12:1", w + ";2:128:12:1\n", w + ";02:128:12:1",
            w + ";99999999:1:1:1", w + ";2:128:12:99999999999", "a@b@c;2:1:1:1", "",
            w + ";2:128:12:95.5:2", w + ";2:128:12:95:8;3:192:12:71", w + ";1:8:1:1:1024", w + ";1:8:1:1:1025",
            w + ";1:8:1:1:0", w + ";1:8:1:1:", w + ";1:8:1:1:2:2", w + ";1:8:1:1:12345", w + ";1:8:1:1.5:4;2:8:1:1",
        };
        std::string many = w;
        for (int n = 1; n <= TULA_PLAN_ROWS_MAX + 1; ++n) many += ";" + std::to_string(n) + ":64:1:1";
        cases.push_back(many);  // one row too many
        std::string full = w;
        for (int n = 1; n <= TULA_PLAN_ROWS_MAX; ++n) full += ";" + std::to_string(n) + ":64:1:1";
        cases.push_back(full);
        cases.push_back(w + std::string(5000, ';'));
        for (const auto& t : cases) {
            for (int nodes : {0, 1, 2, 3, 64, 1000000}) {
                tula_plan_row got, want;
                std::memset(&got, 0, sizeof got);
                std::memset(&want, 0, sizeof want);
                char err[TULA_MSG_MAX];
                const int expected = reference_table(t, nodes, &want);
                const int rc = tula_plugin_plan_table(t.c_str(), nodes, &got, err, sizeof err);
                CPPUNIT_ASSERT_EQUAL_MESSAGE(t + " nodes " + std::to_string(nodes), expected, rc);
                if (rc < 1) {
                    CPPUNIT_ASSERT_MESSAGE(err, std::string(err).rfind("tula: ", 0) == 0);
                } else if (nodes > 0) {
                    CPPUNIT_ASSERT_EQUAL(want.nodes, got.nodes);
                    CPPUNIT_ASSERT_EQUAL(want.global_batch, got.global_batch);
                    CPPUNIT_ASSERT_EQUAL(want.epochs, got.epochs);
                    CPPUNIT_ASSERT_EQUAL(want.ranks_per_node, got.ranks_per_node);
                    CPPUNIT_ASSERT_EQUAL(want.predicted_tenths, got.predicted_tenths);
                    CPPUNIT_ASSERT_EQUAL(std::string(want.workload), std::string(got.workload));
                }
            }
        }
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_plan_table(nullptr, 2, nullptr, err, sizeof err));
        // Valid, and the row for 3 nodes read back.
        tula_plan_row r;
        CPPUNIT_ASSERT_EQUAL(3, tula_plugin_plan_table((w + ";2:128:12:95.5;3:192:12:71;4:256:12:60").c_str(), 3, &r,
                                                       err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(192, r.global_batch);
        CPPUNIT_ASSERT_EQUAL(710L, r.predicted_tenths);
        CPPUNIT_ASSERT_EQUAL(0, tula_plugin_plan_table((w + ";2:128:12:95.5").c_str(), 3, &r, err, sizeof err));
        CPPUNIT_ASSERT(std::strstr(err, "no row for 3 nodes") != nullptr);
    }

    // The global batch for the ranks a job actually has: every rank keeps the planned local
    // batch (checked against the local batch computed by hand from the row).
    void test_rank_batch() {
        for (int nodes : {1, 2, 3, 4, 16})
            for (int rpn : {1, 2, 4, 8})
                for (int local : {1, 3, 32, 64, 1000})
                    for (int ranks : {0, 1, 2, 3, 5, 8, 32, 64}) {
                        const tula_plan_row r = make_plan(nodes, local * nodes * rpn, 1, 1, "a@b", rpn);
                        const int got = tula_plugin_rank_batch(&r, ranks);
                        if (ranks < 1 || ranks == nodes * rpn) {
                            CPPUNIT_ASSERT_EQUAL(r.global_batch, got);
                        } else {
                            CPPUNIT_ASSERT_EQUAL(local * ranks, got);  // same local batch on each rank
                            CPPUNIT_ASSERT_EQUAL(0, got % ranks);
                        }
                    }
        // A global batch that the planned ranks do not divide: rounded down to a whole local batch.
        tula_plan_row odd = make_plan(2, 100, 1, 1, "a@b", 3);  // 6 ranks: local 16
        CPPUNIT_ASSERT_EQUAL(16 * 4, tula_plugin_rank_batch(&odd, 4));
        tula_plan_row tiny = make_plan(4, 2, 1, 1, "a@b", 1);  // local 0 -> 1
        CPPUNIT_ASSERT_EQUAL(8, tula_plugin_rank_batch(&tiny, 8));
        tula_plan_row huge = make_plan(1, 16777216, 1, 1, "a@b", 1);  // capped at the row limit
        const int capped = tula_plugin_rank_batch(&huge, 3);
        CPPUNIT_ASSERT(capped <= 16777216 && capped % 3 == 0 && capped > 16777216 - 3);
        CPPUNIT_ASSERT_EQUAL(0, tula_plugin_rank_batch(nullptr, 4));
    }

    void test_workload_names() {
        std::vector<std::string> cases = {
            "lenet5@fashion-mnist", "fmnist-cnn@fashion-mnist", "a@b", "resnet18@cifar10.v2", "A_B@C-D",
            "", "@", "a@", "@b", "a@b@c", "lenet5", "lenet5 @x", "a@b;rm -rf /", "a/b@c", "a@b\n",
            "$(id)@x", "a'@b", std::string(63, 'm') + "@" + std::string(63, 'd'),
            std::string(64, 'm') + "@" + std::string(63, 'd'), std::string(1000, 'm') + "@d",
        };
        for (const auto& s : cases) {
            char err[TULA_MSG_MAX];
            const int rc = tula_check_workload(s.c_str(), err, sizeof err);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(s, reference_workload_ok(s) ? 0 : -1, rc);
            if (rc != 0) {
                CPPUNIT_ASSERT_MESSAGE(err, std::string(err).rfind("tula: ", 0) == 0);
                CPPUNIT_ASSERT_MESSAGE(err, std::strchr(err, '\n') == nullptr);
            }
        }
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(-1, tula_check_workload(nullptr, err, sizeof err));
        CPPUNIT_ASSERT(std::strstr(err, "--tula-workload") != nullptr);
    }

    void test_parse_nodes() {
        std::vector<std::string> cases = {"1", "2", "4", "10", "999999", "1000000", "1000001", "0", "00", "007",
                                          "", "-1", "+2", " 2", "2 ", "2x", "0x10", "1e3", "99999999999999999999",
                                          "4294967297", "3.0"};
        for (const auto& s : cases)
            CPPUNIT_ASSERT_EQUAL_MESSAGE(s, reference_nodes(s), tula_plugin_parse_nodes(s.c_str()));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_parse_nodes(nullptr));
    }

    void test_plan_env() {
        for (const tula_plan_row& p : {make_plan(2, 256, 10, 1235, "lenet5@fashion-mnist"),
                                       make_plan(1, 32, 1, 0, "a@b"),
                                       make_plan(4096, 1 << 20, 300, 864000L * 30, "fmnist-cnn@fashion-mnist")}) {
            tula_plugin_env env[TULA_PLUGIN_ENV_COUNT];
            char err[TULA_MSG_MAX];
            CPPUNIT_ASSERT_EQUAL(0, tula_plugin_plan_env(&p, env, err, sizeof err));
            const char* names[] = {"TULA_BATCH_SIZE", "TULA_NODES", "TULA_EPOCHS", "TULA_PREDICTED_SECONDS",
                                   "TULA_WORKLOAD"};
            for (int i = 0; i < TULA_PLUGIN_ENV_COUNT; ++i) {
                CPPUNIT_ASSERT(env[i].name != nullptr);
                CPPUNIT_ASSERT_EQUAL(std::string(names[i]), std::string(env[i].name));
            }
            // Read the values back independently.
            char* end = nullptr;
            CPPUNIT_ASSERT_EQUAL(long(p.global_batch), std::strtol(env[0].value, &end, 10));
            CPPUNIT_ASSERT_EQUAL('\0', *end);
            CPPUNIT_ASSERT_EQUAL(long(p.nodes), std::strtol(env[1].value, &end, 10));
            CPPUNIT_ASSERT_EQUAL('\0', *end);
            CPPUNIT_ASSERT_EQUAL(long(p.epochs), std::strtol(env[2].value, &end, 10));
            CPPUNIT_ASSERT_EQUAL('\0', *end);
            const double secs = std::strtod(env[3].value, &end);
            CPPUNIT_ASSERT_EQUAL('\0', *end);
            CPPUNIT_ASSERT(std::fabs(secs - p.predicted_tenths / 10.0) <= 1e-9);
            const char* dot = std::strchr(env[3].value, '.');
            CPPUNIT_ASSERT(dot != nullptr && std::strlen(dot) == 2);
            CPPUNIT_ASSERT_EQUAL(std::string(p.workload), std::string(env[4].value));
        }
    }

    void test_plan_env_rejects_bad_plans() {
        for (const tula_plan_row& p :
             {make_plan(0, 64, 1, 10, "a@b"), make_plan(2, 0, 1, 10, "a@b"), make_plan(2, 64, 0, 10, "a@b"),
              make_plan(2, 64, 1, -10, "a@b"), make_plan(2, 64, 1, 100000000001L, "a@b"),
              make_plan(1000001, 64, 1, 10, "a@b"), make_plan(2, 64, 1, 10, ""), make_plan(2, 64, 1, 10, "bad name@x")}) {
            tula_plugin_env env[TULA_PLUGIN_ENV_COUNT];
            char err[TULA_MSG_MAX];
            CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_plan_env(&p, env, err, sizeof err));
            CPPUNIT_ASSERT_MESSAGE(err, std::string(err).rfind("tula: ", 0) == 0);
        }
        // A workload field without its NUL is bounded, not overrun.
        tula_plan_row p = make_plan(2, 64, 1, 10, "");
        std::memset(p.workload, 'w', sizeof p.workload);
        tula_plugin_env env[TULA_PLUGIN_ENV_COUNT];
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_plan_env(&p, env, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plugin_plan_env(nullptr, env, err, sizeof err));
    }

    void test_one_line() {
        char out[16];
        tula_plugin_one_line("tula: a\nb\tc", out, sizeof out);
        CPPUNIT_ASSERT_EQUAL(std::string("tula: a b c"), std::string(out));
        const std::string longer(100, 'x');
        tula_plugin_one_line(longer.c_str(), out, sizeof out);
        CPPUNIT_ASSERT_EQUAL(longer.substr(0, sizeof out - 1), std::string(out));
        tula_plugin_one_line(nullptr, out, sizeof out);
        CPPUNIT_ASSERT_EQUAL(std::string(), std::string(out));
        tula_plugin_one_line("abc", out, 1);
        CPPUNIT_ASSERT_EQUAL(std::string(), std::string(out));
    }

    // margin=: accepted values read back as strtod does; everything else rejected with a
    // message naming margin and leaving the defaults.
    void test_margin() {
        for (const char* v : {"0", "0.25", "1", "100", ".5", "3.", "99.999"}) {
            tula_plugin_config cfg;
            std::string err;
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, 0, parse({std::string("margin=") + v, "strict"}, cfg, err));
            CPPUNIT_ASSERT_EQUAL(std::string(v), std::string(cfg.margin));
            CPPUNIT_ASSERT_DOUBLES_EQUAL(std::strtod(v, nullptr), cfg.margin_value, 0.0);
            CPPUNIT_ASSERT_EQUAL(1, cfg.strict);
        }
        for (const char* v : {"", "-0.1", "+1", "1e-1", "inf", "nan", "0x1", "100.5", "1,5", " 1", "1 ", "..",
                              ".", "abc", "123456789012345678901234567890123"}) {
            tula_plugin_config cfg;
            std::string err;
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, -1, parse({std::string("margin=") + v}, cfg, err));
            CPPUNIT_ASSERT_MESSAGE(err, err.rfind("tula: ", 0) == 0 && err.find("margin") != std::string::npos);
            CPPUNIT_ASSERT(defaults(cfg) && cfg.margin[0] == '\0');
        }
        tula_plugin_config cfg;
        std::string err;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"margin=0.1", "margin=0.2"}, cfg, err));
        CPPUNIT_ASSERT(err.find("twice") != std::string::npos);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"margins=0.1"}, cfg, err));
        CPPUNIT_ASSERT(err.find("unknown") != std::string::npos && err.find("margin=FRACTION") != std::string::npos);
    }

    // Deadlines against a std::regex reference: H{1,5}:MM:SS, MM and SS < 60, not zero; the
    // value returned is the seconds computed independently.
    // Durations (tula_parse_duration, the one grammar of --tula-deadline, TULA_DEADLINE and
    // tula plan --policy deadline=) against a std::regex reference of Slurm's forms.
    void test_deadline() {
        const std::regex form("^(?:([0-9]{1,4})-)?([0-9]{1,7}):([0-9]{2})(?::([0-9]{2}))?$");
        for (const char* v : {"02:00:00", "0:00:01", "1:59:59", "99999:59:59", "00:30:00", "12:00", "90:00", "2h",
                              "00:00:00", "1:60:00", "1:00:60", "-1:00:00", "123456:00:00", "1:2:3",
                              " 01:00:00", "01:00:00 ", "01:00:00:00", "1-00:00:00", "1-12:00", "0-00:00",
                              "3650-00:00:01", "3651-00:00:00", "1000000:00", "1000001:00", "", "01:0a:00",
                              "::", "1::00", "a1:00:00", "1-", "-00:01", "1--00:00:00", "12345678901234567890:00"}) {
            const std::string s(v);
            long expect = -1;
            std::smatch m;
            if (s.size() < 32 && std::regex_match(s, m, form)) {
                const long d = m[1].matched ? std::stol(m[1]) : 0, a = std::stol(m[2]), b = std::stol(m[3]);
                const bool three = m[4].matched;
                const long c = three ? std::stol(m[4]) : 0;
                const long secs = d * 86400 + (three ? a * 3600 + b * 60 + c : a * 60 + b);
                if (d <= 3650 && a <= 1000000 && b < 60 && c < 60 && secs > 0) expect = secs;
            }
            char err[TULA_MSG_MAX];
            const long got = tula_parse_duration(v, err, sizeof err);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(s, expect, got);
            if (expect < 0) CPPUNIT_ASSERT_MESSAGE(err, std::string(err).rfind("tula: ", 0) == 0 &&
                                                            std::string(err).find("duration") != std::string::npos);
            else CPPUNIT_ASSERT_EQUAL(std::string(), std::string(err));
        }
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(-1L, tula_parse_duration(nullptr, err, sizeof err));
    }

    // Budgets against a reference: std::regex for the form, strtod for the range.
    void test_budget() {
        const std::regex form("^([0-9]+\\.?[0-9]*|\\.[0-9]+)$");
        for (const char* v : {"2.5", "1", "0.01", ".5", "7.", "100000000000000", "999999999999999", "0", "0.0",
                              "-1", "+1", "1e3", "inf", "nan", "", "1 ", "1,5", "abc", "1000000000000000",
                              "12345678901234567890123"}) {
            const std::string s(v);
            bool expect = std::regex_match(s, form) && s.size() < 24;
            if (expect) {
                const double d = std::strtod(v, nullptr);
                expect = d > 0 && d < 1e15;
            }
            char err[TULA_MSG_MAX];
            double got = -1;
            const int rc = tula_check_budget(v, &got, err, sizeof err);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(s, expect ? 0 : -1, rc);
            if (expect) CPPUNIT_ASSERT_DOUBLES_EQUAL(std::strtod(v, nullptr), got, 0.0);
            if (!expect) CPPUNIT_ASSERT_MESSAGE(err, std::string(err).rfind("tula: ", 0) == 0 &&
                                                         std::string(err).find("budget") != std::string::npos);
        }
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(-1, tula_check_budget(nullptr, nullptr, err, sizeof err));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(PluginConfigTest);
