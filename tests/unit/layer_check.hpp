// Test fixtures shared by the CPU layer tests: a layer bound to its own buffers, random
// inputs, and the check of backward against central finite differences.
#pragma once
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/layers.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace tula {
namespace train {
namespace testing {

/// A layer with its own parameter, gradient and state buffers (the Model normally owns them),
/// configured for one example of shape `in` (C, H, W) and initialised from Rng(seed).
struct Bound {
    std::unique_ptr<Layer> layer;
    std::vector<float> params, grads, state;
    Shape out;
    Bound(std::unique_ptr<Layer> l, const Shape& in, uint64_t seed) : layer(std::move(l)) {
        out = layer->configure(in);
        size_t np = 0;
        for (const auto& p : layer->param_info()) np += p.size;
        params.assign(np, 0.0f);
        grads.assign(np, 0.0f);
        state.assign(layer->state_size(), 0.0f);
        layer->bind(params.data(), grads.data(), state.data());
        Rng rng(seed);
        layer->init(rng);
    }
};

/// A tensor (n, s.c, s.h, s.w) of N(0, scale^2) values.
inline Tensor random_tensor(int n, const Shape& s, Rng& rng, double scale = 1.0) {
    Tensor t(n, s.c, s.h, s.w);
    for (float& v : t.data) v = static_cast<float>(scale * rng.normal());
    return t;
}

/// Random values with |v| >= gap, so ReLU kinks are farther than any finite-difference step.
inline Tensor away_from_zero(int n, const Shape& s, Rng& rng, double gap) {
    Tensor t(n, s.c, s.h, s.w);
    for (float& v : t.data) {
        const double u = rng.uniform(gap, 1.0 + gap);
        v = static_cast<float>(rng.uniform() < 0.5 ? -u : u);
    }
    return t;
}

/// Fails naming `what` and the first element i with |want_i - got_i| > atol + rtol |want_i|.
inline void assert_close(const std::string& what, const std::vector<double>& want, const float* got, size_t n,
                         double rtol, double atol) {
    CPPUNIT_ASSERT_EQUAL_MESSAGE(what + ": size", want.size(), n);
    for (size_t i = 0; i < n; ++i) {
        const double tol = atol + rtol * std::fabs(want[i]);
        if (!(std::fabs(want[i] - got[i]) <= tol))
            CPPUNIT_FAIL(what + ": element " + std::to_string(i) + ": want " + std::to_string(want[i]) + ", got " +
                         std::to_string(got[i]));
    }
}

/// Loss f = sum_i r_i * y_i (in double) for a fixed random r: dL/dy = r.
inline double projected(const Tensor& y, const Tensor& r) {
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += static_cast<double>(r.data[i]) * y.data[i];
    return s;
}

/// Central differences (f(v + h) - f(v - h)) / 2h of f() with respect to each of v[0, n).
template <class F>
std::vector<double> central_differences(float* v, size_t n, double h, F f) {
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i) {
        const float keep = v[i];
        v[i] = static_cast<float>(keep + h);
        const double fp = f();
        v[i] = static_cast<float>(keep - h);
        const double fm = f();
        v[i] = keep;
        d[i] = (fp - fm) / (2 * h);
    }
    return d;
}

/// Checks the layer's backward against central differences of f(x, params) = <r, layer(x)>
/// for a random r drawn from Rng(seed). Every input and parameter coordinate is checked (the
/// sizes are small); the layer's state (BN running statistics) is restored before each
/// evaluation.
inline void check_gradients(const std::string& name, Bound& b, Tensor x, bool train, double h, double rtol,
                            double atol, uint64_t seed) {
    Rng rng(seed);
    const Tensor& y0 = b.layer->forward(x, train);
    Tensor r = random_tensor(y0.n, y0.shape(), rng);
    std::fill(b.grads.begin(), b.grads.end(), 0.0f);
    b.layer->set_need_input_grad(true);
    const Tensor dx = b.layer->backward(r);  // copy: the next forward may reuse the buffer
    const std::vector<float> dparams = b.grads;
    const std::vector<float> state0 = b.state;
    auto f = [&]() {
        b.state = state0;
        return projected(b.layer->forward(x, train), r);
    };
    CPPUNIT_ASSERT_MESSAGE(name + ": dx shape", dx.size() == x.size());
    assert_close(name + " dL/dx", central_differences(x.ptr(), x.size(), h, f), dx.ptr(), dx.size(), rtol, atol);
    assert_close(name + " dL/dparams", central_differences(b.params.data(), b.params.size(), h, f), dparams.data(),
                 dparams.size(), rtol, atol);
}

/// Direct convolution in double, the reference of the im2col + GEMM layers: x (N, C, H, W),
/// weight w (cout, C/g, k, k), optional bias (cout,), stride s, zero padding p, g groups;
/// returns y (N, cout, Ho, Wo) flattened.
inline std::vector<double> naive_conv2d(const Tensor& x, const float* w, const float* bias, int cout, int k, int s,
                                        int p, int g = 1) {
    const int ho = (x.h + 2 * p - k) / s + 1, wo = (x.w + 2 * p - k) / s + 1, cig = x.c / g, cog = cout / g;
    std::vector<double> y(static_cast<size_t>(x.n) * cout * ho * wo);
    for (int n = 0; n < x.n; ++n)
        for (int co = 0; co < cout; ++co)
            for (int oh = 0; oh < ho; ++oh)
                for (int ow = 0; ow < wo; ++ow) {
                    double acc = bias ? bias[co] : 0.0;
                    const int grp = co / cog;
                    for (int ci = 0; ci < cig; ++ci)
                        for (int ki = 0; ki < k; ++ki)
                            for (int kj = 0; kj < k; ++kj) {
                                const int ih = oh * s - p + ki, iw = ow * s - p + kj;
                                if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
                                acc += static_cast<double>(w[((co * cig + ci) * k + ki) * k + kj]) *
                                       x.data[((static_cast<size_t>(n) * x.c + grp * cig + ci) * x.h + ih) * x.w + iw];
                            }
                    y[((static_cast<size_t>(n) * cout + co) * ho + oh) * wo + ow] = acc;
                }
    return y;
}

}  // namespace testing
}  // namespace train
}  // namespace tula
