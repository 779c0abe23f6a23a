// tula-train CUDA backend: composite layers (sequential, residual, squeeze-and-excitation), their channel
// kernels, and the model zoo on the GPU.
// See gpu.hpp for the maths and the shapes.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "core/composite.hpp"
#include "core/model_zoo.hpp"
#include "common.cuh"
#include "core/layer_specs.hpp"

namespace tula {
namespace train {
namespace cuda {
namespace {

__global__ void k_chan_scale(const float* __restrict__ x, const float* __restrict__ sc, float* __restrict__ y,
                             int planes, int hw) {
    const size_t total = static_cast<size_t>(planes) * hw;
    TULA_GRID_STRIDE(t, total) y[t] = x[t] * sc[t / hw];
}

// One warp per plane; lanes stride the plane, then a fixed shuffle tree (deterministic).
__global__ void k_chan_dot(const float* __restrict__ dy, const float* __restrict__ x, float* __restrict__ out,
                           int planes, int hw) {
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    if (warp >= planes) return;
    const float* a = dy + static_cast<size_t>(warp) * hw;
    const float* b = x + static_cast<size_t>(warp) * hw;
    float s = 0.0f;
    for (int i = lane; i < hw; i += 32) s += a[i] * b[i];
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) out[warp] = s;
}

__global__ void k_chan_scale_bwd(const float* __restrict__ dy, const float* __restrict__ sc,
                                 const float* __restrict__ g, float* __restrict__ dx, int planes, int hw) {
    const size_t total = static_cast<size_t>(planes) * hw;
    TULA_GRID_STRIDE(t, total) dx[t] = dy[t] * sc[t / hw] + g[t];
}

using CompositeGpu = CompositeOf<GpuLayer>;  // composite.hpp: the CPU composites' layout
using SequentialGpu = SequentialOf<GpuLayer, DevTensor>;

class ResidualGpu final : public ResidualOf<CompositeGpu, std::unique_ptr<GpuLayer>> {
public:
    ResidualGpu(GpuContext& ctx, std::unique_ptr<GpuLayer> body, std::unique_ptr<GpuLayer> shortcut)
        : ResidualOf(std::move(body), std::move(shortcut)), ctx_(ctx) {}
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_input(x, in_, "residual");
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

class SqueezeExcitationGpu final : public SqueezeExcitationOf<CompositeGpu> {
public:
    SqueezeExcitationGpu(GpuContext& ctx, int c, int sq) : SqueezeExcitationOf(c, sq), ctx_(ctx) {
        kids_.push_back(make_gpu_adaptive_avgpool2d(ctx, 1, 1));
        kids_.push_back(make_gpu_linear(ctx, c, sq));
        kids_.push_back(make_gpu_relu(ctx));
        kids_.push_back(make_gpu_linear(ctx, sq, c));
        kids_.push_back(make_gpu_hardsigmoid(ctx));
    }
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_input(x, in_, "squeeze-excitation");
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

void channel_scale_forward(cudaStream_t s, const float* x, const float* scale, float* y, int planes, int hw) {
    const size_t n = static_cast<size_t>(planes) * hw;
    if (n == 0) return;
    k_chan_scale<<<blocks_for(n), kThreads, 0, s>>>(x, scale, y, planes, hw);
    CUDA_CHECK_LAUNCH();
}

void channel_dot(cudaStream_t s, const float* dy, const float* x, float* out, int planes, int hw) {
    if (planes <= 0) return;
    const int per_block = kThreads / 32;
    k_chan_dot<<<(planes + per_block - 1) / per_block, kThreads, 0, s>>>(dy, x, out, planes, hw);
    CUDA_CHECK_LAUNCH();
}

void channel_scale_backward(cudaStream_t s, const float* dy, const float* scale, const float* g, float* dx,
                            int planes, int hw) {
    const size_t n = static_cast<size_t>(planes) * hw;
    if (n == 0) return;
    k_chan_scale_bwd<<<blocks_for(n), kThreads, 0, s>>>(dy, scale, g, dx, planes, hw);
    CUDA_CHECK_LAUNCH();
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
