// Unit tests of the gradient noise scale estimator (McCandlish et al. 2018, App. A.1) and
// of the trainer's single-rank micro-batch measurement: the estimator recovers a known
// B_simple = tr(Sigma)/|G|^2 from synthetic per-example gradients G + noise with a chosen
// covariance; the two micro-batch gradients combine to the full batch's gradient.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "core/model.hpp"
#include "optim/noise_scale.hpp"
#include "core/rng.hpp"
#include "train/train.hpp"
#include "trainer_fixtures.hpp"

using namespace tula::train;

namespace {

// Squared norm of the mean of `b` synthetic per-example gradients g_i = G + xi_i,
// xi_i ~ N(0, diag(sd^2)) drawn independently.
double mean_grad_norm2(const std::vector<double>& G, const std::vector<double>& sd, int b, Rng& rng) {
    double s = 0;
    for (size_t j = 0; j < G.size(); ++j) {
        double m = 0;
        for (int i = 0; i < b; ++i) m += G[j] + sd[j] * rng.normal();
        m /= b;
        s += m * m;
    }
    return s;
}

}  // namespace

class TrainerNoiseScaleTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerNoiseScaleTest);
    CPPUNIT_TEST(test_single_observation_formula);
    CPPUNIT_TEST(test_recovers_known_noise_scale);
    CPPUNIT_TEST(test_recovers_with_other_sizes);
    CPPUNIT_TEST(test_rejects_bad_observations);
    CPPUNIT_TEST(test_micro_batches_give_full_batch_gradient);
    CPPUNIT_TEST_SUITE_END();

    // Recovery on a quadratic loss 0.5 |w - w*|^2 sampled with Gaussian noise: its
    // per-example gradient at w is (w - w*) + xi = G + xi. tr(Sigma) = sum sd_j^2 is known.
    void recover(int dim, int b_small, int b_big, double target, uint64_t seed) {
        Rng rng(seed);
        std::vector<double> G(dim), sd(dim);
        double tr = 0, g2 = 0;
        for (int j = 0; j < dim; ++j) {
            sd[j] = 0.5 + rng.uniform();  // anisotropic noise
            tr += sd[j] * sd[j];
            G[j] = rng.normal();
            g2 += G[j] * G[j];
        }
        // scale G so that B_simple = tr / |G|^2 is the target
        const double c = std::sqrt(tr / (target * g2));
        for (double& v : G) v *= c;
        double g2s = 0;
        for (double v : G) g2s += v * v;
        const double truth = tr / g2s;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(target, truth, 1e-9 * target);
        NoiseScale ns(0.995);
        for (int k = 0; k < 3000; ++k)
            CPPUNIT_ASSERT(ns.add(b_small, mean_grad_norm2(G, sd, b_small, rng), b_big, mean_grad_norm2(G, sd, b_big, rng)));
        CPPUNIT_ASSERT(ns.ready());
        const double got = ns.value();
        if (std::fabs(got - truth) > 0.15 * truth)
            CPPUNIT_FAIL("B_simple estimate " + std::to_string(got) + " vs true " + std::to_string(truth));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(tr, ns.trace(), 0.15 * tr);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(g2s, ns.grad_norm2(), 0.15 * g2s);
    }

    void test_recovers_known_noise_scale() { recover(40, 8, 64, 100.0, 11); }
    void test_recovers_with_other_sizes() { recover(25, 32, 64, 30.0, 12); }

    // One observation: the estimates are the App. A.1 expressions, written out here.
    void test_single_observation_formula() {
        NoiseScale ns(0.9);
        const double bs = 10, bb = 40, g2s = 3.0, g2b = 1.5;
        CPPUNIT_ASSERT(ns.add(bs, g2s, bb, g2b));
        const double G2 = (40 * 1.5 - 10 * 3.0) / 30.0;       // = 1
        const double T = (3.0 - 1.5) / (0.1 - 0.025);          // = 20
        CPPUNIT_ASSERT_DOUBLES_EQUAL(G2, ns.grad_norm2(), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(T, ns.trace(), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(T / G2, ns.value(), 1e-12);
        // second observation: EMA with weight 0.9 on the past
        CPPUNIT_ASSERT(ns.add(bs, 2.0, bb, 1.0));
        const double G2b = (40 * 1.0 - 10 * 2.0) / 30.0, Tb = (2.0 - 1.0) / 0.075;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9 * G2 + 0.1 * G2b, ns.grad_norm2(), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9 * T + 0.1 * Tb, ns.trace(), 1e-12);
    }

    void test_rejects_bad_observations() {
        NoiseScale ns;
        CPPUNIT_ASSERT(!ns.ready());
        CPPUNIT_ASSERT_EQUAL(0.0, ns.value());
        CPPUNIT_ASSERT(!ns.add(0, 1, 10, 1));
        CPPUNIT_ASSERT(!ns.add(10, 1, 10, 1));   // b_big must exceed b_small
        CPPUNIT_ASSERT(!ns.add(5, -1, 10, 1));
        CPPUNIT_ASSERT(!ns.add(5, NAN, 10, 1));
        CPPUNIT_ASSERT(!ns.add(5, 1, 10, INFINITY));
        CPPUNIT_ASSERT_EQUAL(static_cast<int64_t>(0), ns.count());
        // noiseless gradients (|G_small| = |G_big|): trace 0, no estimate, no division by 0
        CPPUNIT_ASSERT(ns.add(5, 2.0, 10, 2.0));
        CPPUNIT_ASSERT(!ns.ready());
        CPPUNIT_ASSERT_EQUAL(0.0, ns.value());
    }

    // With one rank and a measurement, Trainer::step runs two micro-batches; the update
    // must use the gradient of the whole batch: compare with a step without measurement
    // from the same weights (lenet5 has no batch norm, so the two agree up to rounding).
    void test_micro_batches_give_full_batch_gradient() {
        const Dataset d = tula::train::testing::random_images(24, 5);
        const std::vector<int> idx = testing::all_indices(d);
        Comm serial;
        auto a = build_model("lenet5");
        auto b = build_model("lenet5");
        a->init(3);
        b->init(3);
        Trainer ta(*a, serial, 0.9, 5e-4), tb(*b, serial, 0.9, 5e-4);
        StepStats sa, sb;
        const double la = ta.step(d, idx.data(), 23, 0.0, true, nullptr, &sa, false);  // odd size: 11 + 12
        const double lb = tb.step(d, idx.data(), 23, 0.0, true, nullptr, &sb, true);
        CPPUNIT_ASSERT(!sa.noise);
        CPPUNIT_ASSERT(sb.noise);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(la, lb, 1e-5 * std::fabs(la));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(11.5, sb.b_small, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(23.0, sb.b_big, 1e-12);
        double diff = 0, n2 = 0;
        for (size_t i = 0; i < a->num_params(); ++i) {
            const double e = static_cast<double>(a->grads()[i]) - b->grads()[i];
            diff += e * e;
            n2 += static_cast<double>(a->grads()[i]) * a->grads()[i];
        }
        CPPUNIT_ASSERT(n2 > 0);
        CPPUNIT_ASSERT(std::sqrt(diff) <= 1e-4 * std::sqrt(n2));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(sa.grad_norm2, sb.g2_big, 1e-4 * sa.grad_norm2);
        // micro-batch gradients are noisier: their mean |g|^2 exceeds the batch's
        CPPUNIT_ASSERT(sb.g2_small > sb.g2_big);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerNoiseScaleTest);
