// Unit tests of the parts of AGS (adaptive gradient scaling, tula-train(1), OPTIMIZERS) that
// guard its first steps and its measurements: the noise-scale rate rule before the first
// estimate, the warmup driven by the gradient norm (a window, a minimum, a ramp from near
// zero), the tensors excluded from trust scaling, and the batch-norm statistics on the steps
// that measure the noise. Each compares against a reference computed here.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/model.hpp"
#include "core/rng.hpp"
#include "data/data.hpp"
#include "dist/comm.hpp"
#include "dist/local_sgd.hpp"
#include "optim/noise_scale.hpp"
#include "optim/optim.hpp"
#include "train/train.hpp"
#include "trainer_fixtures.hpp"

using namespace tula::train;

namespace {

// The noise-scale rule written out: McCandlish et al.'s (2018) optimal rate
// eps_max / (1 + B_noise / B) as a ratio between B and B0, times lr0.
double noise_rule(double lr0, double b0, double b, double bn) { return lr0 * (b / b0) / (1 + b / bn) * (1 + b0 / bn); }

// The windowed warmup test written out: EMA of |g|^2, still warming while fewer than
// window + 1 values were seen or |E_t - E_{t-window}| / E_{t-window} > thr; returns the
// first step run at the full rate (or cap).
int64_t naive_warmup_end(const std::vector<double>& g2, double thr, double beta, int window, int64_t min_steps,
                         int64_t cap) {
    std::vector<double> e;
    for (size_t t = 0; t < g2.size(); ++t) {
        e.push_back(t == 0 ? g2[0] : beta * e.back() + (1 - beta) * g2[t]);
        const int64_t next = static_cast<int64_t>(t) + 1;
        bool changing = static_cast<int>(e.size()) <= window;
        if (!changing) {
            const double old = e[e.size() - 1 - window];
            changing = std::fabs(e.back() - old) / old > thr;
        }
        if (next >= cap || (next >= min_steps && !changing)) return next;
    }
    return -1;
}

}  // namespace

class TrainerAgsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerAgsTest);
    CPPUNIT_TEST(test_noise_rule_before_estimate);
    CPPUNIT_TEST(test_warmup_lasts_while_norm_grows);
    CPPUNIT_TEST(test_warmup_minimum_length);
    CPPUNIT_TEST(test_warmup_ramps_from_near_zero);
    CPPUNIT_TEST(test_zero_and_undecayed_tensors_excluded);
    CPPUNIT_TEST(test_step_reports_trust_range);
    CPPUNIT_TEST(test_noise_measurement_keeps_bn_statistics);
    CPPUNIT_TEST(test_local_noise_scale_unbiased);
    CPPUNIT_TEST(test_norm_test_follows_estimate_down);
    CPPUNIT_TEST(test_norm_test_smoothed_not_running_max);
    CPPUNIT_TEST_SUITE_END();

