// tula-train: the configuration, parameter layout and initialisation of the leaf layers whose
// CPU (trainer/cpu/) and GPU (trainer/cuda/) implementations must agree, written once. A
// layer's parameters are laid out in the Model's fused buffers in param_info() order
// (core/layers.hpp), and CPU and GPU models exchange those buffers with one copy, so both
// families derive from LeafLayer<Base, Spec> and take their names, shapes, parameter lists and
// (on the host) initial values from a Spec here.
#pragma once
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/layers.hpp"

namespace tula {
namespace train {
namespace spec {

/// Fully connected layer, in_f -> out_f features.
struct Linear {
    int in_f, out_f;
    /// Errors: std::invalid_argument unless both are positive.
    Linear(int in, int out) : in_f(in), out_f(out) {
        if (in_f <= 0 || out_f <= 0) throw std::invalid_argument("linear: features must be positive");
    }
    /// "fc(IN->OUT)".
    std::string name() const { return "fc(" + std::to_string(in_f) + "->" + std::to_string(out_f) + ")"; }
    /// The output shape (out_f, 1, 1) for an example of shape `in` (C, H, W) with C*H*W = in_f.
    /// Errors: std::invalid_argument naming the layer otherwise.
    Shape output(const Shape& in) const {
        if (in.size() != static_cast<size_t>(in_f))
            throw std::invalid_argument(name() + ": input " + in.str() + " has " + std::to_string(in.size()) +
                                        " features");
        return Shape{out_f, 1, 1};
    }
    /// weight (out_f, in_f) with weight decay, bias (out_f,) without (PyTorch's layout).
    std::vector<ParamInfo> params() const {
        return {{"weight", static_cast<size_t>(in_f) * out_f, true}, {"bias", static_cast<size_t>(out_f), false}};
    }
    size_t state_size() const { return 0; }
    /// Weight and bias U(-1/sqrt(in_f), 1/sqrt(in_f)), PyTorch's nn.Linear default.
    /// params: (out_f*in_f + out_f) floats.
    void init(float* params, float*, Rng& rng) const {
        const double bound = 1.0 / std::sqrt(static_cast<double>(in_f));
        const size_t n = static_cast<size_t>(in_f) * out_f + out_f;
        for (size_t i = 0; i < n; ++i) params[i] = static_cast<float>(rng.uniform(-bound, bound));
    }
};

/// Batch normalization over `c` channels (Ioffe & Szegedy 2015).
struct BatchNorm {
    int c;
    /// Errors: std::invalid_argument unless c > 0.
    explicit BatchNorm(int channels) : c(channels) {
        if (c <= 0) throw std::invalid_argument("batchnorm2d: channels must be positive");
    }
    /// "batchnorm(C)".
    std::string name() const { return "batchnorm(" + std::to_string(c) + ")"; }
    /// The output shape (= `in`). Errors: std::invalid_argument when in.c != c.
    Shape output(const Shape& in) const {
        if (in.c != c) throw std::invalid_argument(name() + ": input has " + std::to_string(in.c) + " channels");
        return in;
    }
    /// gamma (c,) and beta (c,), neither decayed.
    std::vector<ParamInfo> params() const {
        return {{"gamma", static_cast<size_t>(c), false}, {"beta", static_cast<size_t>(c), false}};
    }
    /// The running mean (c,) then the running variance (c,): 2c floats of state.
    size_t state_size() const { return 2 * static_cast<size_t>(c); }
    /// gamma = 1, beta = 0, running mean 0, running variance 1 (Ioffe & Szegedy 2015; PyTorch).
    void init(float* params, float* state, Rng&) const {
        for (int i = 0; i < c; ++i) {
            params[i] = 1.0f;
            params[c + i] = 0.0f;
            state[i] = 0.0f;
            state[c + i] = 1.0f;
        }
    }
};

/// Convolution cin -> cout, k x k kernel, stride s, padding p, `groups` groups (groups = cin =
/// cout: depthwise), with or without bias.
struct Conv {
    int cin, cout, k, s, p, groups;
    bool bias;
    /// Errors: std::invalid_argument unless the sizes are positive (padding >= 0) and groups
    /// divides cin and cout.
    Conv(int cin_, int cout_, int k_, int s_, int p_, int groups_, bool bias_)
        : cin(cin_), cout(cout_), k(k_), s(s_), p(p_), groups(groups_), bias(bias_) {
        if (cin <= 0 || cout <= 0 || k <= 0 || s <= 0 || p < 0 || groups <= 0)
            throw std::invalid_argument("conv2d: channels, kernel, stride and groups must be positive, padding >= 0");
        if (cin % groups != 0 || cout % groups != 0)
            throw std::invalid_argument("conv2d: groups (" + std::to_string(groups) + ") must divide the input (" +
                                        std::to_string(cin) + ") and output (" + std::to_string(cout) + ") channels");
    }
    /// fan_in = (cin/groups)*k*k, the length of one output channel's filter.
    size_t fan_in() const { return static_cast<size_t>(cin / groups) * k * k; }
    /// "convKxK(CIN->COUT[, stride S][, pad P][, depthwise | , groups G][, no bias])".
    std::string name() const {
        std::string d = "conv" + std::to_string(k) + "x" + std::to_string(k) + "(" + std::to_string(cin) + "->" +
                        std::to_string(cout);
        if (s != 1) d += ", stride " + std::to_string(s);
        if (p != 0) d += ", pad " + std::to_string(p);
        if (groups != 1) d += (groups == cin ? ", depthwise" : ", groups " + std::to_string(groups));
        if (!bias) d += ", no bias";
        return d + ")";
    }
    /// The output shape (cout, (H + 2p - k)/s + 1, (W + 2p - k)/s + 1) for an example of shape
    /// `in` (C, H, W). Errors: std::invalid_argument naming the layer when in.c != cin or the
    /// padded input is smaller than the kernel.
    Shape output(const Shape& in) const {
        if (in.c != cin) throw std::invalid_argument(name() + ": input has " + std::to_string(in.c) + " channels");
        if (in.h + 2 * p < k || in.w + 2 * p < k)
            throw std::invalid_argument(name() + ": input " + in.str() + " is smaller than the kernel");
        return Shape{cout, (in.h + 2 * p - k) / s + 1, (in.w + 2 * p - k) / s + 1};
    }
    /// weight (cout, cin/groups, k, k) with weight decay, then bias (cout,) without when `bias`.
    std::vector<ParamInfo> params() const {
        std::vector<ParamInfo> v{{"weight", fan_in() * cout, true}};
        if (bias) v.push_back({"bias", static_cast<size_t>(cout), false});
        return v;
    }
    size_t state_size() const { return 0; }
    /// He (Kaiming) normal weight, std = sqrt(2 / fan_in) (He et al. 2015, eq. 10); bias
    /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as PyTorch's default.
    void init(float* params, float*, Rng& rng) const {
        const size_t kg = fan_in();
        const double sd = std::sqrt(2.0 / static_cast<double>(kg));
        for (size_t i = 0; i < kg * cout; ++i) params[i] = static_cast<float>(sd * rng.normal());
        if (!bias) return;
        const double bound = 1.0 / std::sqrt(static_cast<double>(kg));
        for (int i = 0; i < cout; ++i) params[kg * cout + i] = static_cast<float>(rng.uniform(-bound, bound));
    }
};

/// Max pooling, k x k window, stride s (0 or k: non-overlapping windows); no parameters.
struct MaxPool {
    int k, s;
    /// Errors: std::invalid_argument unless k > 0 and stride >= 0.
    MaxPool(int window, int stride) : k(window), s(stride > 0 ? stride : window) {
        if (k <= 0 || stride < 0) throw std::invalid_argument("maxpool2d: window and stride must be positive");
    }
    /// "maxpoolK", or "maxpoolK/S" when the stride is not the window.
    std::string name() const { return "maxpool" + std::to_string(k) + (s != k ? "/" + std::to_string(s) : ""); }
    /// (C, floor((H - k)/s) + 1, floor((W - k)/s) + 1), PyTorch's MaxPool2d(k, s) without
    /// padding. Errors: std::invalid_argument naming the layer when the input is smaller than k.
    Shape output(const Shape& in) const {
        if (in.h < k || in.w < k) throw std::invalid_argument(name() + ": input " + in.str() + " is too small");
        return Shape{in.c, (in.h - k) / s + 1, (in.w - k) / s + 1};
    }
    std::vector<ParamInfo> params() const { return {}; }
    size_t state_size() const { return 0; }
};

/// A parameter-free elementwise layer (ReLU, hard sigmoid, hard swish): output shape = input.
struct Pointwise {
    std::string label;  ///< describe()'s text, e.g. "relu"
    std::string name() const { return label; }
    Shape output(const Shape& in) const { return in; }
    std::vector<ParamInfo> params() const { return {}; }
    size_t state_size() const { return 0; }
};

/// Inverted dropout with drop probability p (Srivastava et al. 2014); output shape = input.
struct Dropout : Pointwise {
    double p;
    /// Errors: std::invalid_argument unless 0 <= p < 1.
    explicit Dropout(double prob) : p(prob) {
        if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("dropout: probability must be in [0, 1)");
        label = "dropout(" + std::to_string(p).substr(0, 4) + ")";
    }
};

/// Adaptive average pooling to oh x ow (PyTorch's AdaptiveAvgPool2d); no parameters.
struct AdaptiveAvgPool {
    int oh, ow;
    /// Errors: std::invalid_argument unless both are positive.
    AdaptiveAvgPool(int h, int w) : oh(h), ow(w) {
        if (oh <= 0 || ow <= 0) throw std::invalid_argument("adaptive avgpool2d: output size must be positive");
    }
    /// "global-avgpool" for 1 x 1, else "adaptive-avgpool(OHxOW)".
    std::string name() const {
        if (oh == 1 && ow == 1) return "global-avgpool";
        return "adaptive-avgpool(" + std::to_string(oh) + "x" + std::to_string(ow) + ")";
    }
    /// (C, oh, ow) for any input (C, H, W); smaller inputs are replicated.
    Shape output(const Shape& in) const { return Shape{in.c, oh, ow}; }
    std::vector<ParamInfo> params() const { return {}; }
    size_t state_size() const { return 0; }
};

/// Squeeze-and-excitation over `c` channels squeezed to `sq` (Hu et al. 2018): its children
/// are global average pooling, fc c -> sq, ReLU, fc sq -> c, hard sigmoid, in that order
/// (their parameters in that order are its layout). "se(C->SQ)".
inline std::string se_name(int c, int sq) { return "se(" + std::to_string(c) + "->" + std::to_string(sq) + ")"; }
/// Errors: std::invalid_argument naming the layer when the input's channels are not `c`.
inline void se_check_channels(int c, int sq, const Shape& in) {
    if (in.c != c) throw std::invalid_argument(se_name(c, sq) + ": input has " + std::to_string(in.c) + " channels");
}

}  // namespace spec

/// A leaf layer of either family (Base = Layer on the CPU, GpuLayer on the GPU) whose name,
/// output shape, parameter list, state size and buffer binding come from its Spec
/// (spec::Linear, spec::BatchNorm, spec::Conv, spec::MaxPool, spec::Pointwise,
/// spec::Dropout, spec::AdaptiveAvgPool). It fixes in_ and out_ (one example's (C, H, W))
/// in configure(); params_, grads_ and state_ point into the Model's fused buffers after bind().
template <class Base, class Spec>
class LeafLayer : public Base {
public:
    explicit LeafLayer(const Spec& s) : spec_(s) {
        for (const auto& p : spec_.params()) this->n_params_ += p.size;
    }
    std::string describe() const override { return spec_.name(); }
    Shape configure(const Shape& in) override {
        out_ = spec_.output(in);
        in_ = in;
        return out_;
    }
    std::vector<ParamInfo> param_info() const override { return spec_.params(); }
    size_t state_size() const override { return spec_.state_size(); }
    size_t activation_floats() const override { return out_.size(); }
    void bind(float* params, float* grads, float* state) override {
        this->params_ = params;
        this->grads_ = grads;
        state_ = state;
    }

protected:
    const Spec spec_;
    Shape in_, out_;
    float* state_ = nullptr;
};

}  // namespace train
}  // namespace tula
