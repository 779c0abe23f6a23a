// tula-train CUDA backend: element-wise layers: ReLU, hard sigmoid / hard swish, dropout, with their kernels.
// See gpu.hpp for the maths and the shapes.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "core/layer_specs.hpp"

namespace tula {
namespace train {
namespace cuda {
namespace {

__global__ void k_relu_fwd(const float* __restrict__ x, float* __restrict__ y, size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        y[i] = fmaxf(x[i], 0.0f);
}

__global__ void k_relu_bwd(const float* __restrict__ y, const float* __restrict__ dy, float* __restrict__ dx,
                           size_t n) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void k_hard_fwd(const float* __restrict__ x, float* __restrict__ y, size_t n, bool swish) {
    TULA_GRID_STRIDE(i, n) {
        const float v = x[i];
        const float r6 = fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) / 6.0f;
        y[i] = swish ? v * r6 : r6;
    }
}

__global__ void k_hard_bwd(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx, size_t n,
                           bool swish) {
    TULA_GRID_STRIDE(i, n) {
        const float v = x[i];
        float d;
        if (swish) d = v < -3.0f ? 0.0f : (v <= 3.0f ? (2.0f * v + 3.0f) / 6.0f : 1.0f);
        else d = (v > -3.0f && v < 3.0f) ? 1.0f / 6.0f : 0.0f;
        dx[i] = dy[i] * d;
    }
}

// SplitMix64's finalizer (Steele, Lea & Flood 2014) as a counter-based generator.
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

__global__ void k_dropout_fwd(const float* __restrict__ x, float* __restrict__ y, float* __restrict__ mask, size_t n,
                              float p, uint64_t seed) {
    const float keep = 1.0f / (1.0f - p);
    TULA_GRID_STRIDE(i, n) {
        const double u = static_cast<double>(mix64(seed + 0x9e3779b97f4a7c15ULL * (i + 1)) >> 11) * 0x1.0p-53;
        const float m = u >= p ? keep : 0.0f;
        mask[i] = m;
        y[i] = x[i] * m;
    }
}

class ReluGpu final : public LeafLayer<GpuLayer, spec::Pointwise> {
public:
    explicit ReluGpu(GpuContext& ctx) : LeafLayer(spec::Pointwise{"relu"}), ctx_(ctx) {}
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "relu");
        y_.resize_like(x);
        relu_forward(ctx_.stream(), x.ptr(), y_.ptr(), x.size());
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("relu backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(dy);
        relu_backward(ctx_.stream(), y_.ptr(), dy.ptr(), dx_.ptr(), dy.size());
        return dx_;
    }

private:
    GpuContext& ctx_;
    DevTensor y_, dx_;
};

class HardActGpu final : public LeafLayer<GpuLayer, spec::Pointwise> {
public:
    HardActGpu(GpuContext& ctx, bool swish)
        : LeafLayer(spec::Pointwise{swish ? "hardswish" : "hardsigmoid"}), ctx_(ctx), swish_(swish) {}
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, describe());
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
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
};

class DropoutGpu final : public LeafLayer<GpuLayer, spec::Dropout> {
public:
    DropoutGpu(GpuContext& ctx, double p, uint64_t seed) : LeafLayer(spec::Dropout(p)), ctx_(ctx), p_(p), seed_(seed) {}
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_input(x, in_, "dropout");
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
    DevTensor y_, mask_, dx_;
};

}  // namespace

void relu_forward(cudaStream_t s, const float* x, float* y, size_t n) {
    if (n == 0) return;
    k_relu_fwd<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
    CUDA_CHECK_LAUNCH();
}

void relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx, size_t n) {
    if (n == 0) return;
    k_relu_bwd<<<blocks_for(n), kThreads, 0, s>>>(y, dy, dx, n);
    CUDA_CHECK_LAUNCH();
}

void hard_act_forward(cudaStream_t s, const float* x, float* y, size_t n, bool swish) {
    if (n == 0) return;
    k_hard_fwd<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, swish);
    CUDA_CHECK_LAUNCH();
}

void hard_act_backward(cudaStream_t s, const float* x, const float* dy, float* dx, size_t n, bool swish) {
    if (n == 0) return;
    k_hard_bwd<<<blocks_for(n), kThreads, 0, s>>>(x, dy, dx, n, swish);
    CUDA_CHECK_LAUNCH();
}

void dropout_forward(cudaStream_t s, const float* x, float* y, float* mask, size_t n, float p, uint64_t seed) {
    if (n == 0) return;
    k_dropout_fwd<<<blocks_for(n), kThreads, 0, s>>>(x, y, mask, n, p, seed);
    CUDA_CHECK_LAUNCH();
}

std::unique_ptr<GpuLayer> make_gpu_relu(GpuContext& ctx) { return std::make_unique<ReluGpu>(ctx); }
std::unique_ptr<GpuLayer> make_gpu_hardswish(GpuContext& ctx) { return std::make_unique<HardActGpu>(ctx, true); }

std::unique_ptr<GpuLayer> make_gpu_hardsigmoid(GpuContext& ctx) { return std::make_unique<HardActGpu>(ctx, false); }

std::unique_ptr<GpuLayer> make_gpu_dropout(GpuContext& ctx, double p, uint64_t seed) {
    return std::make_unique<DropoutGpu>(ctx, p, seed);
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
