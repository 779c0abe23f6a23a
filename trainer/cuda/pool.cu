// tula-train CUDA backend: pooling: max (cuDNN) and adaptive average, with its kernels.
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

// PyTorch's adaptive window of output cell i of `o` over an input of `n`: [lo, hi).
__device__ __forceinline__ int win_lo(int i, int n, int o) { return (i * n) / o; }
__device__ __forceinline__ int win_hi(int i, int n, int o) { return ((i + 1) * n + o - 1) / o; }

// Plane p, row r and column c of a flat index into planes of rows x cols values.
struct Cell {
    size_t p;
    int r, c;
};
__device__ __forceinline__ Cell plane_cell(size_t t, int rows, int cols) {
    return Cell{t / (static_cast<size_t>(rows) * cols), static_cast<int>((t / cols) % rows), static_cast<int>(t % cols)};
}

__global__ void k_aavg_fwd(const float* __restrict__ x, float* __restrict__ y, int planes, int h, int w, int oh,
                           int ow) {
    const size_t total = static_cast<size_t>(planes) * oh * ow;
    TULA_GRID_STRIDE(t, total) {
        const Cell q = plane_cell(t, oh, ow);
        const size_t p = q.p;
        const int i = q.r, j = q.c;
        const int r0 = win_lo(i, h, oh), r1 = win_hi(i, h, oh), c0 = win_lo(j, w, ow), c1 = win_hi(j, w, ow);
        const float* xp = x + p * h * w;
        float s = 0.0f;
        for (int r = r0; r < r1; ++r)
            for (int c = c0; c < c1; ++c) s += xp[r * w + c];
        y[t] = s / static_cast<float>((r1 - r0) * (c1 - c0));
    }
}

__global__ void k_aavg_bwd(const float* __restrict__ dy, float* __restrict__ dx, int planes, int h, int w, int oh,
                           int ow) {
    const size_t total = static_cast<size_t>(planes) * h * w;
    TULA_GRID_STRIDE(t, total) {
        const Cell q = plane_cell(t, h, w);
        const int r = q.r, c = q.c;
        const float* g = dy + q.p * oh * ow;
        float s = 0.0f;
        for (int i = 0; i < oh; ++i) {
            const int r0 = win_lo(i, h, oh), r1 = win_hi(i, h, oh);
            if (r < r0 || r >= r1) continue;
            for (int j = 0; j < ow; ++j) {
                const int c0 = win_lo(j, w, ow), c1 = win_hi(j, w, ow);
                if (c < c0 || c >= c1) continue;
                s += g[i * ow + j] / static_cast<float>((r1 - r0) * (c1 - c0));
            }
        }
        dx[t] = s;
    }
}

class MaxPool2dGpu final : public LeafLayer<GpuLayer, spec::MaxPool> {
public:
    MaxPool2dGpu(GpuContext& ctx, int k, int stride) : LeafLayer(spec::MaxPool(k, stride)), ctx_(ctx) {
        CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pdesc_));
        CUDNN_CHECK(cudnnSetPooling2dDescriptor(pdesc_, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, k, k,
                                                0, 0, spec_.s, spec_.s));
    }
    ~MaxPool2dGpu() override { cudnnDestroyPoolingDescriptor(pdesc_); }
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "maxpool2d");
        x_ = &x;
        if (x.n != n_) {
            xdesc_.set(x.n, in_.c, in_.h, in_.w);
            ydesc_.set(x.n, out_.c, out_.h, out_.w);
            n_ = x.n;
        }
        y_.resize(x.n, out_);
        CUDNN_CHECK(cudnnPoolingForward(ctx_.dnn(), pdesc_, &kOne, xdesc_.d, x.ptr(), &kZero, ydesc_.d, y_.ptr()));
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("maxpool2d backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(*x_);
        CUDNN_CHECK(cudnnPoolingBackward(ctx_.dnn(), pdesc_, &kOne, ydesc_.d, y_.ptr(), ydesc_.d, dy.ptr(), xdesc_.d,
                                         x_->ptr(), &kZero, xdesc_.d, dx_.ptr()));
        return dx_;
    }

private:
    GpuContext& ctx_;
    int n_ = -1;
    cudnnPoolingDescriptor_t pdesc_ = nullptr;
    TensorDesc xdesc_, ydesc_;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
};

class AdaptiveAvgPoolGpu final : public LeafLayer<GpuLayer, spec::AdaptiveAvgPool> {
public:
    AdaptiveAvgPoolGpu(GpuContext& ctx, int oh, int ow) : LeafLayer(spec::AdaptiveAvgPool(oh, ow)), ctx_(ctx) {}
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, describe());
        y_.resize(x.n, in_.c, spec_.oh, spec_.ow);
        adaptive_avgpool_forward(ctx_.stream(), x.ptr(), y_.ptr(), x.n * in_.c, in_.h, in_.w, spec_.oh, spec_.ow);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument(describe() + " backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize(dy.n, in_);
        adaptive_avgpool_backward(ctx_.stream(), dy.ptr(), dx_.ptr(), dy.n * in_.c, in_.h, in_.w, spec_.oh, spec_.ow);
        return dx_;
    }

private:
    GpuContext& ctx_;
    DevTensor y_, dx_;
};

}  // namespace

void adaptive_avgpool_forward(cudaStream_t s, const float* x, float* y, int planes, int h, int w, int oh, int ow) {
    const size_t n = static_cast<size_t>(planes) * oh * ow;
    if (n == 0) return;
    k_aavg_fwd<<<blocks_for(n), kThreads, 0, s>>>(x, y, planes, h, w, oh, ow);
    CUDA_CHECK_LAUNCH();
}

void adaptive_avgpool_backward(cudaStream_t s, const float* dy, float* dx, int planes, int h, int w, int oh, int ow) {
    const size_t n = static_cast<size_t>(planes) * h * w;
    if (n == 0) return;
    k_aavg_bwd<<<blocks_for(n), kThreads, 0, s>>>(dy, dx, planes, h, w, oh, ow);
    CUDA_CHECK_LAUNCH();
}

std::unique_ptr<GpuLayer> make_gpu_maxpool2d(GpuContext& ctx, int k, int stride) {
    return std::make_unique<MaxPool2dGpu>(ctx, k, stride);
}
std::unique_ptr<GpuLayer> make_gpu_adaptive_avgpool2d(GpuContext& ctx, int oh, int ow) {
    return std::make_unique<AdaptiveAvgPoolGpu>(ctx, oh, ow);
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
