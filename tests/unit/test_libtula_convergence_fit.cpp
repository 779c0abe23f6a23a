// Unit tests of the critical-batch fit (convergence_fit.hpp): epochs-to-target tables drawn
// from McCandlish et al.'s E(B) = E_min (1 + B/B_crit) with multiplicative noise, rounded up
// to whole epochs as a per-epoch evaluation sees them; the reference is the generating
// parameters and the drawn table, never a figure of the code under test.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "record_builders.hpp"
#include "tula/convergence_fit.hpp"
#include "tula/error.hpp"

namespace {

// Global batches of an ImageNet-scale study, about 1.6K to 68K.
const std::vector<int> kStudyBatches = {1600, 2048, 3200, 4096, 6400, 8192, 12800, 16384, 32768, 49152, 65536, 68000};

// A table drawn from E(B) = e_min (1 + B / b_crit) x exp(N(0, sigma)), `per_batch` runs at
// each batch, each the first whole epoch at or past the drawn value.
std::vector<tula::EpochsToTarget> draw_table(double e_min, double b_crit, double sigma, unsigned seed,
                                             const std::vector<int>& batches = kStudyBatches, int per_batch = 1,
                                             const std::string& optimizer = "sgd") {
    std::mt19937 rng(seed);
    std::normal_distribution<double> noise(0.0, sigma);
    std::vector<tula::EpochsToTarget> t;
    for (int b : batches)
        for (int k = 0; k < per_batch; ++k)
            t.push_back({b, std::ceil(e_min * (1.0 + b / b_crit) * std::exp(noise(rng))), optimizer});
    return t;
}

// A run whose per-epoch test accuracy first reaches `target` at epoch `hit` (1-based) and
// trains `extra` epochs past it.
tula::RunRecord run_crossing(const std::string& workload, int batch, int hit, double target, int extra = 2,
                             const std::string& optimizer = "sgd") {
    tula::RunRecord r = tula_test::run_record("j", workload, 1, batch, hit + extra, 100.0, 1.7e9);
    r.optimizer = optimizer;
    for (int e = 1; e <= hit + extra; ++e) r.epoch_test_accuracy.push_back(target + 0.002 * (e - hit) - (e < hit ? 0.01 : 0));
    r.test_accuracy = r.epoch_test_accuracy.back();
    return r;
}

double rel_err(double got, double want) { return std::fabs(got / want - 1.0); }

}  // namespace

class LibtulaConvergenceFitTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaConvergenceFitTest);
    CPPUNIT_TEST(test_recovers_generating_parameters);
    CPPUNIT_TEST(test_leave_one_out_mape);
    CPPUNIT_TEST(test_extrapolates_from_small_batches);
    CPPUNIT_TEST(test_bootstrap_reproducible_and_covers);
    CPPUNIT_TEST(test_bad_points_refused);
    CPPUNIT_TEST(test_selection_of_runs);
    CPPUNIT_TEST(test_history_model);
    CPPUNIT_TEST(test_accuracy_of_comparable_runs);
    CPPUNIT_TEST(test_target_from_reference_batch);
    CPPUNIT_TEST_SUITE_END();

