// Unit tests of the CPU layers of the larger models (grouped / depthwise convolution, strided max
// pooling, average and adaptive average pooling, dropout, hard-sigmoid, hard-swish,
// residual, squeeze-and-excitation, sequential blocks) and of label smoothing: forward
// against naive direct implementations written here, backward against central finite
// differences of f = <r, layer(x)> for a fixed random r.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/layers.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "layer_check.hpp"

using namespace tula::train;
using namespace tula::train::testing;

namespace {


// Values that are pairwise distinct with gaps >= 0.05 (max pooling stays differentiable
// under steps of 1e-3).
Tensor distinct(int n, const Shape& s, Rng& rng) {
    Tensor t(n, s.c, s.h, s.w);
    std::vector<int> perm(t.size());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int>(i);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[static_cast<size_t>(rng.uniform() * i)]);
    for (size_t i = 0; i < t.size(); ++i) t.data[i] = 0.05f * perm[i] - 0.025f * t.size();
    return t;
}

}  // namespace

class TrainerBlocksTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerBlocksTest);
    CPPUNIT_TEST(test_grouped_conv_forward_matches_direct);
    CPPUNIT_TEST(test_grouped_conv_backward_finite_differences);
    CPPUNIT_TEST(test_grouped_conv_rejects_bad_groups);
    CPPUNIT_TEST(test_strided_maxpool);
    CPPUNIT_TEST(test_avgpool_and_adaptive);
    CPPUNIT_TEST(test_dropout);
    CPPUNIT_TEST(test_hard_activations);
    CPPUNIT_TEST(test_residual);
    CPPUNIT_TEST(test_squeeze_excitation);
    CPPUNIT_TEST(test_sequential_block_with_batchnorm);
    CPPUNIT_TEST(test_label_smoothing);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_grouped_conv_forward_matches_direct() {
        struct Case { int cin, cout, k, s, p, g, h, w, n; bool bias; };
        const Case cases[] = {{4, 6, 3, 1, 1, 2, 6, 5, 2, true},   // 2 groups
                              {6, 6, 3, 2, 1, 6, 7, 7, 2, false},  // depthwise, stride 2
                              {3, 3, 5, 1, 2, 3, 6, 6, 1, true},   // depthwise 5x5
                              {4, 8, 1, 1, 0, 4, 3, 4, 2, true}};  // grouped 1x1
        uint64_t seed = 101;
        for (const Case& c : cases) {
            Bound b(make_conv2d(c.cin, c.cout, c.k, c.s, c.p, c.bias, c.g), Shape{c.cin, c.h, c.w},
                     seed++);
            Rng rng(seed++);
            Tensor x = random_tensor(c.n, Shape{c.cin, c.h, c.w}, rng);
            const Tensor& y = b.layer->forward(x, true);
            const size_t nw = static_cast<size_t>(c.cout) * (c.cin / c.g) * c.k * c.k;
            CPPUNIT_ASSERT_EQUAL(nw + (c.bias ? c.cout : 0), b.params.size());
            assert_close("grouped conv " + b.layer->describe(),
                  naive_conv2d(x, b.params.data(), c.bias ? b.params.data() + nw : nullptr, c.cout, c.k, c.s, c.p, c.g),
                  y.ptr(), y.size(), 1e-4, 1e-4);
        }
    }

    void test_grouped_conv_backward_finite_differences() {
        {
            Bound b(make_conv2d(4, 6, 3, 1, 1, true, 2), Shape{4, 5, 4}, 111);
            Rng rng(112);
            check_gradients("conv groups 2", b, random_tensor(2, Shape{4, 5, 4}, rng), true, 1e-2, 2e-3, 2e-3, 113);
        }
        {
            Bound b(make_conv2d(3, 3, 3, 2, 1, false, 3), Shape{3, 7, 6}, 114);
            Rng rng(115);
            check_gradients("depthwise stride 2", b, random_tensor(2, Shape{3, 7, 6}, rng), true, 1e-2, 2e-3, 2e-3, 116);
        }
    }

    void test_grouped_conv_rejects_bad_groups() {
        CPPUNIT_ASSERT_THROW(make_conv2d(4, 6, 3, 1, 1, true, 3), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(make_conv2d(4, 4, 3, 1, 1, true, 0), std::invalid_argument);
    }

    void test_strided_maxpool() {
        Bound b(make_maxpool2d(3, 2), Shape{2, 7, 8}, 1);
        CPPUNIT_ASSERT(b.out == (Shape{2, 3, 3}));
        Rng rng(121);
        Tensor x = distinct(2, Shape{2, 7, 8}, rng);
        const Tensor& y = b.layer->forward(x, true);
        std::vector<double> want;
        for (int n = 0; n < 2; ++n)
            for (int c = 0; c < 2; ++c)
                for (int i = 0; i < 3; ++i)
                    for (int j = 0; j < 3; ++j) {
                        double m = -1e30;
                        for (int a = 0; a < 3; ++a)
                            for (int d = 0; d < 3; ++d)
                                m = std::max(m, static_cast<double>(x.data[((n * 2 + c) * 7 + 2 * i + a) * 8 + 2 * j + d]));
                        want.push_back(m);
                    }
        assert_close("maxpool 3/2 forward", want, y.ptr(), y.size(), 0, 0);
        check_gradients("maxpool 3/2", b, x, true, 1e-3, 1e-3, 1e-3, 122);
    }

    void test_avgpool_and_adaptive() {
        // adaptive 5x7 -> 3x2: PyTorch windows rows [0,2) [1,4) [3,5); cols [0,4) [3,7)
        {
            Bound b(make_adaptive_avgpool2d(3, 2), Shape{1, 5, 7}, 1);
            Rng rng(133);
            Tensor x = random_tensor(1, Shape{1, 5, 7}, rng);
            const Tensor& y = b.layer->forward(x, true);
            const int r[3][2] = {{0, 2}, {1, 4}, {3, 5}}, c[2][2] = {{0, 4}, {3, 7}};
            std::vector<double> want;
            for (auto& rr : r)
                for (auto& cc : c) {
                    double s = 0;
                    for (int i = rr[0]; i < rr[1]; ++i)
                        for (int j = cc[0]; j < cc[1]; ++j) s += x.data[i * 7 + j];
                    want.push_back(s / ((rr[1] - rr[0]) * (cc[1] - cc[0])));
                }
            assert_close("adaptive avgpool forward", want, y.ptr(), y.size(), 1e-5, 1e-6);
            check_gradients("adaptive avgpool", b, x, true, 1e-2, 1e-3, 1e-3, 134);
        }
        // 1x1 -> 7x7 replicates; global average pooling is the plain mean
        {
            Bound b(make_adaptive_avgpool2d(7, 7), Shape{2, 1, 1}, 1);
            Tensor x(1, 2, 1, 1);
            x.data = {1.5f, -2.0f};
            const Tensor& y = b.layer->forward(x, true);
            for (int i = 0; i < 49; ++i) {
                CPPUNIT_ASSERT_EQUAL(1.5f, y.data[i]);
                CPPUNIT_ASSERT_EQUAL(-2.0f, y.data[49 + i]);
            }
            Bound g(make_global_avgpool(), Shape{3, 4, 5}, 1);
            Rng rng(135);
            Tensor z = random_tensor(2, Shape{3, 4, 5}, rng);
            const Tensor& gy = g.layer->forward(z, true);
            std::vector<double> want;
            for (int p = 0; p < 6; ++p) {
                double s = 0;
                for (int i = 0; i < 20; ++i) s += z.data[p * 20 + i];
                want.push_back(s / 20);
            }
            assert_close("global avgpool", want, gy.ptr(), gy.size(), 1e-5, 1e-6);
            check_gradients("global avgpool", g, z, true, 1e-2, 1e-3, 1e-3, 136);
        }
    }

    void test_dropout() {
        const double p = 0.3;
        Bound b(make_dropout(p), Shape{4, 16, 16}, 7);
        Rng rng(141);
        Tensor x = random_tensor(8, Shape{4, 16, 16}, rng);
        for (float& v : x.data) v = std::fabs(v) + 0.1f;  // nonzero, so y/x recovers the mask
        const Tensor y = b.layer->forward(x, true);
        size_t zeros = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            if (y.data[i] == 0.0f) ++zeros;
            else CPPUNIT_ASSERT_DOUBLES_EQUAL(x.data[i] / (1 - p), y.data[i], 1e-5 * std::fabs(y.data[i]));
        }
        // Bernoulli(0.3) over 8192 values: mean 0.3, sd ~0.005; 6 sd bounds
        const double frac = static_cast<double>(zeros) / x.size();
        CPPUNIT_ASSERT(frac > p - 0.03 && frac < p + 0.03);
        Tensor g = random_tensor(8, Shape{4, 16, 16}, rng);
        const Tensor& dx = b.layer->backward(g);
        for (size_t i = 0; i < x.size(); ++i)
            CPPUNIT_ASSERT_DOUBLES_EQUAL(g.data[i] * y.data[i] / x.data[i], dx.data[i], 1e-5);
        // evaluation: identity
        const Tensor& ye = b.layer->forward(x, false);
        for (size_t i = 0; i < x.size(); ++i) CPPUNIT_ASSERT_EQUAL(x.data[i], ye.data[i]);
        CPPUNIT_ASSERT_THROW(make_dropout(1.0), std::invalid_argument);
    }

    void test_hard_activations() {
        Rng rng(151);
        Tensor x(1, 64, 1, 1);
        for (float& v : x.data) {  // spread over [-5, 5], away from the kinks at -3 and 3
            double u;
            do u = rng.uniform(-5, 5);
            while (std::fabs(std::fabs(u) - 3) < 0.05);
            v = static_cast<float>(u);
        }
        for (int swish = 0; swish < 2; ++swish) {
            Bound b(swish ? make_hardswish() : make_hardsigmoid(), Shape{64, 1, 1}, 1);
            const Tensor& y = b.layer->forward(x, true);
            std::vector<double> want;
            for (float v : x.data) {
                const double hs = v <= -3 ? 0.0 : (v >= 3 ? 1.0 : (v + 3.0) / 6.0);
                want.push_back(swish ? v * hs : hs);
            }
            assert_close(b.layer->describe() + " forward", want, y.ptr(), y.size(), 1e-6, 1e-6);
            check_gradients(b.layer->describe(), b, x, true, 1e-2, 1e-3, 1e-4, 152);
        }
    }

    void test_residual() {
        // identity shortcut: y = conv(x) + x
        {
            Bound b(make_residual(make_conv2d(3, 3, 3, 1, 1, true), nullptr), Shape{3, 5, 5}, 161);
            Rng rng(162);
            Tensor x = random_tensor(2, Shape{3, 5, 5}, rng);
            const Tensor& y = b.layer->forward(x, true);
            std::vector<double> want = naive_conv2d(x, b.params.data(), b.params.data() + 81, 3, 3, 1, 1, 1);
            for (size_t i = 0; i < want.size(); ++i) want[i] += x.data[i];
            assert_close("residual identity forward", want, y.ptr(), y.size(), 1e-4, 1e-4);
            check_gradients("residual identity", b, x, true, 1e-2, 2e-3, 2e-3, 163);
        }
        // projection shortcut with stride 2
        {
            Bound b(make_residual(make_conv2d(2, 4, 3, 2, 1, false),
                                   make_conv2d(2, 4, 1, 2, 0, false)),
                     Shape{2, 6, 6}, 164);
            CPPUNIT_ASSERT(b.out == (Shape{4, 3, 3}));
            Rng rng(165);
            Tensor x = random_tensor(2, Shape{2, 6, 6}, rng);
            const Tensor& y = b.layer->forward(x, true);
            std::vector<double> want = naive_conv2d(x, b.params.data(), nullptr, 4, 3, 2, 1, 1);
            const std::vector<double> sc = naive_conv2d(x, b.params.data() + 72, nullptr, 4, 1, 2, 0, 1);
            for (size_t i = 0; i < want.size(); ++i) want[i] += sc[i];
            assert_close("residual projection forward", want, y.ptr(), y.size(), 1e-4, 1e-4);
            check_gradients("residual projection", b, x, true, 1e-2, 2e-3, 2e-3, 166);
        }
        CPPUNIT_ASSERT_THROW(Bound(make_residual(make_conv2d(2, 4, 3, 1, 1, false), nullptr),
                                    Shape{2, 5, 5}, 1),
                             std::invalid_argument);
    }

    void test_squeeze_excitation() {
        const int C = 4, S = 2;
        Bound b(make_squeeze_excitation(C, S), Shape{C, 3, 3}, 171);
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(C * S + S + S * C + C), b.params.size());
        Rng rng(172);
        for (float& v : b.params) v = static_cast<float>(rng.normal());  // pre-activations away from 0 mostly
        Tensor x = random_tensor(2, Shape{C, 3, 3}, rng);
        const Tensor& y = b.layer->forward(x, true);
        const float* W1 = b.params.data();
        const float* b1 = W1 + C * S;
        const float* W2 = b1 + S;
        const float* b2 = W2 + S * C;
        std::vector<double> want;
        for (int n = 0; n < 2; ++n) {
            double m[C], h[S], s[C];
            for (int c = 0; c < C; ++c) {
                m[c] = 0;
                for (int i = 0; i < 9; ++i) m[c] += x.data[(n * C + c) * 9 + i] / 9.0;
            }
            for (int j = 0; j < S; ++j) {
                h[j] = b1[j];
                for (int c = 0; c < C; ++c) h[j] += W1[j * C + c] * m[c];
                h[j] = std::max(0.0, h[j]);
            }
            for (int c = 0; c < C; ++c) {
                double z = b2[c];
                for (int j = 0; j < S; ++j) z += W2[c * S + j] * h[j];
                s[c] = std::min(1.0, std::max(0.0, (z + 3) / 6));
            }
            for (int c = 0; c < C; ++c)
                for (int i = 0; i < 9; ++i) want.push_back(x.data[(n * C + c) * 9 + i] * s[c]);
        }
        assert_close("squeeze-excitation forward", want, y.ptr(), y.size(), 1e-5, 1e-5);
        check_gradients("squeeze-excitation", b, x, true, 1e-3, 3e-3, 3e-3, 173);
    }

    void test_sequential_block_with_batchnorm() {
        std::vector<std::unique_ptr<Layer>> L;
        L.push_back(make_conv2d(2, 3, 3, 1, 1, false));
        L.push_back(make_batchnorm2d(3));
        L.push_back(make_hardswish());
        Bound b(make_sequential(std::move(L), "block"), Shape{2, 4, 4}, 181);
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(54 + 6), b.params.size());
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(6), b.layer->state_size());
        // BN init: gamma 1 beta 0 in the block's slice, running var 1
        for (int i = 0; i < 3; ++i) {
            CPPUNIT_ASSERT_EQUAL(1.0f, b.params[54 + i]);
            CPPUNIT_ASSERT_EQUAL(0.0f, b.params[57 + i]);
            CPPUNIT_ASSERT_EQUAL(1.0f, b.state[3 + i]);
        }
        Rng rng(182);
        check_gradients("conv-bn-hardswish block", b, random_tensor(3, Shape{2, 4, 4}, rng), true, 1e-2, 5e-3, 5e-3, 183);
    }

    void test_label_smoothing() {
        const int N = 3, K = 5;
        const float eps = 0.1f;
        Rng rng(191);
        Tensor z = random_tensor(N, Shape{K, 1, 1}, rng, 2.0);
        const int labels[N] = {0, 3, 4};
        SoftmaxCrossEntropy ce;
        ce.set_label_smoothing(eps);
        auto naive = [&](const Tensor& t) {
            double L = 0;
            for (int i = 0; i < N; ++i) {
                double s = 0;
                for (int j = 0; j < K; ++j) s += std::exp(static_cast<double>(t.data[i * K + j]));
                for (int j = 0; j < K; ++j) {
                    const double q = (j == labels[i] ? 1.0 - eps : 0.0) + eps / K;
                    L -= q * (t.data[i * K + j] - std::log(s));
                }
            }
            return L / N;
        };
        CPPUNIT_ASSERT_DOUBLES_EQUAL(naive(z), ce.forward(z, labels, N, nullptr), 1e-5);
        const Tensor dz = ce.backward();
        std::vector<double> want(z.size());
        const double h = 1e-3;
        for (size_t i = 0; i < z.size(); ++i) {
            Tensor zp = z, zm = z;
            zp.data[i] += static_cast<float>(h);
            zm.data[i] -= static_cast<float>(h);
            want[i] = (naive(zp) - naive(zm)) / (2 * h);
        }
        assert_close("label smoothing dL/dz", want, dz.ptr(), dz.size(), 1e-3, 1e-4);
        CPPUNIT_ASSERT_THROW(ce.set_label_smoothing(1.0f), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(ce.set_label_smoothing(-0.1f), std::invalid_argument);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerBlocksTest);
