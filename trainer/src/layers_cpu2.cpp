// tula-train: more CPU layers (pooling variants, dropout, hard activations) and the
// composite layers (sequential block, residual, squeeze-and-excitation) of the larger
// models. See layers.hpp for the maths and the shapes.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "composite.hpp"
#include "layers.hpp"

namespace tula {
namespace train {
namespace {

void check_in(const Tensor& x, const Shape& in, const char* who) {
    if (x.shape() != in)
        throw std::invalid_argument(std::string(who) + ": input " + x.str() + " does not match the configured " +
                                    "example shape " + in.str());
}
Tensor& no_grad(Tensor& dx) {
    dx.resize(0, 0, 0, 0);
    return dx;
}

// ---- strided max pooling ---------------------------------------------------------------

class MaxPoolStridedCpu final : public Layer {
public:
    MaxPoolStridedCpu(int k, int s) : k_(k), s_(s) {
        if (k <= 0 || s <= 0) throw std::invalid_argument("maxpool2d: window and stride must be positive");
    }
    std::string describe() const override { return "maxpool" + std::to_string(k_) + "/" + std::to_string(s_); }
    Shape configure(const Shape& in) override {
        if (in.h < k_ || in.w < k_) throw std::invalid_argument(describe() + ": input " + in.str() + " is too small");
        in_ = in;
        out_ = Shape{in.c, (in.h - k_) / s_ + 1, (in.w - k_) / s_ + 1};
        return out_;
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_in(x, in_, "maxpool2d");
        y_.resize(x.n, out_);
        arg_.resize(y_.size());
        const size_t planes = static_cast<size_t>(x.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* src = x.ptr() + pl * hw;
            for (int oh = 0; oh < out_.h; ++oh)
                for (int ow = 0; ow < out_.w; ++ow) {
                    int best = (oh * s_) * in_.w + ow * s_;
                    for (int i = 0; i < k_; ++i)
                        for (int j = 0; j < k_; ++j) {
                            const int idx = (oh * s_ + i) * in_.w + ow * s_ + j;
                            if (src[idx] > src[best]) best = idx;
                        }
                    y_.ptr()[pl * ohw + oh * out_.w + ow] = src[best];
                    arg_[pl * ohw + oh * out_.w + ow] = best;
                }
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("maxpool2d backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize(dy.n, in_);
        std::fill(dx_.data.begin(), dx_.data.end(), 0.0f);
        const size_t planes = static_cast<size_t>(dy.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl)
            for (size_t i = 0; i < ohw; ++i) dx_.ptr()[pl * hw + arg_[pl * ohw + i]] += dy.ptr()[pl * ohw + i];
        return dx_;
    }

private:
    int k_, s_;
    Shape in_, out_;
    Tensor y_, dx_;
    std::vector<int> arg_;
};

// ---- average pooling (fixed and adaptive) ---------------------------------------------

// Window of output index i for input size n and output size o: [floor(i*n/o), ceil((i+1)*n/o)).
// A fixed k x k, stride-k pool is the window [i*k, i*k + k).
class AvgPoolCpu final : public Layer {
public:
    AvgPoolCpu(int k, int oh, int ow) : k_(k), oh_(oh), ow_(ow) {
        if (k < 0 || (k == 0 && (oh <= 0 || ow <= 0)))
            throw std::invalid_argument("avgpool2d: window and output size must be positive");
    }
    std::string describe() const override {
        if (k_ > 0) return "avgpool" + std::to_string(k_);
        if (oh_ == 1 && ow_ == 1) return "global-avgpool";
        return "adaptive-avgpool(" + std::to_string(oh_) + "x" + std::to_string(ow_) + ")";
    }
    Shape configure(const Shape& in) override {
        if (k_ > 0 && (in.h < k_ || in.w < k_))
            throw std::invalid_argument(describe() + ": input " + in.str() + " is too small");
        in_ = in;
        out_ = k_ > 0 ? Shape{in.c, in.h / k_, in.w / k_} : Shape{in.c, oh_, ow_};
        rows_.clear();
        cols_.clear();
        for (int i = 0; i < out_.h; ++i) rows_.push_back(window(i, in.h, out_.h));
        for (int j = 0; j < out_.w; ++j) cols_.push_back(window(j, in.w, out_.w));
        return out_;
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_in(x, in_, "avgpool2d");
        y_.resize(x.n, out_);
        const size_t planes = static_cast<size_t>(x.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* src = x.ptr() + pl * hw;
            float* dst = y_.ptr() + pl * ohw;
            for (int i = 0; i < out_.h; ++i)
                for (int j = 0; j < out_.w; ++j) {
                    double s = 0;
                    for (int r = rows_[i].first; r < rows_[i].second; ++r)
                        for (int c = cols_[j].first; c < cols_[j].second; ++c) s += src[r * in_.w + c];
                    const int cnt = (rows_[i].second - rows_[i].first) * (cols_[j].second - cols_[j].first);
                    dst[i * out_.w + j] = static_cast<float>(s / cnt);
                }
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("avgpool2d backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize(dy.n, in_);
        std::fill(dx_.data.begin(), dx_.data.end(), 0.0f);
        const size_t planes = static_cast<size_t>(dy.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* g = dy.ptr() + pl * ohw;
            float* d = dx_.ptr() + pl * hw;
            for (int i = 0; i < out_.h; ++i)
                for (int j = 0; j < out_.w; ++j) {
                    const int cnt = (rows_[i].second - rows_[i].first) * (cols_[j].second - cols_[j].first);
                    const float v = g[i * out_.w + j] / cnt;
                    for (int r = rows_[i].first; r < rows_[i].second; ++r)
                        for (int c = cols_[j].first; c < cols_[j].second; ++c) d[r * in_.w + c] += v;
                }
        }
        return dx_;
    }

private:
    std::pair<int, int> window(int i, int n, int o) const {
        if (k_ > 0) return {i * k_, i * k_ + k_};
        return {static_cast<int>((static_cast<long>(i) * n) / o), static_cast<int>(((static_cast<long>(i) + 1) * n + o - 1) / o)};
    }
    int k_, oh_, ow_;
    Shape in_, out_;
    std::vector<std::pair<int, int>> rows_, cols_;
    Tensor y_, dx_;
};

// ---- dropout ---------------------------------------------------------------------------

class DropoutCpu final : public Layer {
public:
    explicit DropoutCpu(double p) : p_(p) {
        if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("dropout: probability must be in [0, 1)");
    }
    std::string describe() const override {
        return "dropout(" + std::to_string(p_).substr(0, 4) + ")";
    }
    Shape configure(const Shape& in) override {
        in_ = in;
        return in;
    }
    void init(Rng& rng) override { rng_ = Rng(static_cast<uint64_t>(rng.uniform() * 9007199254740992.0)); }
    void save_rng(std::vector<std::string>& out) const override { out.push_back(rng_.state()); }
    void load_rng(const std::vector<std::string>& in, size_t& pos) override {
        if (pos >= in.size()) throw std::invalid_argument("too few random generator states for the dropout layers");
        rng_.set_state(in[pos++]);
    }
    const Tensor& forward(const Tensor& x, bool train) override {
        check_in(x, in_, "dropout");
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
    Shape in_;
    std::vector<float> mask_;
    Tensor y_, dx_;
};

// ---- hard sigmoid / hard swish ---------------------------------------------------------

class HardActCpu final : public Layer {
public:
    explicit HardActCpu(bool swish) : swish_(swish) {}
    std::string describe() const override { return swish_ ? "hardswish" : "hardsigmoid"; }
    Shape configure(const Shape& in) override {
        in_ = in;
        return in;
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_in(x, in_, describe().c_str());
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
    Shape in_;
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
};

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
        check_in(x, in_, "residual");
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

class SqueezeExcitationCpu final : public Composite {
public:
    SqueezeExcitationCpu(Backend b, int c, int sq) : c_(c), sq_(sq) {
        if (c <= 0 || sq <= 0) throw std::invalid_argument("squeeze-excitation: channels must be positive");
        kids_.push_back(make_global_avgpool(b));
        kids_.push_back(make_linear(b, c, sq));
        kids_.push_back(make_relu(b));
        kids_.push_back(make_linear(b, sq, c));
        kids_.push_back(make_hardsigmoid(b));
    }
    std::string describe() const override { return "se(" + std::to_string(c_) + "->" + std::to_string(sq_) + ")"; }
    Shape configure(const Shape& in) override {
        if (in.c != c_) throw std::invalid_argument(describe() + ": input has " + std::to_string(in.c) + " channels");
        Shape s = in;
        for (auto& k : kids_) s = k->configure(s);
        in_ = in;
        return in;
    }
    const Tensor& forward(const Tensor& x, bool train) override {
        check_in(x, in_, "squeeze-excitation");
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
    int c_, sq_;
    Shape in_;
    const Tensor* x_ = nullptr;
    const Tensor* s_ = nullptr;
    Tensor y_, dx_, ds_;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool2d_strided(Backend, int k, int stride) {
    return std::make_unique<MaxPoolStridedCpu>(k, stride);
}
std::unique_ptr<Layer> make_avgpool2d(Backend, int k) {
    if (k <= 0) throw std::invalid_argument("avgpool2d: window must be positive");
    return std::make_unique<AvgPoolCpu>(k, 0, 0);
}
std::unique_ptr<Layer> make_adaptive_avgpool2d(Backend, int oh, int ow) {
    if (oh <= 0 || ow <= 0) throw std::invalid_argument("adaptive avgpool2d: output size must be positive");
    return std::make_unique<AvgPoolCpu>(0, oh, ow);
}
std::unique_ptr<Layer> make_global_avgpool(Backend b) { return make_adaptive_avgpool2d(b, 1, 1); }
std::unique_ptr<Layer> make_dropout(Backend, double p) { return std::make_unique<DropoutCpu>(p); }
std::unique_ptr<Layer> make_hardsigmoid(Backend) { return std::make_unique<HardActCpu>(false); }
std::unique_ptr<Layer> make_hardswish(Backend) { return std::make_unique<HardActCpu>(true); }
std::unique_ptr<Layer> make_sequential(std::vector<std::unique_ptr<Layer>> layers, std::string name) {
    return std::make_unique<SequentialLayer>(std::move(layers), std::move(name));
}
std::unique_ptr<Layer> make_residual(std::unique_ptr<Layer> body, std::unique_ptr<Layer> shortcut) {
    return std::make_unique<ResidualLayer>(std::move(body), std::move(shortcut));
}
std::unique_ptr<Layer> make_squeeze_excitation(Backend b, int channels, int squeeze) {
    return std::make_unique<SqueezeExcitationCpu>(b, channels, squeeze);
}

}  // namespace train
}  // namespace tula