public:
    // Many noisy runs per batch: the fit lands near the generating E_min and B_crit.
    void test_recovers_generating_parameters() {
        for (auto [e_min, b_crit] : {std::pair<double, double>{30, 12000}, {18, 30000}, {60, 4000}}) {
            const auto t = draw_table(e_min, b_crit, 0.03, static_cast<unsigned>(b_crit), kStudyBatches, 8);
            const tula::CriticalBatchFit f = tula::fit_critical_batch(t, 0);
            // whole epochs add up to +1 epoch (half of it on average): E_min is high by ~1/2 epoch
            CPPUNIT_ASSERT_MESSAGE(std::to_string(f.e_min), rel_err(f.e_min, e_min) < 0.08);
            CPPUNIT_ASSERT_MESSAGE(std::to_string(f.b_crit), rel_err(f.b_crit, b_crit) < 0.10);
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(t.size()), f.runs);
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(kStudyBatches.size()), f.batches);
            CPPUNIT_ASSERT(f.rms_rel < 0.08);
        }
    }

    // Leave one run (one table row) out, fit the rest, predict it: mean absolute percentage
    // error at most 7 %, for several generating parameters and noise draws.
    void test_leave_one_out_mape() {
        unsigned seed = 1;
        for (auto [e_min, b_crit] : {std::pair<double, double>{30, 12000}, {18, 30000}, {40, 8000}, {25, 20000}}) {
            for (int draw = 0; draw < 3; ++draw) {
                const auto t = draw_table(e_min, b_crit, 0.04, seed++);
                double sum = 0;
                for (size_t i = 0; i < t.size(); ++i) {
                    std::vector<tula::EpochsToTarget> rest = t;
                    rest.erase(rest.begin() + static_cast<long>(i));
                    const tula::CriticalBatchFit f = tula::fit_critical_batch(rest, 0);
                    sum += rel_err(f.epochs(t[i].global_batch), t[i].epochs);
                }
                const double mape = 100.0 * sum / static_cast<double>(t.size());
                CPPUNIT_ASSERT_MESSAGE("LOO MAPE " + std::to_string(mape) + " % at E_min " + std::to_string(e_min) +
                                           ", B_crit " + std::to_string(b_crit),
                                       mape <= 7.0);
            }
        }
    }

    // Fitted on the batches up to 13K, the epochs at 32K and above within 20 % of the table
    // (and of the generating model).
    void test_extrapolates_from_small_batches() {
        unsigned seed = 100;
        for (auto [e_min, b_crit] : {std::pair<double, double>{30, 12000}, {18, 30000}, {40, 8000}, {25, 20000}}) {
            for (int draw = 0; draw < 3; ++draw) {
                const auto t = draw_table(e_min, b_crit, 0.04, seed++);
                std::vector<tula::EpochsToTarget> small;
                for (const auto& p : t)
                    if (p.global_batch <= 13000) small.push_back(p);
                const tula::CriticalBatchFit f = tula::fit_critical_batch(small, 0);
                for (const auto& p : t) {
                    if (p.global_batch < 32000) continue;
                    const double truth = e_min * (1.0 + p.global_batch / b_crit);
                    CPPUNIT_ASSERT_MESSAGE(std::to_string(p.global_batch) + ": " + std::to_string(f.epochs(p.global_batch)) +
                                               " vs " + std::to_string(p.epochs),
                                           rel_err(f.epochs(p.global_batch), p.epochs) <= 0.20);
                    CPPUNIT_ASSERT(rel_err(f.epochs(p.global_batch), truth) <= 0.20);
                }
            }
        }
    }

    // The same seed gives the same interval, another seed another one; the 95 % percentile
    // interval covers the generating B_crit in most of 40 independent tables.
    void test_bootstrap_reproducible_and_covers() {
        const auto t = draw_table(30, 12000, 0.05, 7, kStudyBatches, 3);
        const tula::CriticalBatchFit a = tula::fit_critical_batch(t), b = tula::fit_critical_batch(t);
        CPPUNIT_ASSERT_EQUAL(a.b_crit_low, b.b_crit_low);
        CPPUNIT_ASSERT_EQUAL(a.e_min_high, b.e_min_high);
        CPPUNIT_ASSERT_EQUAL(tula::CriticalBatchFit::kResamples, a.resamples);
        const tula::CriticalBatchFit c = tula::fit_critical_batch(t, tula::CriticalBatchFit::kResamples, 99);
        CPPUNIT_ASSERT(c.b_crit_low != a.b_crit_low);
        CPPUNIT_ASSERT(a.b_crit_low < a.b_crit && a.b_crit < a.b_crit_high);
        CPPUNIT_ASSERT(a.e_min_low < a.e_min && a.e_min < a.e_min_high);
        // no resamples: the interval is the estimate
        const tula::CriticalBatchFit d = tula::fit_critical_batch(t, 0);
        CPPUNIT_ASSERT_EQUAL(d.b_crit, d.b_crit_low);
        CPPUNIT_ASSERT_EQUAL(0, d.resamples);
        // coverage: no rounding here, so that the model is exact
        int covered = 0;
        for (unsigned s = 0; s < 40; ++s) {
            std::mt19937 rng(1000 + s);
            std::normal_distribution<double> noise(0.0, 0.05);
            std::vector<tula::EpochsToTarget> u;
            for (int bb : kStudyBatches)
                for (int k = 0; k < 2; ++k) u.push_back({bb, 30 * (1.0 + bb / 12000.0) * std::exp(noise(rng)), "sgd"});
            const tula::CriticalBatchFit f = tula::fit_critical_batch(u);
            covered += f.b_crit_low <= 12000 && 12000 <= f.b_crit_high;
        }
        CPPUNIT_ASSERT_MESSAGE(std::to_string(covered) + " of 40", covered >= 32);
    }

    void test_bad_points_refused() {
        auto err = [](const std::vector<tula::EpochsToTarget>& p) {
            try {
                tula::fit_critical_batch(p);
            } catch (const tula::Error& e) {
                return std::string(e.what());
            }
            return std::string();
        };
        CPPUNIT_ASSERT(err({}).find("2 or more global batches") != std::string::npos);
        CPPUNIT_ASSERT(err({{256, 10, ""}, {256, 11, ""}}).find("2 or more global batches, the history has 1") !=
                       std::string::npos);
        CPPUNIT_ASSERT(err({{256, 10, ""}, {512, NAN, ""}}).find("a number > 0") != std::string::npos);
        CPPUNIT_ASSERT(err({{0, 10, ""}, {512, 12, ""}}).find("batch must be >= 1") != std::string::npos);
        // epochs whose 1/E^2 underflows: GSL cannot fit them, an error rather than NaN
        CPPUNIT_ASSERT(err({{256, 1e200, ""}, {512, 2e200, ""}}).find("fit (GSL nonlinear least squares) failed") !=
                       std::string::npos);
        // two batches: an exact fit of both
        const tula::CriticalBatchFit f = tula::fit_critical_batch({{1000, 12, ""}, {3000, 16, ""}});
        CPPUNIT_ASSERT(rel_err(f.epochs(1000), 12) < 1e-6 && rel_err(f.epochs(3000), 16) < 1e-6);
        CPPUNIT_ASSERT(rel_err(f.e_min, 10) < 1e-6 && rel_err(f.b_crit, 5000) < 1e-6);
        // no batch penalty at all: B_crit held at the upper bound, E_min the epochs
        const tula::CriticalBatchFit g = tula::fit_critical_batch({{1000, 12, ""}, {3000, 12, ""}});
        CPPUNIT_ASSERT(std::isfinite(g.b_crit) && g.b_crit <= tula::CriticalBatchFit::kMaxFactor * 3000 * (1 + 1e-9));
        CPPUNIT_ASSERT(rel_err(g.epochs(2000), 12) < 0.01);
    }

    // Which runs enter: the full data set, not diverged, with a curve, reaching the target;
    // each at its first epoch reaching it.
    void test_selection_of_runs() {
        tula::Workload w;
        w.name = "resnet50@imagenet";
        w.train_examples = 1281167;
        std::vector<tula::RunRecord> runs = {run_crossing(w.name, 1024, 7, 0.75), run_crossing(w.name, 4096, 11, 0.75)};
        runs.push_back(run_crossing(w.name, 2048, 9, 0.75));
        runs.back().train_examples = 100000;  // --limit-train
        runs.push_back(run_crossing(w.name, 2048, 9, 0.75));
        runs.back().epoch_test_accuracy.assign(12, 0.001);  // diverged
        runs.push_back(run_crossing(w.name, 2048, 9, 0.75));
        runs.back().epoch_test_accuracy.resize(5);  // stopped short of the target
        runs.push_back(run_crossing(w.name, 2048, 9, 0.75));
        runs.back().epoch_test_accuracy.clear();  // no curve
        runs.push_back(run_crossing("other@imagenet", 2048, 9, 0.75));
        runs.push_back(run_crossing(w.name, 8192, 20, 0.75));
        runs.back().train_examples = w.train_examples;  // the full set, given explicitly
        const tula::EpochsSelection s = tula::epochs_to_target_points(runs, w, 0.75);
        CPPUNIT_ASSERT_EQUAL(size_t(3), s.points.size());
        CPPUNIT_ASSERT_EQUAL(7.0, s.points[0].epochs);
        CPPUNIT_ASSERT_EQUAL(11.0, s.points[1].epochs);
        CPPUNIT_ASSERT_EQUAL(20.0, s.points[2].epochs);
        CPPUNIT_ASSERT_EQUAL(1, s.limited);
        CPPUNIT_ASSERT_EQUAL(1, s.diverged);
        CPPUNIT_ASSERT_EQUAL(1, s.short_of);
        CPPUNIT_ASSERT_EQUAL(1, s.no_curve);
    }

    // convergence_from_history: one optimizer per fit, the prior below two batches, none
    // without a target.
    void test_history_model() {
        tula::Workload w;
        w.name = "resnet50@imagenet";
        w.train_examples = 1281167;
        tula::ConvergenceModel prior;
        prior.noise_scale = 1000;
        // SGD with B_crit 2000 at 3 batches, LARS with B_crit 20000 at 4 batches
        std::vector<tula::RunRecord> runs;
        for (int b : {1000, 2000, 4000}) runs.push_back(run_crossing(w.name, b, static_cast<int>(std::lround(10 * (1 + b / 2000.0))), 0.7, 2, "sgd"));
        for (int b : {1000, 2000, 4000, 8000})
            runs.push_back(run_crossing(w.name, b, static_cast<int>(std::lround(10 * (1 + b / 20000.0))), 0.7, 2, "lars"));
        CPPUNIT_ASSERT_EQUAL(1000.0, tula::convergence_from_history(runs, w, 0, prior).noise_scale);  // no target
        std::string note;
        const tula::ConvergenceModel m = tula::convergence_from_history(runs, w, 0.7, prior, "", &note);
        CPPUNIT_ASSERT_EQUAL(std::string("lars"), m.fit_optimizer);  // more batches
        CPPUNIT_ASSERT_EQUAL(4, m.fit_batches);
        CPPUNIT_ASSERT_MESSAGE(note, rel_err(m.noise_scale, 20000) < 0.35);
        CPPUNIT_ASSERT(rel_err(m.e_min, 10) < 0.1);
        CPPUNIT_ASSERT_EQUAL(std::string("fit"), std::string(m.source));
        CPPUNIT_ASSERT(note.find("B_crit") != std::string::npos);
        // E(B) itself, whatever the requested epochs and reference batch
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m.e_min * (1 + 16000 / m.noise_scale), m.epochs_for(16000, 99, 64), 1e-9);
        const tula::ConvergenceModel s = tula::convergence_from_history(runs, w, 0.7, prior, "sgd");
        CPPUNIT_ASSERT_EQUAL(3, s.fit_batches);
        CPPUNIT_ASSERT_MESSAGE(std::to_string(s.noise_scale), rel_err(s.noise_scale, 2000) < 0.2);
        // the planner's entry point passes the job's optimizer on ("auto": the fit picks)
        std::vector<std::string> warn;
        CPPUNIT_ASSERT_EQUAL(std::string("sgd"),
                             tula::history_convergence(runs, w, 0.7, 1000, 12, prior, &warn, "sgd").fit_optimizer);
        CPPUNIT_ASSERT_EQUAL(std::string("lars"),
                             tula::history_convergence(runs, w, 0.7, 1000, 12, prior, &warn, "auto").fit_optimizer);
        CPPUNIT_ASSERT_EQUAL(std::string("lars"), tula::history_convergence(runs, w, 0.7, 1000, 12, prior, &warn).fit_optimizer);
        // one batch: B_noise stays the prior's, E_min = median epochs / (1 + B_0 / B_noise)
        std::vector<tula::RunRecord> one = {run_crossing(w.name, 1000, 14, 0.7), run_crossing(w.name, 1000, 16, 0.7),
                                            run_crossing(w.name, 1000, 30, 0.7)};
        const tula::ConvergenceModel o = tula::convergence_from_history(one, w, 0.7, prior, "", &note);
        CPPUNIT_ASSERT_EQUAL(1000.0, o.noise_scale);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(16.0 / 2.0, o.e_min, 1e-12);
        CPPUNIT_ASSERT(note.find("run another batch size") != std::string::npos);
        // nothing reaches the target: the prior, relative epochs
        const tula::ConvergenceModel n = tula::convergence_from_history(one, w, 0.99, prior, "", &note);
        CPPUNIT_ASSERT_EQUAL(0.0, n.e_min);
        CPPUNIT_ASSERT(note.find("no run of resnet50@imagenet reached") != std::string::npos);
        bool threw = false;
        try {
            tula::convergence_from_history(one, w, 1.5, prior);
        } catch (const tula::Error& e) {
            threw = std::string(e.what()).find("(0, 1]") != std::string::npos;
        }
        CPPUNIT_ASSERT(threw);
    }

    // The accuracy model of a job of 2 epochs on the full set: each run's accuracy after 2
    // epochs, not its final one; runs on part of the data set or shorter than 2 epochs left out.
    void test_accuracy_of_comparable_runs() {
        auto run = [](int batch, std::vector<double> curve, int64_t examples) {
            tula::RunRecord r = tula_test::run_record("j", "w@d", 1, batch, static_cast<int>(curve.size()), 10, 1.7e9);
            r.epoch_test_accuracy = curve;
            r.test_accuracy = curve.empty() ? 0.5 : curve.back();
            r.train_examples = examples;
            return r;
        };
        std::vector<tula::RunRecord> runs = {run(64, {0.5, 0.8, 0.9}, 0), run(1024, {0.3, 0.6}, 60000),
                                             run(256, {0.1, 0.2, 0.3}, 6000), run(256, {0.95}, 0)};
        runs.push_back(run(4096, {}, 0));
        runs.back().epochs = 2;  // no curve, trained exactly 2 epochs: its final accuracy
        runs.back().test_accuracy = 0.4;
        const tula::AccuracyModel m = tula::AccuracyModel::fit(runs, 2, 60000, 60000);
        CPPUNIT_ASSERT_EQUAL(3, m.runs);
        // least squares through (6, 0.8), (10, 0.6), (12, 0.4) in log2 B, by hand
        const double xs[3] = {6, 10, 12}, ys[3] = {0.8, 0.6, 0.4};
        double mx = 0, my = 0;
        for (int i = 0; i < 3; ++i) mx += xs[i] / 3, my += ys[i] / 3;
        double sxy = 0, sxx = 0;
        for (int i = 0; i < 3; ++i) sxy += (xs[i] - mx) * (ys[i] - my), sxx += (xs[i] - mx) * (xs[i] - mx);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(sxy / sxx, m.c, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(my - sxy / sxx * mx, m.a, 1e-9);
    }

    // Without a target accuracy the target is what the requested epochs reach at the reference
    // batch (the median over its full-set, non-diverged runs); B_crit is fitted to it and the
    // epochs stay relative to the requested ones there.
    void test_target_from_reference_batch() {
        tula::Workload w;
        w.name = "w@d";
        w.train_examples = 50000;
        std::vector<tula::RunRecord> at = {run_crossing(w.name, 1000, 10, 0.7, 4), run_crossing(w.name, 1000, 12, 0.7, 4),
                                           run_crossing(w.name, 1000, 11, 0.7, 4)};
        at.push_back(run_crossing(w.name, 1000, 2, 0.7, 4));
        at.back().train_examples = 5000;  // --limit-train: not the reference
        at.push_back(run_crossing(w.name, 1000, 11, 0.7, 4));
        at.back().epoch_test_accuracy.assign(15, 0.01);  // diverged
        // after 12 epochs: 0.7 + 0.002 x (12 - hit) for hit 10, 12, 11 -> median 0.702
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.702, tula::reference_accuracy(at, w, 1000, 12), 1e-12);
        CPPUNIT_ASSERT_EQUAL(0.0, tula::reference_accuracy(at, w, 2000, 12));   // no run at that batch
        CPPUNIT_ASSERT_EQUAL(0.0, tula::reference_accuracy(at, w, 1000, 30));   // none trained 30 epochs
        tula::ConvergenceModel prior;
        prior.noise_scale = 777;
        std::vector<std::string> warn;
        // one batch only: the prior, no warning
        CPPUNIT_ASSERT_EQUAL(777.0, tula::history_convergence(at, w, 0, 1000, 12, prior, &warn).noise_scale);
        CPPUNIT_ASSERT(warn.empty());
        // runs at 4 batches drawn from E(B) = 10 (1 + B / 5000), crossing 0.7 there
        std::vector<tula::RunRecord> runs;
        for (int b : {1000, 2000, 4000, 8000})
            runs.push_back(run_crossing(w.name, b, static_cast<int>(std::lround(10 * (1 + b / 5000.0))), 0.7, 3));
        const double target = tula::reference_accuracy(runs, w, 1000, 12);  // the 1000 run crosses at 12
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.7, target, 1e-12);
        const tula::ConvergenceModel m = tula::history_convergence(runs, w, 0, 1000, 12, prior, &warn);
        CPPUNIT_ASSERT(warn.empty());
        CPPUNIT_ASSERT_EQUAL(4, m.fit_batches);
        CPPUNIT_ASSERT_EQUAL(0.0, m.e_min);  // relative to the requested epochs
        CPPUNIT_ASSERT_MESSAGE(std::to_string(m.noise_scale), rel_err(m.noise_scale, 5000) < 0.15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(12.0, m.epochs_for(1000, 12, 1000), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(12.0 * (1 + 8000 / m.noise_scale) / (1 + 1000 / m.noise_scale),
                                     m.epochs_for(8000, 12, 1000), 1e-9);
        CPPUNIT_ASSERT(m.origin().find("fitted to 4 runs at 4 batches") != std::string::npos);
        // a given target the history cannot reach: the prior and a warning
        const tula::ConvergenceModel n = tula::history_convergence(runs, w, 0.99, 1000, 12, prior, &warn);
        CPPUNIT_ASSERT_EQUAL(777.0, n.noise_scale);
        CPPUNIT_ASSERT_EQUAL(size_t(1), warn.size());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaConvergenceFitTest);
