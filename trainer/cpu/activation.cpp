// tula-train: CPU element-wise layers: ReLU, hard sigmoid / hard swish (Howard et al. 2019), dropout. See core/layers.hpp for the maths and the shapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/layer_specs.hpp"
#include "cpu/common.hpp"

namespace tula {
namespace train {
namespace {

using namespace cpu;

// ---- ReLU ------------------------------------------------------------------------------

// d[i] = y[i] > 0 ? g[i] : 0, branch-free and 4 lanes at a time with GCC's generic vector
// extension (compiled for every target; Eigen has no vectorized select).
void relu_mask(const float* y, const float* g, float* d, size_t n) {
    const V4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const V4i mask = load4(y + i) > zero;      // all ones where y > 0
        store4(d + i, (V4f)((V4i)load4(g + i) & mask));  // vector casts are bit casts
    }
    for (; i < n; ++i) d[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

class ReluCpu final : public LeafLayer<Layer, spec::Pointwise> {
public:
    ReluCpu() : LeafLayer(spec::Pointwise{"relu"}) {}
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "relu");
        y_.resize_like(x);
        const float* p = x.ptr();
        float* q = y_.ptr();
        const size_t n = x.size();
        // Eigen's vectorized max (a scalar loop compiles to a branch that mispredicts)
        Eigen::Map<Eigen::ArrayXf>(q, n) = Eigen::Map<const Eigen::ArrayXf>(p, n).max(0.0f);
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("relu backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(dy);
        const float* g = dy.ptr();
        const float* y = y_.ptr();
        float* d = dx_.ptr();
        const size_t n = dy.size();
        relu_mask(y, g, d, n);
        return dx_;
    }

private:
    Tensor y_, dx_;
};


// ---- dropout ---------------------------------------------------------------------------

class DropoutCpu final : public LeafLayer<Layer, spec::Dropout> {
public:
    explicit DropoutCpu(double p) : LeafLayer(spec::Dropout(p)), p_(p) {}
    void init(Rng& rng) override { rng_ = Rng(static_cast<uint64_t>(rng.uniform() * 9007199254740992.0)); }
    void save_rng(std::vector<std::string>& out) const override { out.push_back(rng_.state()); }
    void load_rng(const std::vector<std::string>& in, size_t& pos) override {
        if (pos >= in.size()) throw std::invalid_argument("too few random generator states for the dropout layers");
        rng_.set_state(in[pos++]);
    }
    const Tensor& forward(const Tensor& x, bool train) override {
        check_input(x, in_, "dropout");
        y_.resize_like(x);
        train_ = train && p_ > 0;
        if (!train_) {
            std::copy(x.data.begin(), x.data.end(), y_.data.begin());
            return y_;
        }
        mask_.resize(x.size());
        const float scale = static_cast<float>(1.0 / (1.0 - p_));
        for (size_t i = 0; i < x.size(); ++i) {
            mask_[i] = rng_.uniform() >= p_ ? scale : 0.0f;
            y_.data[i] = x.data[i] * mask_[i];
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("dropout backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(dy);
        for (size_t i = 0; i < dy.size(); ++i) dx_.data[i] = train_ ? dy.data[i] * mask_[i] : dy.data[i];
        return dx_;
    }

private:
    double p_;
    bool train_ = false;
    Rng rng_{0};
    std::vector<float> mask_;
    Tensor y_, dx_;
};

// ---- hard sigmoid / hard swish ---------------------------------------------------------

class HardActCpu final : public LeafLayer<Layer, spec::Pointwise> {
public:
    explicit HardActCpu(bool swish) : LeafLayer(spec::Pointwise{swish ? "hardswish" : "hardsigmoid"}), swish_(swish) {}
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, describe().c_str());
        x_ = &x;
        y_.resize_like(x);
        for (size_t i = 0; i < x.size(); ++i) {
            const float v = x.data[i];
            const float hs = std::min(std::max(v + 3.0f, 0.0f), 6.0f) / 6.0f;
            y_.data[i] = swish_ ? v * hs : hs;
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument(describe() + " backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(dy);
        const Tensor& x = *x_;
        for (size_t i = 0; i < dy.size(); ++i) {
            const float v = x.data[i];
            float d;
            if (swish_) d = v < -3.0f ? 0.0f : (v <= 3.0f ? (2.0f * v + 3.0f) / 6.0f : 1.0f);
            else d = (v > -3.0f && v < 3.0f) ? 1.0f / 6.0f : 0.0f;
            dx_.data[i] = dy.data[i] * d;
        }
        return dx_;
    }

private:
    bool swish_;
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
};

}  // namespace

std::unique_ptr<Layer> make_relu() { return std::make_unique<ReluCpu>(); }
std::unique_ptr<Layer> make_dropout(double p) { return std::make_unique<DropoutCpu>(p); }
std::unique_ptr<Layer> make_hardsigmoid() { return std::make_unique<HardActCpu>(false); }
std::unique_ptr<Layer> make_hardswish() { return std::make_unique<HardActCpu>(true); }

}  // namespace train
}  // namespace tula
