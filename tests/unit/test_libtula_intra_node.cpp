// Unit tests of the within-node allreduce: IntraNodeModel's fit against a least-squares
// reference written out here, its errors, the across-node fit's independence from samples of
// one node, and the planner taking the fitted bandwidth over tula.conf's intra_node_bandwidth.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <random>

#include "models_fixtures.hpp"
#include "planner_fixtures.hpp"
#include "tula/conf.hpp"
#include "tula/planner.hpp"
#include "test_util.hpp"

using tula_test::contains;

class LibtulaIntraNodeTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaIntraNodeTest);
    CPPUNIT_TEST(test_fit_recovers_bandwidth);
    CPPUNIT_TEST(test_fit_matches_reference);
    CPPUNIT_TEST(test_fit_errors);
    CPPUNIT_TEST(test_inter_node_fit_ignores_one_node);
    CPPUNIT_TEST(test_plan_takes_fitted_bandwidth);
    CPPUNIT_TEST_SUITE_END();

    // A sample of R ranks on one node.
    static tula::AllreduceSample on_node(int ranks, int64_t bytes, double seconds) {
        tula::AllreduceSample s = models_test::as(1, bytes, seconds);
        s.ranks_per_node = ranks;
        return s;
    }

    // The ring allreduce's time of n bytes among r ranks on one node at bandwidth bw with
    // latency a: a + 2 (r-1)/r n / bw (Thakur, Rabenseifner & Gropp 2005, sec. 4.5).
    static double ring(int r, double n, double bw, double a) { return a + 2.0 * (r - 1) / r * n / bw; }

    // Reference: the normal equations of y = a + s x, x = 2 (r-1)/r n, solved by Cramer's rule
    // from the raw sums (no centering, unlike the library). Returns 1 / s (bytes/s).
    static double reference_bandwidth(const std::vector<tula::AllreduceSample>& v) {
        double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (const auto& s : v) {
            if (s.nodes != 1 || s.ranks_per_node < 2) continue;
            const double r = s.ranks_per_node;
            const double x = 2.0 * (r - 1.0) / r * static_cast<double>(s.bytes);
            n += 1;
            sx += x;
            sy += s.seconds;
            sxx += x * x;
            sxy += x * s.seconds;
        }
        const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
        return 1.0 / slope;
    }

