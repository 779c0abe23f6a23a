// tula-train: CPU composite layers: sequential block, residual, squeeze-and-excitation (Hu et al. 2018). See core/layers.hpp for the maths and the shapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/composite.hpp"
#include "core/layer_specs.hpp"
#include "cpu/common.hpp"

namespace tula {
namespace train {
namespace {

using namespace cpu;

// ---- composites ------------------------------------------------------------------------

// CPU composites (composite.hpp's bookkeeping): children initialized, and their random
// generators saved and restored (checkpoints), in order.
template <class B>
class CpuChildren : public B {
public:
    using B::B;
    void init(Rng& rng) override {
        for (auto& k : this->kids_) k->init(rng);
    }
    void save_rng(std::vector<std::string>& out) const override {
        for (auto& k : this->kids_) k->save_rng(out);
    }
    void load_rng(const std::vector<std::string>& in, size_t& pos) override {
        for (auto& k : this->kids_) k->load_rng(in, pos);
    }
};
using Composite = CpuChildren<CompositeOf<Layer>>;
using SequentialLayer = CpuChildren<SequentialOf<Layer, Tensor>>;

class ResidualLayer final : public ResidualOf<Composite, std::unique_ptr<Layer>> {
public:
    using ResidualOf::ResidualOf;
    const Tensor& forward(const Tensor& x, bool train) override {
        check_input(x, in_, "residual");
        const Tensor& a = kids_[0]->forward(x, train);
        const Tensor& b = kids_.size() > 1 ? kids_[1]->forward(x, train) : x;
        y_.resize_like(a);
        Eigen::Map<Eigen::ArrayXf>(y_.ptr(), y_.size()) =
            Eigen::Map<const Eigen::ArrayXf>(a.ptr(), a.size()) + Eigen::Map<const Eigen::ArrayXf>(b.ptr(), b.size());
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        for (auto& k : kids_) k->set_need_input_grad(need_input_grad_);
        const Tensor& da = kids_[0]->backward(dy);
        if (!need_input_grad_) {
            if (kids_.size() > 1) kids_[1]->backward(dy);
            return no_grad(dx_);
        }
        dx_.resize(dy.n, in_);
        const Tensor& db = kids_.size() > 1 ? kids_[1]->backward(dy) : dy;
        Eigen::Map<Eigen::ArrayXf>(dx_.ptr(), dx_.size()) =
            Eigen::Map<const Eigen::ArrayXf>(da.ptr(), da.size()) + Eigen::Map<const Eigen::ArrayXf>(db.ptr(), db.size());
        return dx_;
    }

private:
    Tensor y_, dx_;
};

class SqueezeExcitationCpu final : public SqueezeExcitationOf<Composite> {
public:
    SqueezeExcitationCpu(int c, int sq) : SqueezeExcitationOf(c, sq) {
        kids_.push_back(make_global_avgpool());
        kids_.push_back(make_linear(c, sq));
        kids_.push_back(make_relu());
        kids_.push_back(make_linear(sq, c));
        kids_.push_back(make_hardsigmoid());
    }
    const Tensor& forward(const Tensor& x, bool train) override {
        check_input(x, in_, "squeeze-excitation");
        x_ = &x;
        const Tensor* t = &x;
        for (auto& k : kids_) t = &k->forward(*t, train);
        s_ = t;
        y_.resize_like(x);
        const size_t hw = static_cast<size_t>(in_.h) * in_.w;
        for (int n = 0; n < x.n; ++n)
            for (int c = 0; c < c_; ++c) {
                const float sc = s_->sample(n)[c];
                const float* src = x.sample(n) + c * hw;
                float* dst = y_.sample(n) + c * hw;
                for (size_t i = 0; i < hw; ++i) dst[i] = src[i] * sc;
            }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.shape() != in_) throw std::invalid_argument("squeeze-excitation backward: dy " + dy.str());
        const size_t hw = static_cast<size_t>(in_.h) * in_.w;
        ds_.resize(x.n, c_, 1, 1);
        for (int n = 0; n < x.n; ++n)
            for (int c = 0; c < c_; ++c) {
                const float* g = dy.sample(n) + c * hw;
                const float* xv = x.sample(n) + c * hw;
                double s = 0;
                for (size_t i = 0; i < hw; ++i) s += static_cast<double>(g[i]) * xv[i];
                ds_.sample(n)[c] = static_cast<float>(s);
            }
        kids_.front()->set_need_input_grad(need_input_grad_);
        const Tensor* g = &ds_;
        for (size_t i = kids_.size(); i-- > 0;) g = &kids_[i]->backward(*g);
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(x);
        for (int n = 0; n < x.n; ++n)
            for (int c = 0; c < c_; ++c) {
                const float sc = s_->sample(n)[c];
                const float* gy = dy.sample(n) + c * hw;
                const float* gp = g->sample(n) + c * hw;
                float* d = dx_.sample(n) + c * hw;
                for (size_t i = 0; i < hw; ++i) d[i] = gy[i] * sc + gp[i];
            }
        return dx_;
    }

private:
    const Tensor* x_ = nullptr;
    const Tensor* s_ = nullptr;
    Tensor y_, dx_, ds_;
};

}  // namespace

std::unique_ptr<Layer> make_sequential(std::vector<std::unique_ptr<Layer>> layers, std::string name) {
    return std::make_unique<SequentialLayer>(std::move(layers), std::move(name));
}
std::unique_ptr<Layer> make_residual(std::unique_ptr<Layer> body, std::unique_ptr<Layer> shortcut) {
    return std::make_unique<ResidualLayer>(std::move(body), std::move(shortcut));
}
std::unique_ptr<Layer> make_squeeze_excitation(int channels, int squeeze) {
    return std::make_unique<SqueezeExcitationCpu>(channels, squeeze);
}

}  // namespace train
}  // namespace tula