public:
    // Before the first estimate of B_noise the rule is its limit for B_noise -> 0, the base
    // rate, not lr0 * B / B0 (3.2 at batch 4096 from 0.05 at 64).
    void test_noise_rule_before_estimate() {
        const double lr0 = 0.05;
        for (int b : {64, 512, 4096, 65536}) {
            const double limit = noise_rule(lr0, 64, b, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(limit, scaled_lr(LrScaling::Noise, lr0, 64, b, 0, 0), 1e-6 * limit);
            CPPUNIT_ASSERT(scaled_lr(LrScaling::Noise, lr0, 64, b, 0, 0) <= lr0 * (1 + 1e-9));
        }
        // the schedule's first step at batch 4096 with the data-driven warmup: far below 3.2
        LrSchedule s = testing::schedule(lr0, 64, 4096, 2, 14, 30);
        s.scaling = LrScaling::Noise;
        CPPUNIT_ASSERT(s.at_adaptive(0, -1) <= lr0);
    }

    // |g|^2 grows by 10 % a step for 15 steps, then holds: the warmup must last through the
    // growth (a per-step EMA change with beta 0.9 is about 1 %, and ended it at step 2).
    void test_warmup_lasts_while_norm_grows() {
        std::vector<double> g2;
        for (int t = 0; t < 200; ++t) g2.push_back(std::pow(1.1, std::min(t, 15)));
        NormWarmup w(0.05, 0.9, 1, 1000);
        for (double v : g2)
            if (!w.update(v)) break;
        CPPUNIT_ASSERT(w.end_step() > 15);
        CPPUNIT_ASSERT_EQUAL(naive_warmup_end(g2, 0.05, 0.9, 10, 1, 1000), w.end_step());
        // a window of 5 steps and a steadier growth (2 % a step): the same reference
        std::vector<double> slow;
        for (int t = 0; t < 200; ++t) slow.push_back(1 + 9 * std::exp(-t / 15.0));
        NormWarmup w5(0.05, 0.8, 1, 1000, 5);
        for (double v : slow)
            if (!w5.update(v)) break;
        CPPUNIT_ASSERT_EQUAL(naive_warmup_end(slow, 0.05, 0.8, 5, 1, 1000), w5.end_step());
        CPPUNIT_ASSERT(w5.end_step() > 5);
    }

    // A gradient norm that never changes: the warmup still lasts one window (10 steps by
    // default), or min_steps when that is longer.
    void test_warmup_minimum_length() {
        NormWarmup w(0.05, 0.9, 1, 1000);
        for (int t = 0; t < 100 && w.update(1.0); ++t) {
        }
        CPPUNIT_ASSERT(w.end_step() >= 10);
        NormWarmup m(0.05, 0.9, 30, 1000);
        for (int t = 0; t < 100 && m.update(1.0); ++t) {
        }
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(30), m.end_step());
    }

    // The data-driven warmup starts near zero (peak / W), not at the small-batch rate, and
    // rises linearly to the peak: here the peak is only twice the base rate.
    void test_warmup_ramps_from_near_zero() {
        LrSchedule s = testing::schedule(0.05, 64, 128, 2, 10, 10);  // peak 0.1, W = 20 steps
        const double pk = 0.05 * 128 / 64;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(pk, s.peak(), 1e-12);
        CPPUNIT_ASSERT(s.at_adaptive(0, -1) <= pk / 20 + 1e-12);
        for (int t = 0; t < 20; ++t) CPPUNIT_ASSERT_DOUBLES_EQUAL(pk * (t + 1) / 20.0, s.at_adaptive(t, -1), 1e-12);
    }

    // Segments without weight decay (biases, batch norm) and segments with |w| = 0 get the
    // plain rate, as in LARS and LAMB; a decayed segment with |w| > 0 is trust-scaled.
    void test_zero_and_undecayed_tensors_excluded() {
        std::vector<ParamSegment> segs(4);
        const size_t n = 8;
        for (size_t k = 0; k < segs.size(); ++k) {
            segs[k].name = "s" + std::to_string(k);
            segs[k].offset = k * n;
            segs[k].size = n;
        }
        segs[1].decay = false;  // zero bias
        segs[2].decay = true;   // zero weight
        segs[3].decay = false;  // nonzero batch-norm scale
        Rng rng(11);
        std::vector<float> w(4 * n, 0.0f), g(4 * n);
        for (size_t i = 0; i < n; ++i) {
            w[i] = static_cast<float>(rng.normal());
            w[3 * n + i] = 1.0f;
        }
        for (auto& v : g) v = static_cast<float>(0.1 * rng.normal());
        for (OptimKind kind : {OptimKind::Ags, OptimKind::Lars, OptimKind::Lamb}) {
            OptimConfig c;
            c.kind = kind;
            c.momentum = 0.0;
            c.weight_decay = 0.0;
            c.eta_trust = 0.02;
            Optimizer opt(segs, w.size(), c);
            std::vector<float> x = w;
            opt.step(x.data(), g.data(), 0.1);
            for (size_t k = 1; k < 4; ++k)
                CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, opt.last_factors()[k], 0);
            CPPUNIT_ASSERT(std::fabs(opt.last_factors()[0] - 1.0) > 1e-3);
            if (kind == OptimKind::Lamb) continue;
            for (size_t i = n; i < 4 * n; ++i)  // plain SGD steps: w - lr g
                CPPUNIT_ASSERT_DOUBLES_EQUAL(w[i] - 0.1 * g[i], x[i], 1e-6);
        }
    }

    // The range a Trainer step reports (the step line's trust_min/trust_max) against the AGS
    // factors written out from the weights before the step and the gradient it used, over
    // the segments with weight decay; and 1 and 1 with SGD.
    void test_step_reports_trust_range() {
        const Dataset d = testing::random_images(16, 3);
        const std::vector<int> idx = testing::all_indices(d);
        Comm serial;
        auto m = build_model("fmnist-cnn");
        m->init(6);
        OptimConfig c;
        c.kind = OptimKind::Ags;
        c.eta_trust = 0.02;
        c.s_min = 0.5;
        c.s_max = 20.0;
        Trainer tr(*m, serial, c);
        const std::vector<float> w(m->params(), m->params() + m->num_params());
        StepStats st;
        tr.step(d, idx.data(), 16, 0.01, true, nullptr, &st, false);
        double lo = 1e300, hi = -1e300;
        for (const ParamSegment& s : m->segments()) {
            if (!s.decay) continue;
            double w2 = 0, g2 = 0;
            for (size_t i = s.offset; i < s.offset + s.size; ++i) {
                w2 += static_cast<double>(w[i]) * w[i];
                g2 += static_cast<double>(m->grads()[i]) * m->grads()[i];
            }
            const double raw = c.eta_trust * std::sqrt(w2) / std::sqrt(g2);
            const double f = std::min(c.s_max, std::max(c.s_min, raw));
            lo = std::min(lo, f);
            hi = std::max(hi, f);
        }
        CPPUNIT_ASSERT(lo < hi);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(lo, st.trust_min, 1e-6 * lo);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(hi, st.trust_max, 1e-6 * hi);
        StepStats sgd;
        Trainer plain(*m, serial, 0.9, 5e-4);
        plain.step(d, idx.data(), 16, 0.01, true, nullptr, &sgd, false);
        CPPUNIT_ASSERT_EQUAL(1.0, sgd.trust_min);
        CPPUNIT_ASSERT_EQUAL(1.0, sgd.trust_max);
    }

    // One rank, fmnist-cnn (batch norm): a step that measures the noise (two micro-batches)
    // must leave the running statistics as they were; a plain step does move them.
    void test_noise_measurement_keeps_bn_statistics() {
        const Dataset d = testing::random_images(32, 9);
        const std::vector<int> idx = testing::all_indices(d);
        Comm serial;
        auto m = build_model("fmnist-cnn");
        m->init(4);
        CPPUNIT_ASSERT(m->state_size() > 0);
        const std::vector<float> before(m->state(), m->state() + m->state_size());
        Trainer tr(*m, serial, 0.9, 5e-4);
        StepStats st;
        tr.step(d, idx.data(), 32, 0.01, true, nullptr, &st, true);
        CPPUNIT_ASSERT(st.noise);
        for (size_t i = 0; i < before.size(); ++i) CPPUNIT_ASSERT_EQUAL(before[i], m->state()[i]);
        StepStats plain;
        tr.step(d, idx.data(), 32, 0.01, true, nullptr, &plain, false);
        bool moved = false;
        for (size_t i = 0; i < before.size(); ++i) moved = moved || before[i] != m->state()[i];
        CPPUNIT_ASSERT(moved);
    }

    // Local SGD's noise scale from micro-batch means on one rank: |G|^2 = 1 over 50
    // coordinates, per-example covariance of trace 64, so B_simple = 64. Rounds of 4
    // micro-batches of 8 (N = 32): E|g_N|^2 = 1 + 64/32 = 3, and tr / |g_N|^2 would give
    // about 21; the unbiased estimates, smoothed, give about 64.
    void test_local_noise_scale_unbiased() {
        const int D = 50, M = 4, m = 8;
        const double trace = 64.0, sd = std::sqrt(trace / D / m);  // of one coordinate of a micro-batch mean
        Comm serial;
        BatchVariance bv(D, false);
        NoiseScale ns(0.98);
        Rng rng(17);
        std::vector<float> h(D);
        for (int round = 0; round < 600; ++round) {
            bv.clear();
            for (int i = 0; i < M; ++i) {
                for (int j = 0; j < D; ++j) h[j] = static_cast<float>(1.0 / std::sqrt(D) + sd * rng.normal());
                bv.add(h.data(), m);
            }
            add_local_noise(ns, bv.finish(serial, false));
        }
        CPPUNIT_ASSERT(ns.ready());
        if (!(std::fabs(ns.value() - trace) < 0.2 * trace))
            CPPUNIT_FAIL("B_simple " + std::to_string(ns.value()) + ", expected about 64");
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, ns.grad_norm2(), 0.2);
    }

    // The norm test wants b = tr / (eta^2 |g|^2) = 100 / 0.25 = 400 ... and then 100: the batch
    // follows it down (not below the floor given).
    void test_norm_test_follows_estimate_down() {
        BatchStatistics st;
        st.trace = 25;
        st.grad_norm2 = 1;
        CPPUNIT_ASSERT_EQUAL(100, next_local_batch(BatchTest::Norm, 400, st, 0.5, 0.5, 1000));
        CPPUNIT_ASSERT_EQUAL(64, next_local_batch(BatchTest::Norm, 16, st, 0.5, 0.5, 1000, 4.0));
    }

    // Each round's variance is a 3-degree-of-freedom estimate (4 micro-batches): tr x chi2_3 / 3
    // about a true need of 400. Smoothed over rounds the batch stays near 400; a batch that
    // only grows would climb to the running maximum (several times 400).
    void test_norm_test_smoothed_not_running_max() {
        Rng rng(23);
        BatchStatisticsEma ema(0.9);
        int b = 32, most = 0;
        for (int round = 0; round < 300; ++round) {
            double chi = 0;
            for (int k = 0; k < 3; ++k) {
                const double z = rng.normal();
                chi += z * z;
            }
            BatchStatistics st;
            st.trace = 100.0 * chi / 3;  // mean 100
            st.grad_norm2 = 1;
            st.examples = 4.0 * b;
            b = next_local_batch(BatchTest::Norm, b, ema.add(st), 0.5, 0.5, 100000, 0, 32);
            if (round >= 50) most = std::max(most, b);
        }
        if (!(b > 200 && b < 680)) CPPUNIT_FAIL("batch " + std::to_string(b) + ", expected about 400");
        if (!(most < 800)) CPPUNIT_FAIL("batch reached " + std::to_string(most) + ", expected to stay about 400");
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerAgsTest);
