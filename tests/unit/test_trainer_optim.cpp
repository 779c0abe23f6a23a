// Unit tests of tula-train's optimizers (optim.hpp): AGS factors stay in [s_min, s_max]
// and match a naive recomputation on random tensors; SGD, AGS, LARS and LAMB steps agree
// with naive hand-written double-precision updates; the LR scaling rules; the warmup that
// ends when the gradient norm settles (against a naive re-implementation of its test).
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "optim/optim.hpp"
#include "core/rng.hpp"
#include "trainer_fixtures.hpp"

using namespace tula::train;

namespace {

// Random segments of random sizes; weights and gradients of per-segment random scales
// (spanning 4 orders of magnitude so that both bounds of AGS are hit).
struct Problem {
    std::vector<ParamSegment> segs;
    std::vector<float> w, g;
};

Problem random_problem(uint64_t seed, int nseg) {
    Rng rng(seed);
    Problem p;
    size_t off = 0;
    for (int k = 0; k < nseg; ++k) {
        ParamSegment s;
        s.name = "seg" + std::to_string(k);
        s.offset = off;
        s.size = 1 + rng.below(300);
        s.decay = (k % 3) != 2;
        off += s.size;
        p.segs.push_back(s);
    }
    p.w.resize(off);
    p.g.resize(off);
    for (const auto& s : p.segs) {
        const double ws = std::pow(10.0, rng.uniform(-2, 1)), gs = std::pow(10.0, rng.uniform(-4, 0));
        for (size_t i = 0; i < s.size; ++i) {
            p.w[s.offset + i] = static_cast<float>(ws * rng.normal());
            p.g[s.offset + i] = static_cast<float>(gs * rng.normal());
        }
    }
    return p;
}

double seg_norm(const std::vector<double>& x, const ParamSegment& s) {
    double n = 0;
    for (size_t i = 0; i < s.size; ++i) n += x[s.offset + i] * x[s.offset + i];
    return std::sqrt(n);
}

std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

void assert_close(const std::vector<float>& got, const std::vector<double>& want, double rtol, const std::string& what) {
    CPPUNIT_ASSERT_EQUAL(want.size(), got.size());
    for (size_t i = 0; i < got.size(); ++i)
        if (std::fabs(got[i] - want[i]) > rtol * (std::fabs(want[i]) + 1e-3))
            CPPUNIT_FAIL(what + ": value " + std::to_string(i) + " is " + std::to_string(got[i]) + ", naive " +
                         std::to_string(want[i]));
}

}  // namespace

class TrainerOptimTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerOptimTest);
    CPPUNIT_TEST(test_ags_factor_bounded_and_naive);
    CPPUNIT_TEST(test_ags_steps_match_naive);
    CPPUNIT_TEST(test_sgd_steps_match_naive);
    CPPUNIT_TEST(test_lars_steps_match_naive);
    CPPUNIT_TEST(test_lamb_steps_match_naive);
    CPPUNIT_TEST(test_rejects_bad_hyperparameters);
    CPPUNIT_TEST(test_lr_scaling_rules);
    CPPUNIT_TEST(test_noise_first_holds_first_estimate);
    CPPUNIT_TEST(test_norm_warmup_matches_naive);
    CPPUNIT_TEST(test_norm_warmup_cap);
    CPPUNIT_TEST(test_adaptive_schedule);
    CPPUNIT_TEST(test_progress_schedule);
    CPPUNIT_TEST(test_warmup_from);
    CPPUNIT_TEST(test_wsd_schedule);
    CPPUNIT_TEST(test_parse_kind);
    CPPUNIT_TEST_SUITE_END();

    // AGS factors on random tensors: within [s_min, s_max], equal to the unclipped ratio
    // where it lies inside, and both bounds are actually reached over the set; segments
    // without weight decay are excluded from the scaling (factor 1).
    void test_ags_factor_bounded_and_naive() {
        const double smin = 0.05, smax = 2.0, eta = 0.02, lam = 1e-3;
        Problem p = random_problem(21, 200);
        OptimConfig c;
        c.kind = OptimKind::Ags;
        c.eta_trust = eta;
        c.s_min = smin;
        c.s_max = smax;
        c.ags_lambda = lam;
        Optimizer opt(p.segs, p.w.size(), c);
        const std::vector<double> w = to_d(p.w), g = to_d(p.g);
        opt.step(p.w.data(), p.g.data(), 0.1);
        int low = 0, high = 0, inside = 0;
        for (size_t k = 0; k < p.segs.size(); ++k) {
            const double s = opt.last_factors()[k];
            if (!p.segs[k].decay) {
                CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, s, 0);
                continue;
            }
            CPPUNIT_ASSERT(s >= smin && s <= smax);
            const double raw = eta * seg_norm(w, p.segs[k]) / (seg_norm(g, p.segs[k]) + lam * seg_norm(w, p.segs[k]));
            const double want = raw < smin ? smin : raw > smax ? smax : raw;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, s, 1e-6 * want);
            low += raw < smin;
            high += raw > smax;
            inside += raw >= smin && raw <= smax;
        }
        CPPUNIT_ASSERT(low > 0 && high > 0 && inside > 0);
        // degenerate tensors: zero weights -> excluded (1), zero gradient with weights -> s_max
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, ags_factor(0, 1, eta, lam, smin, smax), 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(smax, ags_factor(1, 0, eta, 0, smin, smax), 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, ags_factor(0, 0, eta, 0, smin, smax), 0);
    }

    // Naive SGD-momentum family step in double: v = mu v + f_k (g + wd w), w -= lr v.
    void naive_momentum(std::vector<double>& w, std::vector<double>& v, const std::vector<double>& g,
                        const std::vector<ParamSegment>& segs, double mu, double wd, double lr,
                        const std::vector<double>& f) {
        for (size_t k = 0; k < segs.size(); ++k)
            for (size_t i = segs[k].offset; i < segs[k].offset + segs[k].size; ++i) {
                const double d = g[i] + (segs[k].decay ? wd : 0.0) * w[i];
                v[i] = mu * v[i] + f[k] * d;
                w[i] -= lr * v[i];
            }
    }

    // Runs 3 steps of `kind` with fresh random gradients, against a naive update whose
    // per-segment factor is computed by `factor(|w|, |g|, beta)` (beta the segment's weight
    // decay) for segments with weight decay, 1 for the others (excluded from trust scaling).
    template <class F>
    void check_momentum_kind(OptimKind kind, F factor, uint64_t seed) {
        Problem p = random_problem(seed, 30);
        OptimConfig c;
        c.kind = kind;
        c.momentum = 0.9;
        c.weight_decay = 1e-3;
        c.eta_trust = 0.02;
        c.s_min = 0.05;
        c.s_max = 2.0;
        Optimizer opt(p.segs, p.w.size(), c);
        std::vector<double> w = to_d(p.w), v(w.size(), 0.0);
        Rng rng(seed + 100);
        for (int step = 0; step < 3; ++step) {
            for (auto& x : p.g) x = static_cast<float>(0.1 * rng.normal());
            const std::vector<double> g = to_d(p.g);
            std::vector<double> f(p.segs.size());
            for (size_t k = 0; k < p.segs.size(); ++k)
                f[k] = p.segs[k].decay ? factor(seg_norm(w, p.segs[k]), seg_norm(g, p.segs[k]), c.weight_decay) : 1.0;
            const double lr = 0.3 + 0.1 * step;
            naive_momentum(w, v, g, p.segs, c.momentum, c.weight_decay, lr, f);
            opt.step(p.w.data(), p.g.data(), lr);
            assert_close(p.w, w, 1e-4, std::string(optim_kind_name(kind)) + " step " + std::to_string(step));
        }
    }

    void test_sgd_steps_match_naive() {
        check_momentum_kind(OptimKind::Sgd, [](double, double, double) { return 1.0; }, 31);
    }
    void test_ags_steps_match_naive() {
        check_momentum_kind(OptimKind::Ags, [](double wn, double gn, double) {
            const double r = 0.02 * wn / gn;  // lambda 0
            return std::min(2.0, std::max(0.05, r));
        }, 32);
    }
    // LARS (You et al. 2017): lambda = eta |w| / (|g| + beta |w|), beta = weight decay.
    void test_lars_steps_match_naive() {
        check_momentum_kind(OptimKind::Lars, [](double wn, double gn, double beta) {
            return 0.02 * wn / (gn + beta * wn);
        }, 33);
    }

    // LAMB (You et al. 2020, Algorithm 2) written out in double.
    void test_lamb_steps_match_naive() {
        Problem p = random_problem(41, 20);
        OptimConfig c;
        c.kind = OptimKind::Lamb;
        c.momentum = 0.9;
        c.beta2 = 0.999;
        c.eps = 1e-6;
        c.weight_decay = 0.01;
        Optimizer opt(p.segs, p.w.size(), c);
        std::vector<double> w = to_d(p.w), m(w.size(), 0.0), v(w.size(), 0.0);
        Rng rng(42);
        for (int t = 1; t <= 3; ++t) {
            for (auto& x : p.g) x = static_cast<float>(0.1 * rng.normal());
            const double lr = 0.01;
            for (const auto& s : p.segs) {
                std::vector<double> u(s.size);
                double un = 0, wn = 0;
                for (size_t j = 0; j < s.size; ++j) {
                    const size_t i = s.offset + j;
                    m[i] = 0.9 * m[i] + 0.1 * p.g[i];
                    v[i] = 0.999 * v[i] + 0.001 * static_cast<double>(p.g[i]) * p.g[i];
                    const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.999, t));
                    u[j] = mh / (std::sqrt(vh) + 1e-6) + (s.decay ? 0.01 : 0.0) * w[i];
                    un += u[j] * u[j];
                    wn += w[i] * w[i];
                }
                const double r = (s.decay && wn > 0 && un > 0) ? std::sqrt(wn) / std::sqrt(un) : 1.0;
                for (size_t j = 0; j < s.size; ++j) w[s.offset + j] -= lr * r * u[j];
            }
            opt.step(p.w.data(), p.g.data(), lr);
            assert_close(p.w, w, 2e-4, "lamb step " + std::to_string(t));
        }
    }

    void test_rejects_bad_hyperparameters() {
        Problem p = random_problem(5, 3);
        auto make = [&](OptimConfig c) { Optimizer o(p.segs, p.w.size(), c); };
        OptimConfig c;
        c.kind = OptimKind::Ags;
        c.s_min = 0;
        CPPUNIT_ASSERT_THROW(make(c), std::invalid_argument);
        c.s_min = 2;
        c.s_max = 1;
        CPPUNIT_ASSERT_THROW(make(c), std::invalid_argument);
        c = OptimConfig();
        c.eta_trust = -1;
        CPPUNIT_ASSERT_THROW(make(c), std::invalid_argument);
        c = OptimConfig();
        c.ags_lambda = -0.1;
        CPPUNIT_ASSERT_THROW(make(c), std::invalid_argument);
        c = OptimConfig();
        c.momentum = 1.0;
        CPPUNIT_ASSERT_THROW(make(c), std::invalid_argument);
        c = OptimConfig();
        CPPUNIT_ASSERT_THROW(Optimizer(p.segs, p.w.size() - 1, c), std::invalid_argument);
    }

    // --ags-rate-rule first: the schedule keeps the first B_noise estimate; the plain noise rule
    // follows every estimate. Rates against the formula written out.
    void test_noise_first_holds_first_estimate() {
        const double lr0 = 0.05;
        auto rate = [&](double bn) { return lr0 * (1024.0 / 64) / (1 + 1024.0 / bn) * (1 + 64.0 / bn); };
        for (LrScaling rule : {LrScaling::Noise, LrScaling::NoiseFirst}) {
            LrSchedule s;
            s.lr = lr0;
            s.base_batch = 64;
            s.global_batch = 1024;
            s.scaling = rule;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0, s.peak(), 1e-12);  // no estimate yet
            for (double bad : {std::nan(""), 0.0, -3.0}) {       // not known: still the base rate
                s.observe_noise_scale(bad);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0, s.peak(), 1e-12);
            }
            s.observe_noise_scale(14);  // the first known estimate
            CPPUNIT_ASSERT_DOUBLES_EQUAL(rate(14), s.peak(), 1e-12);
            s.observe_noise_scale(217);
            const bool held = rule == LrScaling::NoiseFirst;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(held ? rate(14) : rate(217), s.peak(), 1e-12);
            CPPUNIT_ASSERT(rate(217) > 2 * rate(14));  // the growth the first rule holds back
            s.observe_noise_scale(-5);  // a negative estimate: the noise rule drops to the base rate
            CPPUNIT_ASSERT_DOUBLES_EQUAL(held ? rate(14) : lr0, s.peak(), 1e-12);
        }
    }

    void test_lr_scaling_rules() {
        const double lr0 = 0.05;
        // linear and sqrt
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.05 * 64, scaled_lr(LrScaling::Linear, lr0, 64, 4096, 0, 0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.05 * 8, scaled_lr(LrScaling::Sqrt, lr0, 64, 4096, 0, 0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.4, scaled_lr(LrScaling::Linear, lr0, 64, 4096, 0, 0.4), 1e-12);
        // noise: no estimate yet -> the base rate (the rule's limit for Bn -> 0)
        CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0, scaled_lr(LrScaling::Noise, lr0, 64, 4096, 0, 0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0, scaled_lr(LrScaling::NoiseSqrt, lr0, 64, 4096, 0, 0), 1e-12);
        // noise-sqrt: the square root of the noise rule's ratio, written out
        for (double bn : {10.0, 300.0, 1e5}) {
            const double ratio = (4096.0 / 64) / (1 + 4096.0 / bn) * (1 + 64.0 / bn);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0 * std::sqrt(ratio), scaled_lr(LrScaling::NoiseSqrt, lr0, 64, 4096, bn, 0),
                                         1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0, scaled_lr(LrScaling::NoiseSqrt, lr0, 64, 64, bn, 0), 1e-12);
        }
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.1, scaled_lr(LrScaling::NoiseSqrt, lr0, 64, 4096, 300.0, 0.1), 1e-12);
        // noise: lr0 at B = B0 whatever Bn; the formula written out; saturation for B >> Bn
        for (double bn : {10.0, 300.0, 1e5}) {
            CPPUNIT_ASSERT_DOUBLES_EQUAL(lr0, scaled_lr(LrScaling::Noise, lr0, 64, 64, bn, 0), 1e-12);
            const double want = lr0 * (4096.0 / 64) / (1 + 4096.0 / bn) * (1 + 64.0 / bn);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, scaled_lr(LrScaling::Noise, lr0, 64, 4096, bn, 0), 1e-12 * want);
        }
        const double sat = lr0 * (300.0 + 64) / 64;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(sat, scaled_lr(LrScaling::Noise, lr0, 64, 1 << 30, 300.0, 0), 1e-5 * sat);
        // monotone in B, below the linear rule
        double prev = 0;
        for (int b = 64; b <= 65536; b *= 2) {
            const double v = scaled_lr(LrScaling::Noise, lr0, 64, b, 500.0, 0);
            CPPUNIT_ASSERT(v > prev);
            CPPUNIT_ASSERT(v <= lr0 * b / 64 + 1e-12);
            prev = v;
        }
    }

    // Naive re-implementation of the warmup test on a gradient norm that settles
    // (|g|^2 = 1 + 9 exp(-t/15)): the end step agrees (change over a window of 4 steps).
    void test_norm_warmup_matches_naive() {
        const double thr = 0.01, beta = 0.8;
        const int window = 4;
        NormWarmup w(thr, beta, 1, 1000, window);
        std::vector<double> ema;
        int64_t naive_end = -1;
        for (int t = 0; t < 500 && w.active(); ++t) {
            const double g2 = 1 + 9 * std::exp(-t / 15.0);
            ema.push_back(t == 0 ? g2 : beta * ema.back() + (1 - beta) * g2);
            const bool known = t >= window;
            const double change = known ? std::fabs(ema[t] - ema[t - window]) / ema[t - window] : 0.0;
            if (naive_end < 0 && known && change <= thr) naive_end = t + 1;
            w.update(g2);
        }
        CPPUNIT_ASSERT(naive_end > 5);
        CPPUNIT_ASSERT_EQUAL(naive_end, w.end_step());
        CPPUNIT_ASSERT(!w.active());
        CPPUNIT_ASSERT(!w.update(100.0));  // never restarts
        CPPUNIT_ASSERT_EQUAL(naive_end, w.end_step());
    }

    void test_norm_warmup_cap() {
        NormWarmup w(0.01, 0.5, 1, 20);
        for (int t = 0; t < 100; ++t) w.update(std::pow(1.5, t));  // never settles
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(20), w.end_step());
        NormWarmup c(0.01, 0.5, 7, 20, 3);
        for (int t = 0; t < 100; ++t) c.update(1.0);  // settled from the start: the minimum (> window)
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(7), c.end_step());
        NormWarmup none(0.01, 0.5, 0, 0);
        CPPUNIT_ASSERT(!none.active());
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(0), none.end_step());
    }

    void test_adaptive_schedule() {
        LrSchedule s = peak08_schedule();
        const double pk = s.peak();
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, pk, 1e-12);
        // during warmup from a given rate: the fixed schedule's ramp
        s.warmup_from = s.lr;
        for (int t = 0; t < 20; ++t) CPPUNIT_ASSERT_DOUBLES_EQUAL(s.at(t), s.at_adaptive(t, -1), 1e-12);
        // warmup ended at step 7: full rate there, cosine to 0 at the end
        CPPUNIT_ASSERT_DOUBLES_EQUAL(pk, s.at_adaptive(7, 7), 1e-12);
        const double mid = s.at_adaptive(7 + 93 / 2, 7);
        CPPUNIT_ASSERT(mid < pk && mid > 0.4 * pk);
        CPPUNIT_ASSERT(s.at_adaptive(99, 7) < 0.01 * pk);
        for (int t = 8; t < 100; ++t) CPPUNIT_ASSERT(s.at_adaptive(t, 7) <= s.at_adaptive(t - 1, 7) + 1e-15);
        // ended at the cap: identical to the fixed schedule
        for (int t = 20; t < 100; ++t) CPPUNIT_ASSERT_DOUBLES_EQUAL(s.at(t), s.at_adaptive(t, 20), 1e-12);
    }

    // at_progress(t / T, B) is the step schedule at(t) written as a fraction of the run
    // (warmup and cosine); with a larger batch its peak follows the scaling rule.
    void test_progress_schedule() {
        LrSchedule s = testing::schedule(0.05, 64, 512, 2, 10, 10);
        for (int t = 0; t < 100; ++t) CPPUNIT_ASSERT_DOUBLES_EQUAL(s.at(t), s.at_progress(t / 100.0, 512), 1e-12);
        // after warmup at batch 1024: 0.05 * 16 = 0.8 at the start of the cosine
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at_progress(0.2, 1024), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.4, s.at_progress(0.6, 1024), 1e-12);
        s.cosine = false;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at_progress(0.9, 1024), 1e-12);
    }

    // lr 0.05 for 64 scaled linearly to 0.8 at 1024; 2 warmup epochs of 10 steps; 10 epochs.
    static LrSchedule peak08_schedule() {
        return testing::schedule(0.05, 64, 1024, 2, 10, 10);
    }

    // Warmup-stable-decay: the peak until the last decay_fraction of the post-warmup steps,
    // then linear to 0; checked step by step against the formula written out here, for the
    // fixed, adaptive and progress forms of the schedule.
    void test_wsd_schedule() {
        LrSchedule s = peak08_schedule();  // T = 100 steps, W = 20
        s.decay_fraction = 0.25;  // hold 0.8 for 60 steps after warmup, then 20 steps to 0
        for (int t = 0; t < 100; ++t) {
            double want;
            if (t < 20) want = 0.05 + (0.8 - 0.05) * t / 20.0;
            else if (t < 80) want = 0.8;
            else want = 0.8 * (100 - t) / 20.0;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, s.at(t), 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, s.at_progress(t / 100.0, 1024), 1e-12);
        }
        // data-driven warmup ended at step 4: 96 steps after it, the last 24 decay
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at_adaptive(4, 4), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at_adaptive(76, 4), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8 * (100 - 88) / 24.0, s.at_adaptive(88, 4), 1e-12);
        // cosine is ignored once decay_fraction is set; 1 decays over all post-warmup steps
        s.cosine = false;
        s.decay_fraction = 1.0;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8 * (100 - 60) / 80.0, s.at(60), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, s.decay(0.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, s.decay(1.0), 1e-12);
        // decay_steps: the last 15 steps decay, whatever the run's length, after warmup fixed
        // or data-driven; the stable phase of a 100-step and a 70-step run is the same
        s.decay_steps = 15;
        for (int epochs : {10, 7}) {
            s.epochs = epochs;
            const int T = 10 * epochs;
            for (int t = 0; t < T; ++t) {
                const double want = t < 20 ? 0.05 + (0.8 - 0.05) * t / 20.0 : t < T - 15 ? 0.8 : 0.8 * (T - t) / 15.0;
                CPPUNIT_ASSERT_DOUBLES_EQUAL(want, s.at(t), 1e-12);
                if (t >= 4) CPPUNIT_ASSERT_DOUBLES_EQUAL(t < T - 15 ? 0.8 : 0.8 * (T - t) / 15.0, s.at_adaptive(t, 4), 1e-12);
            }
        }
    }

    // warmup_from: the ramp starts there instead of at lr (all three schedules).
    void test_warmup_from() {
        LrSchedule s = peak08_schedule();
        s.warmup_from = 0.001;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001, s.at(0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001 + (0.8 - 0.001) * 5 / 20.0, s.at(5), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at(20), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001 + (0.8 - 0.001) * 5 / 20.0, s.at_adaptive(5, -1), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at_adaptive(9, 9), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001, s.at_progress(0.0, 1024), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001 + (0.8 - 0.001) * 0.5, s.at_progress(0.1, 1024), 1e-12);
        // a peak at or below the start: no warmup
        s.warmup_from = 0.9;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, s.at(0), 1e-12);
    }

    void test_parse_kind() {
        for (OptimKind k : {OptimKind::Sgd, OptimKind::Ags, OptimKind::Lars, OptimKind::Lamb})
            CPPUNIT_ASSERT(parse_optim_kind(optim_kind_name(k)) == k);
        CPPUNIT_ASSERT_THROW(parse_optim_kind("adam"), std::invalid_argument);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerOptimTest);