public:
    // Noise-free samples of 2, 4 and 8 ranks: the bandwidth and latency come back exactly.
    void test_fit_recovers_bandwidth() {
        const double bw = 12e9, a = 8e-6;
        std::vector<tula::AllreduceSample> s;
        for (int r : {2, 4, 8})
            for (int64_t n : {int64_t(1) << 16, int64_t(1) << 20, int64_t(16) << 20}) s.push_back(on_node(r, n, ring(r, n, bw, a)));
        const tula::IntraNodeModel m = tula::IntraNodeModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(bw, m.bandwidth, 1e-6 * bw);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(a, m.latency, 1e-9);
        CPPUNIT_ASSERT(m.rmse < 1e-12);
        CPPUNIT_ASSERT_EQUAL(9, m.samples);
        CPPUNIT_ASSERT_EQUAL(3, m.sizes);
        CPPUNIT_ASSERT((m.ranks == std::vector<int>{2, 4, 8}));
        // the fitted bandwidth reproduces the within-node time the planner takes
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ring(4, 1e6, bw, 0), tula::intra_node_allreduce_seconds(4, 1e6, m.bandwidth), 1e-15);
        // a formula without the 2 (r-1)/r factor would see 2 ranks and 8 ranks disagree
        // (x = n): the fit is exact only with it
        const double naive = reference_bandwidth(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(naive, m.bandwidth, 1e-9 * naive);
    }

    // Noisy samples: the fit equals the uncentred normal-equation solution computed here, and
    // lies within 3 % of the truth; samples of other shapes are left out.
    void test_fit_matches_reference() {
        const double bw = 3e9, a = 2e-5;
        std::mt19937 rng(7);
        std::normal_distribution<double> noise(0.0, 0.02);
        std::vector<tula::AllreduceSample> s;
        for (int rep = 0; rep < 4; ++rep)
            for (int r : {2, 3, 4})
                for (int64_t n : {int64_t(1) << 18, int64_t(1) << 21, int64_t(1) << 24})
                    s.push_back(on_node(r, n, ring(r, n, bw, a) * (1 + noise(rng))));
        s.push_back(models_test::as(2, 1 << 20, 5.0));  // across nodes: not this fit's
        s.push_back(on_node(1, 1 << 20, 9.0));           // one rank alone: nothing reduced
        const tula::IntraNodeModel m = tula::IntraNodeModel::fit(s);
        const double ref = reference_bandwidth(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ref, m.bandwidth, 1e-6 * ref);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(bw, m.bandwidth, 0.03 * bw);
        CPPUNIT_ASSERT_EQUAL(36, m.samples);
        // a wrong formula (x = n, no 2 (r-1)/r) gives another bandwidth: the test above would see it
        double sx = 0, sy = 0, sxx = 0, sxy = 0, k = 0;
        for (const auto& q : s)
            if (q.nodes == 1 && q.ranks_per_node >= 2) {
                const double x = static_cast<double>(q.bytes);
                k += 1, sx += x, sy += q.seconds, sxx += x * x, sxy += x * q.seconds;
            }
        const double wrong = (k * sxx - sx * sx) / (k * sxy - sx * sy);
        CPPUNIT_ASSERT(std::fabs(wrong - m.bandwidth) > 0.1 * m.bandwidth);
    }

    void test_fit_errors() {
        using models_test::throws;
        auto message = [](const std::vector<tula::AllreduceSample>& v) {
            try {
                tula::IntraNodeModel::fit(v);
            } catch (const tula::Error& e) {
                return std::string(e.what());
            }
            return std::string();
        };
        // none of one node (only across nodes): no profile
        CPPUNIT_ASSERT(contains(message({models_test::as(2, 1000, 1e-4), models_test::as(2, 2000, 2e-4)}),
                                "no within-node allreduce profile"));
        // one message size, even with two rank counts: too few sizes
        const std::string one = message({on_node(2, 1 << 20, 1e-4), on_node(4, 1 << 20, 2e-4), on_node(2, 1 << 20, 1.1e-4)});
        CPPUNIT_ASSERT_MESSAGE(one, contains(one, "1 distinct message size; need at least 2"));
        CPPUNIT_ASSERT_MESSAGE(one, contains(one, "--ranks-per-node"));
        // a time that does not grow with the size
        CPPUNIT_ASSERT(contains(message({on_node(2, 1000, 2e-4), on_node(2, 100000, 1e-4)}), "does not grow"));
        // invalid samples
        CPPUNIT_ASSERT(throws([&] { tula::IntraNodeModel::fit({on_node(2, 1000, 1e-4), on_node(2, 2000, NAN)}); }));
        CPPUNIT_ASSERT(throws([&] { tula::IntraNodeModel::fit({on_node(2, 1000, 1e-4), on_node(2, 0, 1e-4)}); }));
        CPPUNIT_ASSERT(!throws([&] { tula::IntraNodeModel::fit({on_node(2, 1000, 1e-4), on_node(2, 2000, 2e-4)}); }));
        CPPUNIT_ASSERT(tula::IntraNodeModel::has_samples({on_node(2, 1000, 1e-4)}));
        CPPUNIT_ASSERT(!tula::IntraNodeModel::has_samples({models_test::as(2, 1000, 1e-4), on_node(1, 1000, 1e-4)}));
    }

    // The across-node model fitted with and without samples of one node is the same model;
    // with samples of one node alone it has nothing to fit.
    void test_inter_node_fit_ignores_one_node() {
        using models_test::as;
        const std::vector<tula::AllreduceSample> across = {as(2, 1000, 1e-4), as(2, 100000, 5e-4), as(4, 1000, 3e-4),
                                                           as(4, 100000, 1.2e-3), as(8, 50000, 1.5e-3)};
        std::vector<tula::AllreduceSample> mixed = across;
        for (int64_t n : {1000, 100000, 1000000}) mixed.push_back(on_node(4, n, 1e-9 * n));
        const tula::AllreduceModel a = tula::AllreduceModel::fit(across), b = tula::AllreduceModel::fit(mixed);
        CPPUNIT_ASSERT_EQUAL(a.alpha, b.alpha);
        CPPUNIT_ASSERT_EQUAL(a.beta, b.beta);
        CPPUNIT_ASSERT_EQUAL(a.rmse, b.rmse);
        CPPUNIT_ASSERT(a.algorithm == b.algorithm);
        CPPUNIT_ASSERT(a.measured == b.measured);
        // the samples the fit used: the 5 across nodes at one rank per node, counted by hand;
        // neither the within-node ones nor 2 nodes x 2 ranks (a two-level allreduce)
        tula::AllreduceSample two_level = as(2, 1000, 2e-4);
        two_level.ranks_per_node = 2;
        mixed.push_back(two_level);
        CPPUNIT_ASSERT_EQUAL(5, a.samples);
        CPPUNIT_ASSERT_EQUAL(5, tula::AllreduceModel::fit(mixed).samples);
        CPPUNIT_ASSERT(tula::AllreduceModel::has_inter_node(mixed));
        const std::vector<tula::AllreduceSample> only_node = {on_node(4, 1000, 1e-6), on_node(4, 100000, 1e-4)};
        CPPUNIT_ASSERT(!tula::AllreduceModel::has_inter_node(only_node));
        CPPUNIT_ASSERT(models_test::throws([&] { tula::AllreduceModel::fit(only_node); }));
    }

    // A partition of 1 node x 2 ranks: without a within-node profile the step takes tula.conf's
    // intra_node_bandwidth; once the database has one, the fitted bandwidth, and each
    // candidate's step changes by 2 (R-1)/R n (1/bw_fit - 1/bw_conf), n = 4 x params bytes.
    void test_plan_takes_fitted_bandwidth() {
        using namespace planner_test;
        TempDir d;
        const std::string db_path = d / "p.db";
        const double t0 = 2e-3, t1 = 1.5e-4, bw_conf = 1e9, bw_fit = 8e9;
        {
            auto db = lenet5_db(db_path);
            add_linear_compute(db, {16, 32, 64, 128, 256}, t0, t1);
        }
        const tula::Config cfg = tula::parse_config(
            "global_batches = 64, 128, 256\ndefault_epochs = 5\n"
            "[partition node]\nnodes = 1\nranks_per_node = 2\nintra_node_bandwidth = 1e9\n");
        auto plan = [&] {
            std::vector<std::string> warn;
            const tula::Plan p =
                tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 0, 0, 0, tula::Policy::Time, &warn);
            CPPUNIT_ASSERT_MESSAGE(warn.empty() ? "" : warn[0], warn.empty());
            return p;
        };
        const tula::Plan before = plan();
        {
            auto db = tula::ProfileDb::open(db_path, tula::ProfileDb::Mode::ReadWrite);
            for (int64_t n : {int64_t(1) << 16, int64_t(1) << 20, int64_t(1) << 24}) db.add_allreduce(on_node(2, n, ring(2, n, bw_fit, 1e-5)));
        }
        const tula::Plan after = plan();
        CPPUNIT_ASSERT_EQUAL(before.candidates.size(), after.candidates.size());
        CPPUNIT_ASSERT(!before.candidates.empty());
        const double n = 4.0 * 61706;  // lenet5's parameters, float32
        for (size_t i = 0; i < before.candidates.size(); ++i) {
            const tula::Candidate &b = before.candidates[i], &a = after.candidates[i];
            CPPUNIT_ASSERT_EQUAL(1, a.nodes);
            CPPUNIT_ASSERT_EQUAL(2, a.ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(std::string("tula.conf"), b.intra_node_source);
            CPPUNIT_ASSERT_EQUAL(bw_conf, b.intra_node_bandwidth);
            CPPUNIT_ASSERT_EQUAL(std::string("fit"), a.intra_node_source);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(bw_fit, a.intra_node_bandwidth, 1e-6 * bw_fit);
            const double want = ring(2, n, bw_fit, 0) - ring(2, n, bw_conf, 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, a.iter_seconds - b.iter_seconds, 1e-9 * b.iter_seconds);
        }
        CPPUNIT_ASSERT_MESSAGE(after.reason, contains(after.reason, "fitted from the within-node profile"));
        CPPUNIT_ASSERT_MESSAGE(before.reason, contains(before.reason, "from tula.conf's intra_node_bandwidth"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaIntraNodeTest);
