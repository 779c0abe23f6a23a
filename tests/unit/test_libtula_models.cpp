// Unit tests of the compute and allreduce models (models.hpp): parameters recovered from
// synthetic noisy data, agreement with closed-form least squares, non-negativity, errors.
#include <cppunit/extensions/HelperMacros.h>

#include <functional>
#include <set>

#include "models_fixtures.hpp"

using namespace models_test;

namespace {

// The synchronized-step factor of `nodes` nodes of one rank at local batch b, as the planner
// gets it: ComputeModel::synced_factor_at of m's ratios to `modelled`.
double synced_factor(const tula::ComputeModel& m, int nodes, double b,
                     const std::function<double(int, double)>& modelled) {
    return tula::ComputeModel::synced_factor_at(m.synced_ratios(modelled), nodes, b);
}

}  // namespace

class LibtulaModelsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaModelsTest);
    CPPUNIT_TEST(test_compute_recovers_parameters);
    CPPUNIT_TEST(test_compute_matches_closed_form);
    CPPUNIT_TEST(test_compute_non_negative);
    CPPUNIT_TEST(test_compute_errors);
    CPPUNIT_TEST(test_allreduce_recovers_parameters);
    CPPUNIT_TEST(test_allreduce_non_negative);
    CPPUNIT_TEST(test_allreduce_formula);
    CPPUNIT_TEST(test_allreduce_errors);
    CPPUNIT_TEST(test_allreduce_one_point);
    CPPUNIT_TEST(test_compute_flat_then_linear);
    CPPUNIT_TEST(test_compute_interval);
    CPPUNIT_TEST(test_compute_interpolated);
    CPPUNIT_TEST(test_compute_fit_matches_reference);
    CPPUNIT_TEST(test_compute_concurrency);
    CPPUNIT_TEST(test_synced_factor);
    CPPUNIT_TEST(test_compute_startup);
    CPPUNIT_TEST(test_allreduce_rabenseifner);
    CPPUNIT_TEST(test_allreduce_measured_node_counts);
    CPPUNIT_TEST(test_allreduce_not_faster_than_fewer_nodes);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_compute_recovers_parameters() {
        const double t0 = 2.5e-3, t1 = 1.8e-4;  // 2.5 ms overhead, 0.18 ms per example
        std::mt19937 rng(2024);
        std::normal_distribution<double> noise(0.0, 0.01);  // 1 % multiplicative noise
        std::vector<tula::ComputeSample> s;
        for (int rep = 0; rep < 5; ++rep)
            for (int b : {8, 16, 32, 64, 128, 256, 512}) s.push_back(cs(b, (t0 + t1 * b) * (1 + noise(rng))));
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t1, m.t1, 0.02 * t1);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t0, m.t0, 0.25 * t0);
        CPPUNIT_ASSERT_EQUAL(8, m.min_batch);
        CPPUNIT_ASSERT_EQUAL(512, m.max_batch);
        CPPUNIT_ASSERT(m.rmse > 0 && m.rmse < 0.02 * (t0 + t1 * 512));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m.t0 + m.t1 * 100, m.parametric(100), 1e-15);
        // whichever form won, the prediction at 100 stays within the noise of the truth
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t0 + t1 * 100, m.seconds_per_iter(100), 0.03 * (t0 + t1 * 100));
    }

    // The interpolated form: on a convex truth t(b) = 1 ms + 50 us b + 0.2 us b^2 (a per-example
    // cost that grows with the batch, as when activations leave the cache) profiled at 9
    // batches, leave-one-out prefers interpolation; it then predicts an unprofiled batch
    // inside the range closer to the truth than the straight line does, returns each knot's
    // median at a profiled batch, and continues outside the range from the end knots.
    // Exactly linear data keeps the fitted line (a tie goes to the parametric form).
    // Samples of K ranks at once: they leave the one-rank fit alone and give c_K(b) = their
    // median / t(b) at each batch, linear in log b between batches, held outside, the largest
    // profiled K <= nodes serving other node counts, 1 without any.
    void test_compute_concurrency() {
        auto t = [](double b) { return 1e-3 + 1e-4 * b; };
        std::vector<tula::ComputeSample> alone;
        for (int b : {16, 32, 64, 128, 256}) alone.push_back(cs(b, t(b)));
        auto together = alone;
        auto at_once = [&](int k, int b, double f) {
            tula::ComputeSample s = cs(b, t(b) * f);
            s.ranks = k;
            together.push_back(s);
        };
        for (double f : {1.08, 1.1, 1.5}) at_once(2, 16, f);  // median 1.1
        at_once(2, 256, 1.4);
        at_once(4, 64, 2.0);
        const auto m0 = tula::ComputeModel::fit(alone);
        const auto m = tula::ComputeModel::fit(together);
        for (double b : {8.0, 16.0, 50.0, 256.0, 600.0}) {
            CPPUNIT_ASSERT_DOUBLES_EQUAL(m0.seconds_per_iter(b), m.seconds_per_iter(b), 1e-15);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, m0.concurrency_factor(2, b), 0.0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, m.concurrency_factor(1, b), 0.0);
        }
        CPPUNIT_ASSERT_EQUAL(size_t{2}, m.concurrent.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, m.concurrency_factor(2, 16), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.4, m.concurrency_factor(2, 256), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, m.concurrency_factor(2, 4), 1e-12);     // held below
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.4, m.concurrency_factor(2, 1024), 1e-12);  // held above
        // b = 64 is halfway between 16 and 256 in log b (16 x 4 = 64, 64 x 4 = 256)
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.25, m.concurrency_factor(2, 64), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.25, m.concurrency_factor(3, 64), 1e-12);  // 3 nodes: K = 2's
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0, m.concurrency_factor(4, 16), 1e-12);   // one batch: flat
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0, m.concurrency_factor(100, 256), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t(64) * 1.25, m.seconds_per_iter(64, 2), 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t(64), m.seconds_per_iter(64, 1), 1e-15);
        // samples of several ranks alone are not a profile; a bad one is reported
        std::vector<tula::ComputeSample> only_together(together.begin() + 5, together.end());
        CPPUNIT_ASSERT(throws([&] { tula::ComputeModel::fit(only_together); }));
        auto bad = together;
        bad.back().seconds_per_iter = -1;
        CPPUNIT_ASSERT(throws([&] { tula::ComputeModel::fit(bad); }));
    }

    // The sync factor y_K(b): each profiled batch's median synced time over the caller's
    // modelled step at that batch, linear in log b between batches, held outside, the largest
    // profiled K <= nodes, clamped to [0.25, 4], 1 without synced samples or on 1 node; and
    // step_time_factor: the synced factor only while the calibration has no multi-node group.
    void test_synced_factor() {
        auto t = [](double b) { return 1e-3 + 1e-4 * b; };
        std::vector<tula::ComputeSample> all;
        for (int b : {16, 32, 64, 128, 256}) all.push_back(cs(b, t(b)));
        auto synced = [&](int k, int b, double secs) {
            tula::ComputeSample s = cs(b, t(b));
            s.ranks = k;
            s.synced_seconds_per_iter = secs;
            all.push_back(s);
        };
        // modelled(k, b) = t(b) + 1 ms x k: ratios 1.2 at b = 16 (median of three), 1.8 at 256
        auto modelled = [&](int k, double b) { return t(b) + 1e-3 * k; };
        for (double f : {1.1, 1.2, 1.6}) synced(2, 16, f * modelled(2, 16));
        synced(2, 256, 1.8 * modelled(2, 256));
        synced(4, 64, 100.0 * modelled(4, 64));  // clamped to 4
        tula::ComputeSample unmeasured = cs(32, t(32));
        unmeasured.ranks = 3;  // NaN synced: not a knot
        all.push_back(unmeasured);
        const auto m = tula::ComputeModel::fit(all);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, m.synced.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, synced_factor(m, 1, 64, modelled), 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, synced_factor(m, 2, 16, modelled), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.8, synced_factor(m, 2, 256, modelled), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, synced_factor(m, 2, 2, modelled), 1e-12);     // held below
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.8, synced_factor(m, 2, 4096, modelled), 1e-12);  // held above
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, synced_factor(m, 2, 64, modelled), 1e-12);    // halfway in log b
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, synced_factor(m, 3, 64, modelled), 1e-12);    // 3 nodes: K = 2's
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4.0, synced_factor(m, 4, 64, modelled), 1e-12);    // clamped
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4.0, synced_factor(m, 512, 16, modelled), 1e-12);
        // a modelled step that is not > 0 leaves its knot out; none left: 1
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, synced_factor(m, 2, 64, [](int, double) { return 0.0; }), 0.0);
        // without synced samples: 1 everywhere
        std::vector<tula::ComputeSample> alone(all.begin(), all.begin() + 5);
        const auto m0 = tula::ComputeModel::fit(alone);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, synced_factor(m0, 2, 64, modelled), 0.0);
        // step_time_factor: the synced factor alone until 2 multi-node runs calibrate K > 1,
        // then times their residual
        const auto ratios = m.synced_ratios(modelled);
        tula::TimeCalibration cal;
        cal.factor = 0.9;
        cal.runs = 1;
        cal.factor_single = 0.7;
        cal.runs_single = 2;
        bool from = false;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, tula::step_time_factor(cal, ratios, 2, 64, &from), 1e-12);
        CPPUNIT_ASSERT(from);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.7, tula::step_time_factor(cal, ratios, 1, 64, &from), 1e-12);
        CPPUNIT_ASSERT(!from);
        cal.runs_multi = 1;  // one run is too few: the synced factor alone
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, tula::step_time_factor(cal, ratios, 2, 64, &from), 1e-12);
        cal.factor_multi = 1.1;
        cal.runs_multi = 2;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5 * 1.1, tula::step_time_factor(cal, ratios, 2, 64, &from), 1e-12);
        CPPUNIT_ASSERT(from);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, tula::step_time_factor(cal, {}, 2, 64, &from), 1e-12);  // no profile
        CPPUNIT_ASSERT(!from);
        cal.factor_multi = 3.0;  // the product is clamped to [0.25, 4]: 1.8 x 3 at K = 3, b = 256
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4.0, tula::step_time_factor(cal, ratios, 3, 256, &from), 1e-12);
        cal.runs_multi = 0;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9, tula::step_time_factor(cal, {}, 2, 64, &from), 1e-12);  // no profile: pooled
        CPPUNIT_ASSERT(!from);
    }

    // Start-up: the median of the measured values per batch (one rank alone; unmeasured and
    // concurrent samples left out), linear between batches, proportional to b below the
    // smallest, the last slope above (never falling); steady_seconds takes it off a run.
    void test_compute_startup() {
        auto t = [](double b) { return 1e-3 + 1e-4 * b; };
        std::vector<tula::ComputeSample> s;
        auto add = [&](int b, double startup, int ranks = 1) {
            tula::ComputeSample c = cs(b, t(b));
            c.startup_seconds = startup;
            c.ranks = ranks;
            s.push_back(c);
        };
        add(64, 0.5);
        add(64, 0.7);
        add(64, 9.0);  // median of 0.5, 0.7, 9.0: 0.7
        add(128, std::numeric_limits<double>::quiet_NaN());
        add(256, 1.9);
        add(512, 3.1);
        add(512, 50.0, 2);  // several ranks at once: not a start-up sample
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(size_t{3}, m.startup_knots.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.7, m.startup_seconds(64), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.7 + (1.9 - 0.7) * (160.0 - 64) / (256 - 64), m.startup_seconds(160), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.7 * 16 / 64, m.startup_seconds(16), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3.1 + (3.1 - 1.9) / 256 * 512, m.startup_seconds(1024), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, tula::ComputeModel::fit({cs(16, 1e-3), cs(64, 4e-3)}).startup_seconds(32), 0.0);
        // a falling last segment is held, not continued down
        std::vector<tula::ComputeSample> f;
        for (auto [b, st] : {std::pair<int, double>{64, 2.0}, {128, 1.0}}) {
            tula::ComputeSample c = cs(b, t(b));
            c.startup_seconds = st;
            f.push_back(c);
        }
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, tula::ComputeModel::fit(f).startup_seconds(4096), 1e-12);
        tula::RunRecord r;
        r.nodes = 2;
        r.global_batch = 320;  // local batch 160
        r.measured_seconds = 100;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100 - m.startup_seconds(160), tula::steady_seconds(r, m), 1e-12);
        r.measured_seconds = 1.0;  // shorter than twice the start-up: half of it is kept
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, tula::steady_seconds(r, m), 1e-12);
        // a run of a job that measured its own step first (its samples carry the job's id)
        // trained warm: nothing is taken off; a run of another job still pays the start-up
        std::vector<tula::ComputeSample> own = s;
        own[0].job_id = "41";
        const auto mj = tula::ComputeModel::fit(own);
        CPPUNIT_ASSERT(mj.measured_jobs == std::set<std::string>{"41"});
        r.measured_seconds = 100;
        r.job_id = "41";
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100.0, tula::steady_seconds(r, mj), 0.0);
        r.job_id = "42";
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100 - mj.startup_seconds(160), tula::steady_seconds(r, mj), 1e-12);
    }

    void test_compute_interpolated() {
        auto truth = [](double b) { return 1e-3 + 5e-5 * b + 2e-7 * b * b; };
        std::vector<tula::ComputeSample> s;
        for (int b : {16, 24, 32, 48, 64, 96, 128, 192, 256})
            for (double f : {0.99, 1.0, 1.02}) s.push_back(cs(b, truth(b) * f));  // median: the truth
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT(m.interpolated);
        CPPUNIT_ASSERT(m.loo_interpolated < m.loo_parametric);
        CPPUNIT_ASSERT_EQUAL(size_t{9}, m.knots.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(truth(48), m.seconds_per_iter(48), 1e-15);
        const double err_int = std::fabs(m.seconds_per_iter(112) / truth(112) - 1);
        const double err_line = std::fabs(m.parametric(112) / truth(112) - 1);
        CPPUNIT_ASSERT(err_int < 0.01);
        CPPUNIT_ASSERT(err_int < err_line);
        // halfway between knots 96 and 128: the straight line between them
        CPPUNIT_ASSERT_DOUBLES_EQUAL((truth(96) + truth(128)) / 2, m.seconds_per_iter(112), 1e-15);
        // above the range: the end knot plus the curve's increase; below: not under t(16) b/16
        CPPUNIT_ASSERT_DOUBLES_EQUAL(truth(256) + m.parametric(300) - m.parametric(256), m.seconds_per_iter(300), 1e-15);
        CPPUNIT_ASSERT(m.seconds_per_iter(8) >= truth(16) * 8 / 16 - 1e-15);
        CPPUNIT_ASSERT(m.seconds_per_iter(8) <= truth(16));
        // its interval: Student t (7 interior knots) x RMS of the interior leave-one-out
        // relative errors, recomputed here from the truth's medians
        double ss = 0;
        const int kb[] = {16, 24, 32, 48, 64, 96, 128, 192, 256};
        for (int j = 1; j < 8; ++j) {
            const double w = double(kb[j] - kb[j - 1]) / (kb[j + 1] - kb[j - 1]);
            const double e = (truth(kb[j - 1]) + w * (truth(kb[j + 1]) - truth(kb[j - 1]))) / truth(kb[j]) - 1;
            ss += e * e;
        }
        const double h = gsl_cdf_tdist_Pinv(0.975, 7) * std::sqrt(ss / 7) * m.seconds_per_iter(112);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(h, m.interval(112, 0.95), 1e-12 * h);

        std::vector<tula::ComputeSample> lin;
        for (int b : {16, 32, 64, 128, 256}) lin.push_back(cs(b, 2e-3 + 1e-4 * b));
        const auto ml = tula::ComputeModel::fit(lin);
        CPPUNIT_ASSERT(!ml.interpolated);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2e-3 + 1e-4 * 1000, ml.seconds_per_iter(1000), 1e-12);
        // two batches: no interior knot, no cross-validation
        const auto m2 = tula::ComputeModel::fit({cs(16, 1e-3), cs(64, 4e-3)});
        CPPUNIT_ASSERT(!m2.interpolated);
        CPPUNIT_ASSERT(std::isnan(m2.loo_interpolated));
    }

    // ComputeModel::fit against ref_fit (above) on 50 random samples: repeated batches
    // (uncapped leave-one-out) and 50 distinct ones (kLooKnots of 48 interior knots), on a
    // floor-then-line, a convex and a straight truth with 1-3 % noise, some with a spike.
    void test_compute_fit_matches_reference() {
        std::mt19937 rng(77);
        int flat = 0, interpolated = 0;
        for (int trial = 0; trial < 60; ++trial) {
            const bool distinct = trial % 2;
            std::set<int> pool;
            while (pool.size() < (distinct ? 50u : 20u)) pool.insert(1 + static_cast<int>(rng() % 1024));
            const std::vector<int> batches(pool.begin(), pool.end());
            std::normal_distribution<double> noise(0.0, 0.01 * (1 + trial % 3));
            std::vector<tula::ComputeSample> s;
            std::vector<double> x, y;
            for (int i = 0; i < 50; ++i) {
                const int b = distinct ? batches[i] : batches[rng() % batches.size()];
                const double truth = trial % 3 == 0 ? std::max(0.03, 0.002 + 1e-4 * b)
                                     : trial % 3 == 1 ? 1e-3 + 2e-5 * b + 5e-8 * b * b
                                                      : 4e-3 + 6e-5 * b;
                // every fourth trial: one batch far off (a spike), which moves the best split of
                // the refits that leave it out
                const double spike = trial % 4 == 3 && b == batches[batches.size() / 3] ? 4.0 : 1.0;
                const double t = truth * (1 + noise(rng)) * spike;
                s.push_back(cs(b, t));
                x.push_back(b);
                y.push_back(t);
            }
            const auto m = tula::ComputeModel::fit(s);
            const RefModel r = ref_fit(x, y);
            const std::string at = "trial " + std::to_string(trial);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(at, r.flat, m.flat);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(at, r.interpolated, m.interpolated);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.t0, m.t0, 1e-9 * r.t0 + 1e-15);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.t1, m.t1, 1e-9 * r.t1 + 1e-15);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.t_min, m.t_min, 1e-9 * r.t_min);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.rmse, m.rmse, 1e-9 * r.rmse);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.aic_linear, m.aic_linear, 1e-9);
            CPPUNIT_ASSERT_MESSAGE(at, std::isinf(r.aic_flat) == std::isinf(m.aic_flat));
            if (std::isfinite(r.aic_flat)) CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.aic_flat, m.aic_flat, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.loo_interpolated, m.loo_interpolated, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.loo_parametric, m.loo_parametric, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL_MESSAGE(at, r.loo_rel_rms, m.loo_rel_rms, 1e-12);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(at, distinct ? tula::ComputeModel::kLooKnots : int(m.knots.size()) - 2,
                                         m.loo_points);
            flat += m.flat;
            interpolated += m.interpolated;
        }
        CPPUNIT_ASSERT(flat >= 10 && flat < 60 && interpolated >= 5 && interpolated < 60);  // both ways seen
    }

    void test_compute_matches_closed_form() {
        std::mt19937 rng(99);
        std::uniform_real_distribution<double> u(0.5, 1.5);
        std::vector<tula::ComputeSample> s;
        std::vector<double> x, y;
        for (int i = 0; i < 30; ++i) {
            const int b = 1 + static_cast<int>(rng() % 1000);
            const double t = 0.01 + 1e-4 * b * u(rng);
            s.push_back(cs(b, t));
            x.push_back(b);
            y.push_back(t);
        }
        double a = 0, b = 0;
        ols_line(x, y, &a, &b);
        CPPUNIT_ASSERT(a > 0 && b > 0);  // the unconstrained fit is feasible here
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(a, m.t0, 1e-9 * std::fabs(a) + 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(b, m.t1, 1e-9 * std::fabs(b));
        double sse = 0;
        for (size_t i = 0; i < x.size(); ++i) sse += std::pow(a + b * x[i] - y[i], 2);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(std::sqrt(sse / x.size()), m.rmse, 1e-12);
    }

    void test_compute_non_negative() {
        // A true negative intercept: the unconstrained fit says t0 < 0; the model fixes t0 = 0
        // and refits t1 through the origin: t1 = sum(b t) / sum(b^2).
        std::vector<tula::ComputeSample> s;
        std::vector<double> x, y;
        for (int b : {16, 32, 64, 128}) {
            const double t = -0.001 + 1e-4 * b;
            s.push_back(cs(b, t));
            x.push_back(b);
            y.push_back(t);
        }
        double a = 0, b = 0;
        ols_line(x, y, &a, &b);
        CPPUNIT_ASSERT(a < 0);
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(0.0, m.t0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(slope_through_origin(x, y), m.t1, 1e-12);
        // Time falling with batch (noise): slope fixed at 0, t0 = mean time.
        const auto f = tula::ComputeModel::fit({cs(16, 0.03), cs(32, 0.02)});
        CPPUNIT_ASSERT_EQUAL(0.0, f.t1);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.025, f.t0, 1e-15);
    }

    void test_compute_errors() {
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(32, 0.11), cs(32, 0.09)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, 0.0)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, -1.0)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, NAN)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, INFINITY)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(0, 0.1)}); }));
        CPPUNIT_ASSERT(!throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, 0.2)}); }));
        try {
            tula::ComputeModel::fit({cs(32, 0.1)});
        } catch (const tula::Error& e) {
            CPPUNIT_ASSERT_MESSAGE(e.what(), std::string(e.what()).find("tula profile compute") != std::string::npos);
        }
    }

    void test_allreduce_recovers_parameters() {
        const double alpha = 30e-6, beta = 1.0 / 1.2e9;  // 30 us per step, 1.2 GB/s
        std::mt19937 rng(77);
        std::normal_distribution<double> noise(0.0, 0.02);
        std::vector<tula::AllreduceSample> s;
        std::vector<double> u, v, y;
        for (int rep = 0; rep < 3; ++rep)
            for (int k : {1, 2, 3, 4, 8})
                for (int64_t n : {int64_t(256), int64_t(65536), int64_t(1) << 20, int64_t(4) << 20}) {
                    const double truth = k == 1 ? 0.0 : 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * n * beta;
                    const double t = truth * (1 + noise(rng));
                    s.push_back(as(k, n, t));
                    if (k > 1) {  // 1-node samples carry no information
                        u.push_back(2.0 * (k - 1));
                        v.push_back(2.0 * (k - 1) / k * n);
                        y.push_back(t);
                    }
                }
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(alpha, m.alpha, 0.1 * alpha);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(beta, m.beta, 0.02 * beta);
        double p = 0, q = 0;
        ols_two(u, v, y, &p, &q);
        CPPUNIT_ASSERT(p > 0 && q > 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(p, m.alpha, 1e-6 * p);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(q, m.beta, 1e-6 * q);
        CPPUNIT_ASSERT(m.rmse > 0);
    }

    void test_allreduce_non_negative() {
        // Seconds that fall with the step count at a fixed volume push alpha below 0: the fit
        // fixes alpha = 0 and refits beta alone: beta = sum(v t) / sum(v^2).
        std::vector<tula::AllreduceSample> s;
        std::vector<double> u, v, y;
        const double beta = 1e-9;
        for (int k : {2, 4, 8})
            for (int64_t n : {int64_t(1) << 20, int64_t(8) << 20}) {
                const double vol = 2.0 * (k - 1) / k * n;
                const double t = vol * beta - 2.0 * (k - 1) * 5e-5;
                CPPUNIT_ASSERT(t > 0);
                s.push_back(as(k, n, t));
                u.push_back(2.0 * (k - 1));
                v.push_back(vol);
                y.push_back(t);
            }
        double p = 0, q = 0;
        ols_two(u, v, y, &p, &q);
        CPPUNIT_ASSERT(p < 0);
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(0.0, m.alpha);
        const double want = slope_through_origin(v, y);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(want, m.beta, 1e-9 * want);
        // and a negative beta (time shrinking with size) gives beta = 0, alpha = mean(t / u)-ish fit
        const auto m2 = tula::AllreduceModel::fit({as(2, 1000, 2e-4), as(2, 100000, 1e-4)});
        CPPUNIT_ASSERT_EQUAL(0.0, m2.beta);
        CPPUNIT_ASSERT_DOUBLES_EQUAL((2e-4 + 1e-4) / 2 / 2, m2.alpha, 1e-15);
    }

    void test_allreduce_formula() {
        tula::AllreduceModel m;
        m.alpha = 1e-5;
        m.beta = 2e-9;
        CPPUNIT_ASSERT_EQUAL(0.0, m.seconds(1, 1e6));
        CPPUNIT_ASSERT_EQUAL(0.0, m.seconds(0, 1e6));
        for (int k = 2; k <= 16; ++k) {
            const double n = 246824.0;  // 4 * 61706 bytes, LeNet-5's gradient
            const double want = 2.0 * (k - 1) * 1e-5 + 2.0 * (k - 1) / k * n * 2e-9;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, m.seconds(k, n), 1e-15);
        }
    }

    // A node count profiled at >= 2 message sizes is predicted from its own measurements
    // (median per size, linear in bytes between sizes, held below the smallest, the last
    // slope above the largest); other node counts from the fitted formula. Values by hand.
    void test_allreduce_measured_node_counts() {
        // 2 ranks: cheap (one host); 4 ranks: expensive per step (oversubscribed); 3 ranks: one size only
        std::vector<tula::AllreduceSample> s{as(2, 1000, 1e-4),  as(2, 1000, 3e-4),  as(2, 1000, 2e-4),
                                             as(2, 100000, 5e-4), as(2, 200000, 9e-4), as(4, 1000, 1e-2),
                                             as(4, 200000, 2e-2),  as(3, 1000, 5e-3)};
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, m.measured.size());  // 2 and 4; 3 has one size
        CPPUNIT_ASSERT(m.measured.count(3) == 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2e-4, m.seconds(2, 1000), 1e-15);    // median of three
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2e-4, m.seconds(2, 10), 1e-15);      // held below
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2e-4 + (5e-4 - 2e-4) * (50000 - 1000) / 99000.0, m.seconds(2, 50000), 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(7e-4, m.seconds(2, 150000), 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(9e-4 + 4e-9 * 100000, m.seconds(2, 300000), 1e-15);  // last slope 4e-9 s/B
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1e-2 + (1e-2 / 199000.0) * 99000, m.seconds(4, 100000), 1e-12);
        // unmeasured (or single-size) node counts: the alpha-beta formula
        for (int k : {3, 8})
            CPPUNIT_ASSERT_DOUBLES_EQUAL(m.modelled_seconds(k, 50000), m.seconds(k, 50000), 1e-15);
        const double K = 8, steps = m.algorithm == tula::AllreduceModel::Algorithm::Ring ? 2 * (K - 1) : 2 * 3.0;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(steps * m.alpha + 2 * (K - 1) / K * 50000 * m.beta, m.seconds(8, 50000), 1e-15);
        CPPUNIT_ASSERT_EQUAL(0.0, m.seconds(1, 50000));
        // the formula alone could not follow both: at 2 ranks it is off by more than 2x somewhere
        double worst = 0;
        for (double n : {1000.0, 100000.0, 200000.0}) worst = std::max(worst, m.modelled_seconds(2, n) / m.seconds(2, n));
        CPPUNIT_ASSERT(worst > 2.0);
    }

    // An unmeasured node count is not faster than the most nodes measured below it: 2 ranks
    // measured slow, 4 fast, the one formula over both in between; 3 takes 2's measurement where
    // the formula is below it, 5 and 8 take 4's or the formula's, whichever is larger. Fails
    // without the bound (3 ranks faster than 2 at the same bytes).
    void test_allreduce_not_faster_than_fewer_nodes() {
        const std::vector<tula::AllreduceSample> s{as(2, 1000, 5e-3), as(2, 100000, 6e-3), as(4, 1000, 1e-4),
                                                   as(4, 100000, 2e-4)};
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, m.measured.size());
        for (double n : {1000.0, 50000.0, 100000.0}) {
            CPPUNIT_ASSERT(m.modelled_seconds(3, n) < m.seconds(2, n));  // the case the bound is for
            CPPUNIT_ASSERT_DOUBLES_EQUAL(m.seconds(2, n), m.seconds(3, n), 0.0);
            for (int k : {5, 8})
                CPPUNIT_ASSERT_DOUBLES_EQUAL(std::max(m.modelled_seconds(k, n), m.seconds(4, n)), m.seconds(k, n), 0.0);
        }
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5e-3 + 1e-3 * 49000 / 99000.0, m.seconds(3, 50000), 1e-15);  // 2's, by hand
    }

    void test_allreduce_errors() {
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(1, 1000, 0.0), as(1, 2000, 0.0)}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(3, 1000, NAN)}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(3, -5, 1e-4)}); }));
        CPPUNIT_ASSERT(!throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(3, 1000, 2e-4)}); }));
    }

    // One (nodes, bytes) point measured three times: the ring's bandwidth term alone through
    // the median, written out here: T(K, n) = 2 (K-1)/K n beta with T(2, n0) = t; at 0 bytes
    // the latency term alone: T(K, 0) = 2 (K-1) alpha.
    void test_allreduce_one_point() {
        const double t = 1.1e-3, n0 = 4e6;
        const auto m = tula::AllreduceModel::fit({as(2, 4000000, 1.0e-3), as(2, 4000000, t), as(2, 4000000, 1.3e-3)});
        CPPUNIT_ASSERT_EQUAL(0.0, m.alpha);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t / n0, m.beta, 1e-12 * t / n0);  // 2 (2-1)/2 = 1
        CPPUNIT_ASSERT_EQUAL(3, m.samples);
        CPPUNIT_ASSERT(!m.note.empty());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t, m.seconds(2, n0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5 * t, m.seconds(4, n0), 1e-12);       // 2 (4-1)/4 = 1.5
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.75 * t, m.seconds(4, n0 / 2), 1e-12);  // half the bytes
        const auto z = tula::AllreduceModel::fit({as(3, 0, 4e-5)});
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1e-5, z.alpha, 1e-18);  // 2 (3-1) alpha = 4e-5
        CPPUNIT_ASSERT_EQUAL(0.0, z.beta);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(6e-5, z.seconds(4, 0), 1e-18);
        // two points are a full fit, without a note
        CPPUNIT_ASSERT(tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(2, 2000, 1.5e-4)}).note.empty());
    }

    void test_compute_flat_then_linear() {
        // Known floor 20 ms up to the join, then 1 ms + 0.1 ms per example; 1 % noise.
        const double tmin = 0.02, t0 = 0.001, t1 = 1e-4;
        std::mt19937 rng(5);
        std::normal_distribution<double> noise(0.0, 0.01);
        std::vector<tula::ComputeSample> s;
        for (int rep = 0; rep < 3; ++rep)
            for (int b : {4, 8, 16, 32, 64, 128, 256, 512, 1024})
                s.push_back(cs(b, std::max(tmin, t0 + t1 * b) * (1 + noise(rng))));
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT(m.flat);
        CPPUNIT_ASSERT(m.aic_flat < m.aic_linear - 2);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(tmin, m.t_min, 0.02 * tmin);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t1, m.t1, 0.03 * t1);
        for (int b : {4, 100, 700})
            CPPUNIT_ASSERT_DOUBLES_EQUAL(std::max(tmin, t0 + t1 * b), m.seconds_per_iter(b), 0.03 * std::max(tmin, t0 + t1 * b));
        // The same batches on a straight line: the linear form wins (fewer parameters).
        std::vector<tula::ComputeSample> l;
        for (int rep = 0; rep < 3; ++rep)
            for (int b : {4, 8, 16, 32, 64, 128, 256, 512, 1024}) l.push_back(cs(b, (t0 + t1 * b) * (1 + noise(rng))));
        const auto ml = tula::ComputeModel::fit(l);
        CPPUNIT_ASSERT(!ml.flat);
        CPPUNIT_ASSERT_EQUAL(std::string("linear"), std::string(ml.form()));
    }

    void test_compute_interval() {
        // Independent reference: the textbook interval from the normal equations, and the
        // coverage of fresh draws (95 % nominal) over many synthetic data sets.
        const double t0 = 0.01, t1 = 2e-4, sd = 0.002;
        std::mt19937 rng(11);
        std::normal_distribution<double> noise(0.0, sd);
        int inside = 0;
        const int trials = 400;
        for (int trial = 0; trial < trials; ++trial) {
            std::vector<tula::ComputeSample> s;
            std::vector<double> x, y;
            for (int b : {16, 32, 64, 128, 256, 16, 64, 256}) {
                const double t = t0 + t1 * b + noise(rng);
                s.push_back(cs(b, t));
                x.push_back(b);
                y.push_back(t);
            }
            const auto m = tula::ComputeModel::fit(s);
            if (trial == 0) {
                double a = 0, bb = 0;
                ols_line(x, y, &a, &bb);
                double sse = 0, mx = 0, sxx = 0;
                for (size_t i = 0; i < x.size(); ++i) {
                    sse += std::pow(a + bb * x[i] - y[i], 2);
                    mx += x[i] / x.size();
                }
                for (double v : x) sxx += (v - mx) * (v - mx);
                const double n = x.size(), se = std::sqrt(sse / (n - 2));
                const double x0 = 100;
                const double want = 2.446911851 * se * std::sqrt(1 + 1 / n + (x0 - mx) * (x0 - mx) / sxx);  // t_{0.975,6}
                CPPUNIT_ASSERT_DOUBLES_EQUAL(want, m.interval(x0), 1e-6 * want);
            }
            const double b0 = 100, fresh = t0 + t1 * b0 + noise(rng);
            if (std::fabs(fresh - m.seconds_per_iter(b0)) <= m.interval(b0)) ++inside;
        }
        CPPUNIT_ASSERT_MESSAGE(std::to_string(inside), inside > 0.91 * trials && inside < 0.99 * trials);
    }

    void test_allreduce_rabenseifner() {
        const double alpha = 50e-6, beta = 1e-9;
        std::mt19937 rng(3);
        std::normal_distribution<double> noise(0.0, 0.01);
        std::vector<tula::AllreduceSample> s;
        for (int k : {2, 4, 8, 16, 32, 64})
            for (int64_t n : {int64_t(1024), int64_t(1) << 16, int64_t(1) << 20}) {
                const double truth = 2.0 * std::ceil(std::log2(k)) * alpha + 2.0 * (k - 1) / k * n * beta;
                s.push_back(as(k, n, truth * (1 + noise(rng))));
            }
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT(m.algorithm == tula::AllreduceModel::Algorithm::Rabenseifner);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(alpha, m.alpha, 0.05 * alpha);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(beta, m.beta, 0.05 * beta);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0 * 7 * m.alpha + 2.0 * 99 / 100 * 1e6 * m.beta, m.seconds(100, 1e6), 1e-15);
        // Two node counts only: ring is kept.
        const auto r = tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(4, 1000, 3e-4), as(4, 100000, 5e-4)});
        CPPUNIT_ASSERT(r.algorithm == tula::AllreduceModel::Algorithm::Ring);
    }
};


CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaModelsTest);
