// tula-train CUDA backend: the layers of the larger models (hard activations, dropout,
// adaptive average pooling, the sequential / residual / squeeze-and-excitation composites)
// and the GPU model builder over the zoo's shared descriptions (model_zoo.hpp). See gpu.hpp.
#include <stdexcept>

#include "check.hpp"
#include "core/composite.hpp"
#include "gpu.hpp"
#include "core/model_zoo.hpp"

namespace tula {
namespace train {
namespace cuda {
namespace {

void check_in(const DevTensor& x, const Shape& in, const std::string& who) {
    if (x.shape() != in)
        throw std::invalid_argument(who + ": input " + x.str() + " does not match the configured example shape " +
                                    in.str());
}

// An empty tensor returned as dL/dx when the input gradient is not needed.
const DevTensor& no_grad(DevTensor& t) {
    t.resize(0, 0, 0, 0);
    return t;
}

// ---- hard swish / hard sigmoid ---------------------------------------------------------

class HardActGpu final : public GpuLayer {
public:
    HardActGpu(GpuContext& ctx, bool swish) : ctx_(ctx), swish_(swish) {}
    std::string describe() const override { return swish_ ? "hardswish" : "hardsigmoid"; }
    Shape configure(const Shape& in) override {
        in_ = in;
        return in;
    }
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_in(x, in_, describe());
        x_ = &x;
        y_.resize_like(x);
        hard_act_forward(ctx_.stream(), x.ptr(), y_.ptr(), x.size(), swish_);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument(describe() + " backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(dy);
        hard_act_backward(ctx_.stream(), x_->ptr(), dy.ptr(), dx_.ptr(), dy.size(), swish_);
        return dx_;
    }

private:
    GpuContext& ctx_;
    bool swish_;
    Shape in_;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
};

// ---- dropout ---------------------------------------------------------------------------

class DropoutGpu final : public GpuLayer {
public:
    DropoutGpu(GpuContext& ctx, double p, uint64_t seed) : ctx_(ctx), p_(p), seed_(seed) {
        if (!(p >= 0.0 && p < 1.0)) throw std::invalid_argument("dropout: p must be in [0, 1)");
    }
    std::string describe() const override { return "dropout(" + std::to_string(p_).substr(0, 4) + ")"; }
    Shape configure(const Shape& in) override {
        in_ = in;
        return in;
    }
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_in(x, in_, "dropout");
        train_ = train && p_ > 0;
        if (!train_) return x;  // identity; backward passes dy through
        y_.resize_like(x);
        mask_.resize_like(x);
        // a new mask every call: the counter advances by the tensor size
        dropout_forward(ctx_.stream(), x.ptr(), y_.ptr(), mask_.ptr(), x.size(), static_cast<float>(p_),
                        seed_ + 0x632be59bd9b4e019ULL * ++calls_);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (!need_input_grad_) return no_grad(dx_);
        if (!train_) return dy;
        if (dy.size() != mask_.size()) throw std::invalid_argument("dropout backward: dy " + dy.str());
        dx_.resize_like(dy);
        mul_tensors(ctx_.stream(), dy.ptr(), mask_.ptr(), dx_.ptr(), dy.size());
        return dx_;
    }

private:
    GpuContext& ctx_;
    double p_;
    uint64_t seed_, calls_ = 0;
    bool train_ = false;
    Shape in_;
    DevTensor y_, mask_, dx_;
};

// ---- adaptive average pooling ------------------------------------------------------------

class AdaptiveAvgPoolGpu final : public GpuLayer {
public:
    AdaptiveAvgPoolGpu(GpuContext& ctx, int oh, int ow) : ctx_(ctx), oh_(oh), ow_(ow) {
        if (oh <= 0 || ow <= 0) throw std::invalid_argument("adaptive avg pool: output size must be positive");
    }
    std::string describe() const override {
        return oh_ == 1 && ow_ == 1 ? "global-avgpool"
                                    : "adaptive-avgpool(" + std::to_string(oh_) + "x" + std::to_string(ow_) + ")";
    }
    Shape configure(const Shape& in) override {
        in_ = in;
        return Shape{in.c, oh_, ow_};
    }
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_in(x, in_, describe());
        y_.resize(x.n, in_.c, oh_, ow_);
        adaptive_avgpool_forward(ctx_.stream(), x.ptr(), y_.ptr(), x.n * in_.c, in_.h, in_.w, oh_, ow_);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument(describe() + " backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize(dy.n, in_);
        adaptive_avgpool_backward(ctx_.stream(), dy.ptr(), dx_.ptr(), dy.n * in_.c, in_.h, in_.w, oh_, ow_);
        return dx_;
    }

private:
    GpuContext& ctx_;
    int oh_, ow_;
    Shape in_;
    DevTensor y_, dx_;
};

// ---- composites --------------------------------------------------------------------------

using CompositeGpu = CompositeOf<GpuLayer>;  // composite.hpp: the CPU composites' layout
using SequentialGpu = SequentialOf<GpuLayer, DevTensor>;

class ResidualGpu final : public ResidualOf<CompositeGpu, std::unique_ptr<GpuLayer>> {
public:
    ResidualGpu(GpuContext& ctx, std::unique_ptr<GpuLayer> body, std::unique_ptr<GpuLayer> shortcut)
        : ResidualOf(std::move(body), std::move(shortcut)), ctx_(ctx) {}
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_in(x, in_, "residual");
        const DevTensor& a = kids_[0]->forward(x, train);
        const DevTensor& b = kids_.size() > 1 ? kids_[1]->forward(x, train) : x;
        y_.resize_like(a);
        add_tensors(ctx_.stream(), a.ptr(), b.ptr(), y_.ptr(), a.size());
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        for (auto& k : kids_) k->set_need_input_grad(need_input_grad_);
        const DevTensor& da = kids_[0]->backward(dy);
        if (!need_input_grad_) {
            if (kids_.size() > 1) kids_[1]->backward(dy);
            return no_grad(dx_);
        }
        const DevTensor& db = kids_.size() > 1 ? kids_[1]->backward(dy) : dy;
        dx_.resize(dy.n, in_);
        add_tensors(ctx_.stream(), da.ptr(), db.ptr(), dx_.ptr(), dx_.size());
        return dx_;
    }

private:
    GpuContext& ctx_;
    DevTensor y_, dx_;
};

class SqueezeExcitationGpu final : public CompositeGpu {
public:
    SqueezeExcitationGpu(GpuContext& ctx, int c, int sq) : ctx_(ctx), c_(c), sq_(sq) {
        if (c <= 0 || sq <= 0) throw std::invalid_argument("squeeze-excitation: channels must be positive");
        kids_.push_back(make_gpu_adaptive_avgpool2d(ctx, 1, 1));
        kids_.push_back(make_gpu_linear(ctx, c, sq));
        kids_.push_back(make_gpu_relu(ctx));
        kids_.push_back(make_gpu_linear(ctx, sq, c));
        kids_.push_back(make_gpu_hardsigmoid(ctx));
    }
    std::string describe() const override { return "se(" + std::to_string(c_) + "->" + std::to_string(sq_) + ")"; }
    Shape configure(const Shape& in) override {
        if (in.c != c_) throw std::invalid_argument(describe() + ": input has " + std::to_string(in.c) + " channels");
        Shape s = in;
        for (auto& k : kids_) s = k->configure(s);
        in_ = in;
        return in;
    }
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_in(x, in_, "squeeze-excitation");
        x_ = &x;
        const DevTensor* t = &x;
        for (auto& k : kids_) t = &k->forward(*t, train);
        s_ = t;  // (N, C, 1, 1)
        y_.resize_like(x);
        channel_scale_forward(ctx_.stream(), x.ptr(), s_->ptr(), y_.ptr(), x.n * c_, in_.h * in_.w);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.shape() != in_) throw std::invalid_argument("squeeze-excitation backward: dy " + dy.str());
        const int planes = x.n * c_, hw = in_.h * in_.w;
        ds_.resize(x.n, c_, 1, 1);
        channel_dot(ctx_.stream(), dy.ptr(), x.ptr(), ds_.ptr(), planes, hw);  // dL/ds
        kids_.front()->set_need_input_grad(need_input_grad_);
        const DevTensor* g = &ds_;
        for (size_t i = kids_.size(); i-- > 0;) g = &kids_[i]->backward(*g);
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(x);
        channel_scale_backward(ctx_.stream(), dy.ptr(), s_->ptr(), g->ptr(), dx_.ptr(), planes, hw);
        return dx_;
    }

private:
    GpuContext& ctx_;
    int c_, sq_;
    Shape in_;
    const DevTensor* x_ = nullptr;
    const DevTensor* s_ = nullptr;
    DevTensor y_, dx_, ds_;
};

