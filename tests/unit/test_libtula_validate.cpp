// Unit tests of the leave-one-out validation (validate.hpp): exact synthetic data gives 0 %
// error; a known perturbation gives the MAPE a naive computation gives.
#include <cppunit/extensions/HelperMacros.h>

#include <gsl/gsl_cdf.h>

#include <cmath>
#include <string>
#include <vector>

#include "tula/error.hpp"
#include "tula/planner.hpp"
#include "tula/predict.hpp"
#include "tula/validate.hpp"
#include "models_fixtures.hpp"
#include "record_builders.hpp"

namespace {

using models_test::wl;

tula::ComputeSample cs(int b, double t) {
    tula::ComputeSample s;
    s.workload = "w@d";
    s.local_batch = b;
    s.seconds_per_iter = t;
    return s;
}

// The profile-side time models of wl() from `c` and `a`, with the corrections named in `off`
// switched off (Corrections::without).
tula::TimeModels models(const std::vector<tula::ComputeSample>& c, const std::vector<tula::AllreduceSample>& a,
                        const std::string& off = "") {
    return tula::fit_profile_models(tula::Config{}, wl(), c, a, tula::Corrections::without(off), nullptr);
}

}  // namespace

class LibtulaValidateTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaValidateTest);
    CPPUNIT_TEST(test_exact_data);
    CPPUNIT_TEST(test_known_error);
    CPPUNIT_TEST(test_partial_and_errors);
    CPPUNIT_TEST(test_check_runs_interval_vs_naive);
    CPPUNIT_TEST(test_check_runs_is_the_plan_prediction);
    CPPUNIT_TEST(test_corrections_without);
    CPPUNIT_TEST(test_within_node_allreduce);
    CPPUNIT_TEST(test_synced_profile_of_two_ranks_per_node);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_exact_data() {
        const double t0 = 1e-3, t1 = 1e-4, alpha = 1e-4, beta = 1e-9;
        std::vector<tula::ComputeSample> c;
        for (int b : {8, 16, 32, 64, 128}) c.push_back(cs(b, t0 + t1 * b));
        const std::vector<tula::AllreduceSample> a = models_test::ring_samples(alpha, beta);
        std::vector<tula::RunRecord> runs;
        for (int k : {1, 2, 4}) {
            tula::RunRecord r;
            r.nodes = k;
            r.global_batch = 64 * k;
            r.epochs = 2;
            const double tm = k > 1 ? 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * 4000 * beta : 0;
            r.measured_seconds = 2 * std::floor(6000.0 / r.global_batch) * (t0 + t1 * 64 + tm);
            runs.push_back(r);
        }
        const auto v = tula::validate_workload(tula::Config{}, wl(), c, a, runs, false, 2.0);
        CPPUNIT_ASSERT_EQUAL(size_t(5 + 3), v.points.size());
        CPPUNIT_ASSERT(v.mape_epoch_time < 1e-6);
        CPPUNIT_ASSERT(v.mape_cost < 1e-6);
    }

    void test_known_error() {
        // A run measured 10 % slower than the exact model: MAPE = 10 % / number of points.
        std::vector<tula::ComputeSample> c;
        for (int b : {16, 32}) c.push_back(cs(b, 1e-3 + 1e-4 * b));
        tula::RunRecord r = tula_test::run_record("", "", 1, 64, 1, 1.1 * std::floor(6000.0 / 64) * (1e-3 + 1e-4 * 64), 0);
        const auto v = tula::validate_workload(tula::Config{}, wl(), c, {}, {r}, false, 1.0);
        CPPUNIT_ASSERT_EQUAL(size_t(1), v.points.size());  // 2 batches: no compute leave-one-out
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100.0 * (1 - 1 / 1.1), v.mape_epoch_time, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(v.mape_epoch_time, v.mape_cost, 1e-9);
        CPPUNIT_ASSERT(!v.notes.empty());
        // A --limit-train run of 600 examples per epoch (schema 3): its epochs have
        // floor(600/64) = 9 steps, not the workload's floor(6000/64) = 93.
        tula::RunRecord small = r;
        small.train_examples = 600;
        small.measured_seconds = 1.1 * std::floor(600.0 / 64) * (1e-3 + 1e-4 * 64);
        const auto vs = tula::validate_workload(tula::Config{}, wl(), c, {}, {small}, false, 1.0);
        CPPUNIT_ASSERT_EQUAL(size_t(1), vs.points.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(std::floor(600.0 / 64) * (1e-3 + 1e-4 * 64), vs.points[0].predicted_epoch_seconds, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100.0 * (1 - 1 / 1.1), vs.mape_epoch_time, 1e-9);
    }

    // A run of 2 ranks on one node: its step holds the within-node allreduce 2 (R-1)/R n / bw,
    // which validation models at the bandwidth fitted to the within-node samples, and leaves
    // out (0) without them.
    void test_within_node_allreduce() {
        const double t0 = 1e-3, t1 = 1e-4, bw = 1e6, n = 4000;  // grad bytes: 4 x 1000 params
        std::vector<tula::ComputeSample> c;
        for (int b : {16, 32, 64, 128}) c.push_back(cs(b, t0 + t1 * b));
        const double steps = std::floor(6000.0 / 128);
        const double comm = 2.0 * (2 - 1) / 2 * n / bw;  // 4 ms
        tula::RunRecord r = tula_test::run_record("", "", 1, 128, 1, steps * (t0 + t1 * 64 + comm), 0);
        r.ranks_per_node = 2;
        std::vector<tula::AllreduceSample> a;
        for (int64_t bytes : {int64_t(10000), int64_t(1000000)}) {
            tula::AllreduceSample s;
            s.nodes = 1;
            s.ranks_per_node = 2;
            s.bytes = bytes;
            s.seconds = 1e-5 + 2.0 * (2 - 1) / 2 * bytes / bw;
            a.push_back(s);
        }
        auto run_point = [](const tula::ValidationResult& v) {
            for (const auto& p : v.points)
                if (p.kind == "run") return p;
            CPPUNIT_FAIL("no run point");
            return tula::ValidationPoint{};
        };
        const auto with = run_point(tula::validate_workload(tula::Config{}, wl(), c, a, {r}, false, 1.0));
        CPPUNIT_ASSERT_EQUAL(2, with.ranks_per_node);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(r.measured_seconds, with.predicted_epoch_seconds, 1e-9);
        const auto without = run_point(tula::validate_workload(tula::Config{}, wl(), c, {}, {r}, false, 1.0));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(steps * (t0 + t1 * 64), without.predicted_epoch_seconds, 1e-9);
    }

    // Runs of 2 ranks per node on 1-3 nodes whose measured steps are the synchronized steps
    // the compute profile timed for exactly those shapes (each a different multiple of the
    // modelled step, as on the testbed): each run's predicted epoch is its measured one, the
    // profile of its own shape serving (not the other shapes' runs' calibration).
    void test_synced_profile_of_two_ranks_per_node() {
        const double t0 = 1e-3, t1 = 1e-4, bw = 1e8;
        std::vector<tula::ComputeSample> c;
        for (int b : {16, 32, 64, 128}) c.push_back(cs(b, t0 + t1 * b));
        const double synced[] = {0, 5e-3, 7e-3, 10e-3};  // K nodes x 2 ranks at local batch 32
        std::vector<tula::RunRecord> runs;
        for (int K : {1, 2, 3}) {
            tula::ComputeSample s = cs(32, t0 + t1 * 32);
            s.ranks = 2 * K;
            s.ranks_per_node = 2;
            s.synced_seconds_per_iter = synced[K];
            c.push_back(s);
            const int B = 64 * K;
            tula::RunRecord r = tula_test::run_record(std::to_string(K), "", K, B, 1, std::floor(6000.0 / B) * synced[K], K);
            r.ranks_per_node = 2;
            runs.push_back(r);
        }
        std::vector<tula::AllreduceSample> a;
        auto add = [&](int nodes, int R, int64_t bytes, double secs) {
            tula::AllreduceSample s;
            s.nodes = nodes;
            s.ranks_per_node = R;
            s.bytes = bytes;
            s.seconds = secs;
            a.push_back(s);
        };
        for (int64_t bytes : {int64_t(10000), int64_t(1000000)}) {
            add(1, 2, bytes, 1e-5 + bytes / bw);  // within the node: 2 (R-1)/R n / bw
            for (int k : {2, 4}) add(k, 1, bytes, 2.0 * (k - 1) * 1e-4 + 2.0 * (k - 1) / k * bytes * 1e-9);
        }
        const auto v = tula::validate_workload(tula::Config{}, wl(), c, a, runs, false, 1.0);
        int checked = 0;
        for (const auto& p : v.points) {
            if (p.kind != "run") continue;
            ++checked;
            CPPUNIT_ASSERT_EQUAL(2, p.ranks_per_node);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(p.measured_epoch_seconds, p.predicted_epoch_seconds,
                                         0.01 * p.measured_epoch_seconds);
        }
        CPPUNIT_ASSERT_EQUAL(3, checked);
    }

    void test_partial_and_errors() {
        std::vector<tula::ComputeSample> c;
        for (int b : {8, 16, 32, 64}) c.push_back(cs(b, 1e-3 + 1e-4 * b));
        const auto v = tula::validate_workload(tula::Config{}, wl(), c, {}, {}, true, 1.0);
        CPPUNIT_ASSERT(v.points.empty());  // 2 batches left, no runs
        CPPUNIT_ASSERT(std::isnan(v.mape_epoch_time));
        tula::Workload w = wl();
        w.train_examples = 0;
        bool threw = false;
        try {
            tula::validate_workload(tula::Config{}, w, c, {}, {}, false, 1.0);
        } catch (const tula::Error&) {
            threw = true;
        }
        CPPUNIT_ASSERT(threw);
    }

    // Online refit flagging: single-node runs against the interval of the linear compute fit,
    // recomputed here with the textbook formulas (closed-form least squares, leverage
    // 1/n + (b - mean)^2 / Sxx, Student t from GSL): a run at the model's time is inside, runs
    // 50 % slower or faster are flagged; max_checked keeps the newest; job_id filters. The
    // runs' time calibration is switched off here, so that the textbook interval applies
    // (test_check_runs_is_the_plan_prediction covers it).
    void test_check_runs_interval_vs_naive() {
        std::vector<tula::ComputeSample> c;
        // +-x pairs: each batch's median lies on the line, so the interpolated form (if chosen)
        // predicts what the fitted line does and the naive formulas below apply
        const double noise[] = {0.01, -0.01, 0.012, -0.012, 0.004, -0.004, 0.009, -0.009, 0.011, -0.011};
        int k = 0;
        for (int b : {8, 16, 32, 64, 128})
            for (int rep = 0; rep < 2; ++rep) c.push_back(cs(b, (1e-3 + 1e-4 * b) * (1 + noise[k++])));
        // Naive OLS and prediction interval.
        const double n = static_cast<double>(c.size());
        double mx = 0, my = 0;
        for (const auto& x : c) {
            mx += x.local_batch / n;
            my += x.seconds_per_iter / n;
        }
        double sxx = 0, sxy = 0;
        for (const auto& x : c) {
            sxx += (x.local_batch - mx) * (x.local_batch - mx);
            sxy += (x.local_batch - mx) * (x.seconds_per_iter - my);
        }
        const double t1 = sxy / sxx, t0 = my - t1 * mx;
        double sse = 0;
        for (const auto& x : c) sse += std::pow(x.seconds_per_iter - t0 - t1 * x.local_batch, 2);
        const double sd = std::sqrt(sse / (n - 2));
        const double q = gsl_cdf_tdist_Pinv(0.975, n - 2);
        auto run = [](const char* id, int B, double factor, double created) {
            tula::RunRecord r = tula_test::run_record(id, "", 1, B, 2, factor * 2 * std::floor(6000.0 / B) * (1e-3 + 1e-4 * B), created);
            return r;
        };
        std::vector<tula::RunRecord> runs = {run("1", 64, 1.0, 100), run("2", 32, 1.5, 200), run("3", 100, 0.5, 300)};
        tula::RunRecord multi = run("4", 64, 1.0, 400);
        multi.nodes = 2;  // no allreduce profile: not checked
        runs.push_back(multi);
        // the compute model's interval: the runs' step model off (it would carry their 1.5 and 0.5)
        const auto checks = tula::check_runs(models(c, {}, "calibration,run-fit"), runs, 10);
        CPPUNIT_ASSERT_EQUAL(size_t{3}, checks.size());
        // Newest first.
        CPPUNIT_ASSERT_EQUAL(std::string("3"), checks[0].job_id);
        CPPUNIT_ASSERT_EQUAL(std::string("2"), checks[1].job_id);
        CPPUNIT_ASSERT_EQUAL(std::string("1"), checks[2].job_id);
        for (const auto& ch : checks) {
            const double b = ch.global_batch;
            const double h = q * sd * std::sqrt(1 + 1 / n + (b - mx) * (b - mx) / sxx);
            const double it = 2 * std::floor(6000.0 / b);
            CPPUNIT_ASSERT(ch.has_interval);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(it * (t0 + t1 * b), ch.predicted_seconds, ch.predicted_seconds * 1e-9);
            // one node: the step is all compute, no start-up profiled
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t0 + t1 * b, ch.compute_step_seconds, (t0 + t1 * b) * 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, ch.exposed_comm_step_seconds, 0.0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, ch.overhead_step_seconds, 0.0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(it * (t0 + t1 * b - h), ch.lower_seconds, ch.predicted_seconds * 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(it * (t0 + t1 * b + h), ch.upper_seconds, ch.predicted_seconds * 1e-9);
            const bool outside = ch.measured_seconds < it * (t0 + t1 * b - h) || ch.measured_seconds > it * (t0 + t1 * b + h);
            CPPUNIT_ASSERT_EQUAL(outside, ch.flagged);
        }
        CPPUNIT_ASSERT(!checks[2].flagged);  // at the model's time
        CPPUNIT_ASSERT(checks[1].flagged);   // 50 % slower
        CPPUNIT_ASSERT(checks[0].flagged);   // 50 % faster
        CPPUNIT_ASSERT_EQUAL(size_t{2}, tula::check_runs(models(c, {}, "calibration,run-fit"), runs, 2).size());
        const auto only = tula::check_runs(models(c, {}, "calibration,run-fit"), runs, 10, 0.95, "2");
        CPPUNIT_ASSERT_EQUAL(size_t{1}, only.size());
        CPPUNIT_ASSERT_EQUAL(std::string("2"), only[0].job_id);
        // Two compute samples at two batches and the runs' step model off: no residual degrees
        // of freedom, no flag.
        const auto none = tula::check_runs(models({cs(16, 2.6e-3), cs(32, 4.2e-3)}, {}, "run-fit"), runs, 10);
        for (const auto& ch : none) CPPUNIT_ASSERT(!ch.has_interval && !ch.flagged);
    }

    // One prediction: a run checked against the models without it (check_runs), the same run
    // held out by validate_workload, and the planner's candidate of its shape planned from the
    // other runs (make_site_plan with their overlap, calibration and step model) predict the same seconds, time
    // calibration (switched on) and all. Reference: Predictor::run on fit_time_models of the
    // other runs.
    void test_check_runs_is_the_plan_prediction() {
        std::vector<tula::ComputeSample> c;
        for (int b : {8, 16, 32, 64, 128}) c.push_back(cs(b, 1e-3 + 1e-4 * b));
        // three runs, each slower than the model by its own factor: the calibration is not 1
        std::vector<tula::RunRecord> runs = {
            tula_test::run_record("1", "", 1, 64, 2, 1.2 * 2 * std::floor(6000.0 / 64) * (1e-3 + 1e-4 * 64), 100),
            tula_test::run_record("2", "", 1, 32, 2, 1.3 * 2 * std::floor(6000.0 / 32) * (1e-3 + 1e-4 * 32), 200),
            tula_test::run_record("3", "", 1, 128, 2, 1.1 * 2 * std::floor(6000.0 / 128) * (1e-3 + 1e-4 * 128), 300)};
        const tula::Corrections cal = tula::Corrections::select("calibration", "");
        const auto checks =
            tula::check_runs(tula::fit_profile_models(tula::Config{}, wl(), c, {}, cal, nullptr), runs, 10);
        CPPUNIT_ASSERT_EQUAL(size_t{3}, checks.size());
        const auto v = tula::validate_workload(tula::Config{}, wl(), c, {}, runs, false, 1.0, cal);
        for (const auto& ch : checks) {
            std::vector<tula::RunRecord> others;
            const tula::RunRecord* self = nullptr;
            for (const auto& r : runs) {
                if (r.job_id == ch.job_id) self = &r;
                else others.push_back(r);
            }
            const tula::TimeModels m = tula::fit_time_models(tula::Config{}, wl(), c, {}, others, cal, nullptr);
            CPPUNIT_ASSERT(m.calibration.runs > 0);
            const double want = tula::Predictor(m, m.run_target("")).run(*self).seconds;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, ch.predicted_seconds, 1e-9 * want);
            // the naive step without the calibration differs: the check includes it
            CPPUNIT_ASSERT(std::fabs(want - 2 * std::floor(6000.0 / ch.global_batch) * (1e-3 + 1e-4 * ch.global_batch)) >
                           1e-3 * want);
            bool found = false;
            for (const auto& p : v.points)
                if (p.kind == "run" && p.global_batch == ch.global_batch) {
                    CPPUNIT_ASSERT_DOUBLES_EQUAL(want / 2, p.predicted_epoch_seconds, 1e-9 * want);
                    found = true;
                }
            CPPUNIT_ASSERT(found);
            // the planner's candidate of the same shape, planned with the other runs' models
            tula::PlanRequest req;
            req.workload = wl();
            req.epochs = 2;
            req.fixed_epochs = true;
            req.global_batches = {ch.global_batch};
            req.overlap = m.overlap;
            req.calibration = m.calibration;
            req.step_fits = m.step_fits;
            const tula::Plan plan = tula::make_site_plan(req, {tula::implicit_target(req, m.compute, nullptr)});
            CPPUNIT_ASSERT_EQUAL(size_t{1}, plan.candidates.size());
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, plan.candidates[0].total_seconds, 1e-9 * want);
        }
    }

    // Corrections::without: the names switch their correction off; a bad name is refused
    // with the list of valid ones.
    void test_corrections_without() {
        // the defaults: every correction but the time calibration (docs/models.md, Corrections)
        const tula::Corrections all = tula::Corrections::without("");
        CPPUNIT_ASSERT(all.concurrency && all.synced_step && !all.calibration && all.class_scaling);
        const tula::Corrections some = tula::Corrections::without("synced-step,class-scaling");
        CPPUNIT_ASSERT(some.concurrency && !some.synced_step && !some.calibration && !some.class_scaling);
        const tula::Corrections on = tula::Corrections::select("calibration", "concurrency");
        CPPUNIT_ASSERT(!on.concurrency && on.synced_step && on.calibration && on.class_scaling);
        bool both = false;
        try {
            tula::Corrections::select("calibration", "calibration");
        } catch (const tula::Error& e) {
            both = std::string(e.what()).find("both") != std::string::npos;
        }
        CPPUNIT_ASSERT(both);
        bool threw = false;
        try {
            tula::Corrections::without("calibration,overlap");
        } catch (const tula::Error& e) {
            threw = std::string(e.what()).find("'overlap'") != std::string::npos &&
                    std::string(e.what()).find("class-scaling") != std::string::npos;
        }
        CPPUNIT_ASSERT(threw);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaValidateTest);
