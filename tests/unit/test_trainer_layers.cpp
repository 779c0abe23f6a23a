// Unit tests of tula-train's CPU layers: forward against naive direct implementations,
// backward (input and parameter gradients) against central finite differences, the
// softmax cross-entropy, and the GEMM dispatch (every compiled instruction set) against a
// naive product.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cpu/gemm/gemm.hpp"
#include "core/layers.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "layer_check.hpp"

using namespace tula::train;
using namespace tula::train::testing;

namespace {


}  // namespace

class TrainerLayersTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerLayersTest);
    CPPUNIT_TEST(test_conv_forward_matches_direct);
    CPPUNIT_TEST(test_conv_forward_batch_chunks);
    CPPUNIT_TEST(test_conv_backward_finite_differences);
    CPPUNIT_TEST(test_conv_init_statistics);
    CPPUNIT_TEST(test_batchnorm_forward_train_and_eval);
    CPPUNIT_TEST(test_batchnorm_backward_finite_differences);
    CPPUNIT_TEST(test_relu_forward_backward);
    CPPUNIT_TEST(test_maxpool_forward_matches_naive);
    CPPUNIT_TEST(test_maxpool_backward_finite_differences);
    CPPUNIT_TEST(test_linear_forward_matches_naive);
    CPPUNIT_TEST(test_linear_backward_finite_differences);
    CPPUNIT_TEST(test_linear_init_bounds);
    CPPUNIT_TEST(test_softmax_cross_entropy_value);
    CPPUNIT_TEST(test_softmax_cross_entropy_gradient);
    CPPUNIT_TEST(test_softmax_rejects_bad_label);
    CPPUNIT_TEST(test_shape_mismatch_throws);
    CPPUNIT_TEST(test_gemm_all_isas_match_naive);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_conv_forward_matches_direct() {
        struct Case { int cin, cout, k, s, p, h, w, n; bool bias; };
        const Case cases[] = {{1, 6, 5, 1, 2, 9, 8, 2, true}, {3, 4, 3, 1, 1, 7, 7, 3, false},
                              {2, 5, 3, 2, 1, 9, 7, 2, true}, {4, 3, 2, 1, 0, 5, 6, 1, true}};
        uint64_t seed = 11;
        for (const Case& c : cases) {
            Bound b(make_conv2d(c.cin, c.cout, c.k, c.s, c.p, c.bias), Shape{c.cin, c.h, c.w}, seed++);
            Rng rng(seed++);
            Tensor x = random_tensor(c.n, Shape{c.cin, c.h, c.w}, rng);
            const Tensor& y = b.layer->forward(x, true);
            const size_t nw = static_cast<size_t>(c.cout) * c.cin * c.k * c.k;
            const std::vector<float> w(b.params.begin(), b.params.begin() + nw);
            const auto want = naive_conv2d(x, w.data(), c.bias ? b.params.data() + nw : nullptr, c.cout, c.k, c.s, c.p);
            CPPUNIT_ASSERT_EQUAL(b.out.h, (c.h + 2 * c.p - c.k) / c.s + 1);
            assert_close("conv forward " + b.layer->describe(), want, y.ptr(), y.size(), 1e-4, 1e-4);
        }
    }

    void test_conv_forward_batch_chunks() {
        // enough images that the layer groups several per GEMM and has a partial last chunk
        Bound b(make_conv2d(2, 3, 3, 1, 1, true), Shape{2, 6, 6}, 5);
        Rng rng(6);
        Tensor x = random_tensor(301, Shape{2, 6, 6}, rng);
        const Tensor& y = b.layer->forward(x, true);
        const std::vector<float> w(b.params.begin(), b.params.begin() + 54);
        assert_close("conv forward, 301 images", naive_conv2d(x, w.data(), b.params.data() + 54, 3, 3, 1, 1), y.ptr(), y.size(),
                     1e-4, 1e-4);
    }

    void test_conv_backward_finite_differences() {
        {
            Bound b(make_conv2d(2, 3, 3, 1, 1, true), Shape{2, 5, 4}, 21);
            Rng rng(22);
            check_gradients("conv3x3 pad1", b, random_tensor(2, Shape{2, 5, 4}, rng), true, 1e-2, 2e-3, 2e-3, 23);
        }
        {
            Bound b(make_conv2d(2, 2, 3, 2, 1, false), Shape{2, 7, 6}, 24);
            Rng rng(25);
            check_gradients("conv3x3 stride2", b, random_tensor(2, Shape{2, 7, 6}, rng), true, 1e-2, 2e-3, 2e-3, 26);
        }
        {
            Bound b(make_conv2d(1, 2, 5, 1, 2, true), Shape{1, 6, 6}, 27);
            Rng rng(28);
            check_gradients("conv5x5 pad2", b, random_tensor(3, Shape{1, 6, 6}, rng), true, 1e-2, 2e-3, 2e-3, 29);
        }
    }

    void test_conv_init_statistics() {
        // He normal: std sqrt(2 / fan_in); checked on a large layer within sampling error.
        Bound b(make_conv2d(64, 64, 3, 1, 1, false), Shape{64, 4, 4}, 31);
        double s = 0, s2 = 0;
        for (float v : b.params) { s += v; s2 += static_cast<double>(v) * v; }
        const double n = static_cast<double>(b.params.size());
        const double sd = std::sqrt(s2 / n - (s / n) * (s / n));
        const double want = std::sqrt(2.0 / (64 * 9));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(want, sd, 0.02 * want);
        CPPUNIT_ASSERT(std::fabs(s / n) < 0.02 * want);
    }

    void test_batchnorm_forward_train_and_eval() {
        const Shape sh{3, 4, 5};
        Bound b(make_batchnorm2d(3), sh, 41);
        for (int c = 0; c < 3; ++c) {  // non-trivial gamma / beta
            b.params[c] = 0.5f + c;
            b.params[3 + c] = -0.25f * c;
        }
        Rng rng(42);
        Tensor x = random_tensor(4, sh, rng, 2.0);
        for (size_t i = 0; i < x.size(); ++i) x.data[i] += 1.5f;  // non-zero mean
        const Tensor y = b.layer->forward(x, true);
        const size_t hw = 20;
        std::vector<double> want(x.size());
        for (int c = 0; c < 3; ++c) {
            double mean = 0, var = 0;
            const double m = 4.0 * hw;
            for (int n = 0; n < 4; ++n)
                for (size_t i = 0; i < hw; ++i) mean += x.sample(n)[c * hw + i];
            mean /= m;
            for (int n = 0; n < 4; ++n)
                for (size_t i = 0; i < hw; ++i) var += std::pow(x.sample(n)[c * hw + i] - mean, 2);
            const double biased = var / m, unbiased = var / (m - 1);
            for (int n = 0; n < 4; ++n)
                for (size_t i = 0; i < hw; ++i)
                    want[n * 60 + c * hw + i] =
                        b.params[c] * (x.sample(n)[c * hw + i] - mean) / std::sqrt(biased + 1e-5) + b.params[3 + c];
            // running statistics after one step from (0, 1) with momentum 0.1
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.1 * mean, b.state[c], 1e-5);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9 + 0.1 * unbiased, b.state[3 + c], 1e-4);
        }
        assert_close("batchnorm train forward", want, y.ptr(), y.size(), 1e-4, 1e-4);

        // evaluation mode uses the running statistics
        const Tensor ye = b.layer->forward(x, false);
        for (int c = 0; c < 3; ++c)
            for (int n = 0; n < 4; ++n)
                for (size_t i = 0; i < hw; ++i)
                    want[n * 60 + c * hw + i] =
                        b.params[c] * (x.sample(n)[c * hw + i] - b.state[c]) / std::sqrt(b.state[3 + c] + 1e-5) +
                        b.params[3 + c];
        assert_close("batchnorm eval forward", want, ye.ptr(), ye.size(), 1e-4, 1e-4);
    }

    void test_batchnorm_backward_finite_differences() {
        const Shape sh{2, 3, 3};
        {
            Bound b(make_batchnorm2d(2), sh, 51);
            b.params = {0.7f, 1.3f, 0.2f, -0.4f};
            Rng rng(52);
            check_gradients("batchnorm train", b, random_tensor(3, sh, rng), true, 1e-2, 5e-3, 3e-3, 53);
        }
        {
            Bound b(make_batchnorm2d(2), sh, 54);
            b.params = {0.7f, 1.3f, 0.2f, -0.4f};
            b.state = {0.3f, -0.1f, 2.0f, 0.5f};
            Rng rng(55);
            check_gradients("batchnorm eval", b, random_tensor(3, sh, rng), false, 1e-2, 2e-3, 2e-3, 56);
        }
    }

    void test_relu_forward_backward() {
        const Shape sh{3, 5, 7};  // 105 values per example: exercises the vector tail
        Bound b(make_relu(), sh, 61);
        Rng rng(62);
        Tensor x = away_from_zero(2, sh, rng, 0.05);
        const Tensor& y = b.layer->forward(x, true);
        std::vector<double> want(x.size());
        for (size_t i = 0; i < x.size(); ++i) want[i] = x.data[i] > 0 ? x.data[i] : 0.0;
        assert_close("relu forward", want, y.ptr(), y.size(), 0, 0);
        check_gradients("relu", b, x, true, 1e-2, 1e-3, 1e-3, 63);
    }

    void test_maxpool_forward_matches_naive() {
        for (int k : {2, 3}) {
            const Shape sh{2, 7, 9};  // odd sizes: the last row / column are dropped (floor)
            Bound b(make_maxpool2d(k), sh, 71);
            Rng rng(72 + k);
            Tensor x = random_tensor(3, sh, rng);
            const Tensor& y = b.layer->forward(x, true);
            const int ho = 7 / k, wo = 9 / k;
            CPPUNIT_ASSERT_EQUAL(ho, b.out.h);
            CPPUNIT_ASSERT_EQUAL(wo, b.out.w);
            std::vector<double> want;
            for (int n = 0; n < 3; ++n)
                for (int c = 0; c < 2; ++c)
                    for (int oh = 0; oh < ho; ++oh)
                        for (int ow = 0; ow < wo; ++ow) {
                            double m = -1e300;
                            for (int i = 0; i < k; ++i)
                                for (int j = 0; j < k; ++j)
                                    m = std::max<double>(m, x.sample(n)[(c * 7 + oh * k + i) * 9 + ow * k + j]);
                            want.push_back(m);
                        }
            assert_close("maxpool" + std::to_string(k) + " forward", want, y.ptr(), y.size(), 0, 0);
        }
    }

    void test_maxpool_backward_finite_differences() {
        // distinct values at least 0.05 apart, so a step of 0.01 never changes a window's winner
        const Shape sh{2, 4, 6};
        Bound b(make_maxpool2d(2), sh, 81);
        Tensor x(2, 2, 4, 6);
        std::vector<int> order(x.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
        Rng rng(82);
        rng.shuffle(order.data(), order.size());
        for (size_t i = 0; i < x.size(); ++i) x.data[i] = 0.05f * order[i] - 2.0f;
        check_gradients("maxpool2", b, x, true, 1e-2, 1e-3, 1e-3, 83);
    }

    void test_linear_forward_matches_naive() {
        const Shape sh{3, 2, 2};  // flattened to 12 features
        Bound b(make_linear(12, 5), sh, 91);
        Rng rng(92);
        Tensor x = random_tensor(4, sh, rng);
        const Tensor& y = b.layer->forward(x, true);
        CPPUNIT_ASSERT_EQUAL(5, y.c);
        std::vector<double> want;
        for (int n = 0; n < 4; ++n)
            for (int o = 0; o < 5; ++o) {
                double acc = b.params[60 + o];
                for (int i = 0; i < 12; ++i) acc += static_cast<double>(b.params[o * 12 + i]) * x.sample(n)[i];
                want.push_back(acc);
            }
        assert_close("linear forward", want, y.ptr(), y.size(), 1e-5, 1e-5);
    }

    void test_linear_backward_finite_differences() {
        Bound b(make_linear(7, 4), Shape{7, 1, 1}, 101);
        Rng rng(102);
        check_gradients("linear", b, random_tensor(3, Shape{7, 1, 1}, rng), true, 1e-2, 1e-3, 1e-3, 103);
    }

    void test_linear_init_bounds() {
        // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weight and bias: all inside, spread over the range
        Bound b(make_linear(400, 120), Shape{400, 1, 1}, 111);
        const double bound = 1.0 / std::sqrt(400.0);
        double lo = 1, hi = -1, s2 = 0;
        for (float v : b.params) {
            lo = std::min<double>(lo, v);
            hi = std::max<double>(hi, v);
            s2 += static_cast<double>(v) * v;
        }
        CPPUNIT_ASSERT(lo >= -bound && hi <= bound);
        CPPUNIT_ASSERT(lo < -0.99 * bound && hi > 0.99 * bound);
        // variance of U(-a, a) is a^2 / 3
        CPPUNIT_ASSERT_DOUBLES_EQUAL(bound * bound / 3, s2 / b.params.size(), 0.03 * bound * bound / 3);
    }

    void test_softmax_cross_entropy_value() {
        Rng rng(121);
        Tensor z = random_tensor(5, Shape{4, 1, 1}, rng, 3.0);
        z.data[3] = 80.0f;  // large logit: must not overflow
        const int labels[5] = {0, 3, 2, 1, 3};
        SoftmaxCrossEntropy ce;
        int64_t correct = 0;
        const double loss = ce.forward(z, labels, 5, &correct);
        double want = 0;
        int64_t want_correct = 0;
        for (int i = 0; i < 5; ++i) {
            double m = -1e300;
            int arg = 0;
            for (int j = 0; j < 4; ++j)
                if (z.sample(i)[j] > m) { m = z.sample(i)[j]; arg = j; }
            double s = 0;
            for (int j = 0; j < 4; ++j) s += std::exp(z.sample(i)[j] - m);
            want += -(z.sample(i)[labels[i]] - m - std::log(s));
            want_correct += arg == labels[i];
        }
        CPPUNIT_ASSERT_DOUBLES_EQUAL(want / 5, loss, 1e-5);
        CPPUNIT_ASSERT_EQUAL(want_correct, correct);
        CPPUNIT_ASSERT(std::isfinite(loss));
    }

    void test_softmax_cross_entropy_gradient() {
        Rng rng(131);
        Tensor z = random_tensor(3, Shape{6, 1, 1}, rng, 2.0);
        const int labels[3] = {5, 0, 2};
        SoftmaxCrossEntropy ce;
        ce.forward(z, labels, 3, nullptr);
        const Tensor g = ce.backward();
        const double h = 1e-2;
        std::vector<double> want(z.size());
        for (size_t i = 0; i < z.size(); ++i) {
            const float keep = z.data[i];
            z.data[i] = static_cast<float>(keep + h);
            const double fp = ce.forward(z, labels, 3, nullptr);
            z.data[i] = static_cast<float>(keep - h);
            const double fm = ce.forward(z, labels, 3, nullptr);
            z.data[i] = keep;
            want[i] = (fp - fm) / (2 * h);
        }
        assert_close("softmax cross-entropy dL/dz", want, g.ptr(), g.size(), 2e-3, 2e-4);
    }

    void test_softmax_rejects_bad_label() {
        Tensor z(2, 3, 1, 1);
        const int labels[2] = {1, 3};
        SoftmaxCrossEntropy ce;
        CPPUNIT_ASSERT_THROW(ce.forward(z, labels, 2, nullptr), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(ce.forward(z, labels, 1, nullptr), std::invalid_argument);  // count mismatch
    }

    void test_shape_mismatch_throws() {
        CPPUNIT_ASSERT_THROW(Bound(make_conv2d(3, 4, 3, 1, 0, true), Shape{2, 5, 5}, 1),
                             std::invalid_argument);
        CPPUNIT_ASSERT_THROW(Bound(make_conv2d(1, 4, 5, 1, 0, true), Shape{1, 3, 3}, 1),
                             std::invalid_argument);
        CPPUNIT_ASSERT_THROW(Bound(make_linear(10, 4), Shape{3, 2, 2}, 1), std::invalid_argument);
        Bound b(make_linear(12, 4), Shape{3, 2, 2}, 1);
        Tensor wrong(2, 12, 1, 1);  // right size, wrong shape
        CPPUNIT_ASSERT_THROW(b.layer->forward(wrong, true), std::invalid_argument);
    }

    void test_gemm_all_isas_match_naive() {
        // not multiples of any vector width; the second exceeds the AVX-512 micro-kernel (48 x 8)
        gemm_all_isas(13, 37, 29);
        gemm_all_isas(101, 70, 67);
    }
    void gemm_all_isas(const long m, const long n, const long k) {
        Rng rng(141);
        std::vector<float> a(m * k), bm(k * n), c0(m * n);
        for (float& v : a) v = static_cast<float>(rng.normal());
        for (float& v : bm) v = static_cast<float>(rng.normal());
        for (float& v : c0) v = static_cast<float>(rng.normal());
        for (GemmIsa isa : {GemmIsa::Generic, GemmIsa::Avx2, GemmIsa::Avx512}) {
            if (!gemm_isa_available(isa)) continue;
            for (int ta = 0; ta < 2; ++ta)
                for (int tb = 0; tb < 2; ++tb)
                    for (int acc = 0; acc < 2; ++acc) {
                        // A holds op(A) (m, k) stored as (m, k) or transposed (k, m); same for B
                        std::vector<float> as(a.size()), bs(bm.size());
                        for (long i = 0; i < m; ++i)
                            for (long j = 0; j < k; ++j) as[ta ? j * m + i : i * k + j] = a[i * k + j];
                        for (long i = 0; i < k; ++i)
                            for (long j = 0; j < n; ++j) bs[tb ? j * k + i : i * n + j] = bm[i * n + j];
                        std::vector<float> c = c0;
                        gemm_with(isa, ta, tb, m, n, k, as.data(), bs.data(), c.data(), acc);
                        std::vector<double> want(m * n);
                        for (long i = 0; i < m; ++i)
                            for (long j = 0; j < n; ++j) {
                                double s = acc ? c0[i * n + j] : 0.0;
                                for (long l = 0; l < k; ++l) s += static_cast<double>(a[i * k + l]) * bm[l * n + j];
                                want[i * n + j] = s;
                            }
                        assert_close("gemm " + gemm_isa_name(isa) + " ta=" + std::to_string(ta) +
                                         " tb=" + std::to_string(tb) + " acc=" + std::to_string(acc),
                                     want, c.data(), c.size(), 1e-4, 1e-4);
                    }
        }
        // the product of empty inner dimension is zero (or leaves C when accumulating)
        std::vector<float> c = c0;
        gemm(false, false, m, n, 0, a.data(), bm.data(), c.data(), false);
        for (float v : c) CPPUNIT_ASSERT_EQUAL(0.0f, v);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerLayersTest);