// The GPU layer factory of the zoo's descriptions (model_zoo.hpp); dropout layers get
// consecutive seeds.
struct GpuLayerFactory {
    using Ptr = std::unique_ptr<GpuLayer>;
    using Layers = std::vector<Ptr>;
    GpuContext& ctx;
    uint64_t seed;
    Ptr conv2d(int cin, int cout, int k, int s, int p, bool bias, int groups = 1) {
        return make_gpu_conv2d(ctx, cin, cout, k, s, p, bias, groups);
    }
    Ptr batchnorm2d(int c, float mom = 0.1f, float eps = 1e-5f) { return make_gpu_batchnorm2d(ctx, c, mom, eps); }
    Ptr relu() { return make_gpu_relu(ctx); }
    Ptr hardswish() { return make_gpu_hardswish(ctx); }
    Ptr dropout(double p) { return make_gpu_dropout(ctx, p, seed++); }
    Ptr maxpool2d(int k, int stride = 0) { return make_gpu_maxpool2d(ctx, k, stride); }
    Ptr adaptive_avgpool2d(int oh, int ow) { return make_gpu_adaptive_avgpool2d(ctx, oh, ow); }
    Ptr global_avgpool() { return make_gpu_adaptive_avgpool2d(ctx, 1, 1); }
    Ptr linear(int in, int out) { return make_gpu_linear(ctx, in, out); }
    Ptr squeeze_excitation(int c, int sq) { return make_gpu_squeeze_excitation(ctx, c, sq); }
    Ptr sequential(Layers l, std::string name) { return make_gpu_sequential(std::move(l), std::move(name)); }
    Ptr residual(Ptr body, Ptr shortcut) { return make_gpu_residual(ctx, std::move(body), std::move(shortcut)); }
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_hardswish(GpuContext& ctx) { return std::make_unique<HardActGpu>(ctx, true); }
std::unique_ptr<GpuLayer> make_gpu_hardsigmoid(GpuContext& ctx) { return std::make_unique<HardActGpu>(ctx, false); }
std::unique_ptr<GpuLayer> make_gpu_dropout(GpuContext& ctx, double p, uint64_t seed) {
    return std::make_unique<DropoutGpu>(ctx, p, seed);
}
std::unique_ptr<GpuLayer> make_gpu_adaptive_avgpool2d(GpuContext& ctx, int oh, int ow) {
    return std::make_unique<AdaptiveAvgPoolGpu>(ctx, oh, ow);
}
std::unique_ptr<GpuLayer> make_gpu_sequential(std::vector<std::unique_ptr<GpuLayer>> layers, std::string name) {
    return std::make_unique<SequentialGpu>(std::move(layers), std::move(name));
}
std::unique_ptr<GpuLayer> make_gpu_residual(GpuContext& ctx, std::unique_ptr<GpuLayer> body,
                                            std::unique_ptr<GpuLayer> shortcut) {
    return std::make_unique<ResidualGpu>(ctx, std::move(body), std::move(shortcut));
}
std::unique_ptr<GpuLayer> make_gpu_squeeze_excitation(GpuContext& ctx, int channels, int squeeze) {
    return std::make_unique<SqueezeExcitationGpu>(ctx, channels, squeeze);
}

std::unique_ptr<GpuModel> build_gpu_model(GpuContext& ctx, const std::string& name, const Shape& input, int classes,
                                          uint64_t seed) {
    GpuLayerFactory f{ctx, seed};
    return std::make_unique<GpuModel>(ctx, name, input, zoo::model_layers(name, input, classes, f));
}

std::unique_ptr<GpuModel> build_gpu_model(GpuContext& ctx, const std::string& name) {
    return build_gpu_model(ctx, name, Shape{1, 28, 28}, 10);
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
