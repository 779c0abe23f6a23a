// tula-train CUDA backend: the hand-written kernels (see gpu.hpp for the maths).
// Elementwise kernels use grid-stride loops with 256-thread blocks; reductions accumulate
// in double through shared memory.
#include <cfloat>
#include <cstdint>

#include "check.hpp"
#include "gpu.hpp"

namespace tula {
namespace train {
namespace cuda {
namespace {

constexpr int kThreads = 256;

// Blocks for n elements, capped (grid-stride loops cover the rest).
unsigned blocks_for(size_t n) {
    const size_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

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

__global__ void k_add_row_bias(float* __restrict__ y, const float* __restrict__ b, int rows, int cols) {
    const size_t n = static_cast<size_t>(rows) * cols;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x)
        y[i] += b[i % cols];
}

// One thread per column; consecutive threads read consecutive addresses (coalesced).
__global__ void k_add_col_sums(const float* __restrict__ g, float* __restrict__ db, int rows, int cols) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    double s = 0;
    for (int r = 0; r < rows; ++r) s += g[static_cast<size_t>(r) * cols + c];
    db[c] += static_cast<float>(s);
}

__global__ void k_xent_fwd(const float* __restrict__ z, const int* __restrict__ labels, float* __restrict__ prob,
                           double* __restrict__ loss, int* __restrict__ hit, int n, int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* zi = z + static_cast<size_t>(i) * k;
    float* pi = prob + static_cast<size_t>(i) * k;
    int arg = 0;
    for (int j = 1; j < k; ++j)
        if (zi[j] > zi[arg]) arg = j;
    const float zmax = zi[arg];
    double s = 0;
    for (int j = 0; j < k; ++j) {
        const float e = expf(zi[j] - zmax);
        pi[j] = e;
        s += e;
    }
    const float inv = static_cast<float>(1.0 / s);
    for (int j = 0; j < k; ++j) pi[j] *= inv;
    const int y = labels[i];
    loss[i] = log(s) - static_cast<double>(zi[y] - zmax);
    hit[i] = arg == y ? 1 : 0;
}

__global__ void k_xent_bwd(const float* __restrict__ prob, const int* __restrict__ labels, float* __restrict__ dz,
                           int n, int k) {
    const size_t total = static_cast<size_t>(n) * k;
    const float inv_n = 1.0f / n;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const int row = static_cast<int>(i / k), col = static_cast<int>(i % k);
        dz[i] = prob[i] * inv_n - (col == labels[row] ? inv_n : 0.0f);
    }
}

__global__ void k_sgd(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, size_t n, float lr,
                      float mom, float wd) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float d = g[i] + wd * w[i];
        const float vi = mom * v[i] + d;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

__global__ void k_seg_sq_norms(const float* __restrict__ x, const size_t* __restrict__ off,
                               const size_t* __restrict__ size, double* __restrict__ out) {
    __shared__ double part[kThreads];
    const size_t o = off[blockIdx.x], n = size[blockIdx.x];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = x[o + i];
        s += v * v;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (static_cast<int>(threadIdx.x) < step) part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

#define TULA_GRID_STRIDE(i, n)                                                          \
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
         i += static_cast<size_t>(gridDim.x) * blockDim.x)

__global__ void k_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void k_axpby(const float* __restrict__ x, float a, float* __restrict__ y, float b, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = a * x[i] + b * y[i];
}

// One block per chunk of one segment (block_seg/begin/end), so a single launch updates
// every segment with its own factor and weight decay.
__global__ void k_scaled_momentum(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v,
                                  const int* __restrict__ bseg, const size_t* __restrict__ bbeg,
                                  const size_t* __restrict__ bend, const float* __restrict__ scale,
                                  const float* __restrict__ wd, float lr, float mom) {
    const int k = bseg[blockIdx.x];
    const float s = scale[k], d = wd[k];
    for (size_t i = bbeg[blockIdx.x] + threadIdx.x; i < bend[blockIdx.x]; i += blockDim.x) {
        const float vi = mom * v[i] + s * (g[i] + d * w[i]);
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

__global__ void k_mul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = a[i] * b[i];
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

// PyTorch's adaptive window of output cell i of `o` over an input of `n`: [lo, hi).
__device__ __forceinline__ int win_lo(int i, int n, int o) { return (i * n) / o; }
__device__ __forceinline__ int win_hi(int i, int n, int o) { return ((i + 1) * n + o - 1) / o; }

__global__ void k_aavg_fwd(const float* __restrict__ x, float* __restrict__ y, int planes, int h, int w, int oh,
                           int ow) {
    const size_t total = static_cast<size_t>(planes) * oh * ow;
    TULA_GRID_STRIDE(t, total) {
        const int j = static_cast<int>(t % ow), i = static_cast<int>((t / ow) % oh);
        const size_t p = t / (static_cast<size_t>(oh) * ow);
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
        const int c = static_cast<int>(t % w), r = static_cast<int>((t / w) % h);
        const size_t p = t / (static_cast<size_t>(h) * w);
        const float* g = dy + p * oh * ow;
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

__global__ void k_to_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void k_from_bf16(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, size_t n, bool acc) {
    TULA_GRID_STRIDE(i, n) y[i] = acc ? y[i] + __bfloat162float(x[i]) : __bfloat162float(x[i]);
}

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

void add_row_bias(cudaStream_t s, float* y, const float* b, int rows, int cols) {
    const size_t n = static_cast<size_t>(rows) * cols;
    if (n == 0) return;
    k_add_row_bias<<<blocks_for(n), kThreads, 0, s>>>(y, b, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void add_col_sums(cudaStream_t s, const float* g, float* db, int rows, int cols) {
    if (cols <= 0) return;
    k_add_col_sums<<<(cols + kThreads - 1) / kThreads, kThreads, 0, s>>>(g, db, rows, cols);
    CUDA_CHECK_LAUNCH();
}

void softmax_xent_forward(cudaStream_t s, const float* z, const int* labels, float* prob, double* loss, int* hit,
                          int n, int k) {
    if (n <= 0) return;
    k_xent_fwd<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(z, labels, prob, loss, hit, n, k);
    CUDA_CHECK_LAUNCH();
}

void softmax_xent_backward(cudaStream_t s, const float* prob, const int* labels, float* dz, int n, int k) {
    const size_t total = static_cast<size_t>(n) * k;
    if (total == 0) return;
    k_xent_bwd<<<blocks_for(total), kThreads, 0, s>>>(prob, labels, dz, n, k);
    CUDA_CHECK_LAUNCH();
}

void sgd_momentum_update(cudaStream_t s, float* w, const float* g, float* v, size_t n, float lr, float momentum,
                         float wd) {
    if (n == 0) return;
    k_sgd<<<blocks_for(n), kThreads, 0, s>>>(w, g, v, n, lr, momentum, wd);
    CUDA_CHECK_LAUNCH();
}

void segment_sq_norms(cudaStream_t s, const float* x, const size_t* offsets, const size_t* sizes, int nseg,
                      double* out) {
    if (nseg <= 0) return;
    k_seg_sq_norms<<<nseg, kThreads, 0, s>>>(x, offsets, sizes, out);
    CUDA_CHECK_LAUNCH();
}

void add_tensors(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
    if (n == 0) return;
    k_add<<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n);
    CUDA_CHECK_LAUNCH();
}

void axpby(cudaStream_t s, const float* x, float a, float* y, float b, size_t n) {
    if (n == 0) return;
    k_axpby<<<blocks_for(n), kThreads, 0, s>>>(x, a, y, b, n);
    CUDA_CHECK_LAUNCH();
}

void scaled_momentum_update(cudaStream_t s, float* w, const float* g, float* v, const int* block_seg,
                            const size_t* block_begin, const size_t* block_end, int nblocks, const float* seg_scale,
                            const float* seg_wd, float lr, float momentum) {
    if (nblocks <= 0) return;
    k_scaled_momentum<<<nblocks, kThreads, 0, s>>>(w, g, v, block_seg, block_begin, block_end, seg_scale, seg_wd, lr,
                                                   momentum);
    CUDA_CHECK_LAUNCH();
}

void mul_tensors(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
    if (n == 0) return;
    k_mul<<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n);
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

void dropout_forward(cudaStream_t s, const float* x, float* y, float* mask, size_t n, float p, uint64_t seed) {
    if (n == 0) return;
    k_dropout_fwd<<<blocks_for(n), kThreads, 0, s>>>(x, y, mask, n, p, seed);
    CUDA_CHECK_LAUNCH();
}

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

void float_to_bf16(cudaStream_t s, const float* x, __nv_bfloat16* y, size_t n) {
    if (n == 0) return;
    k_to_bf16<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
    CUDA_CHECK_LAUNCH();
}

void bf16_to_float(cudaStream_t s, const __nv_bfloat16* x, float* y, size_t n, bool accumulate) {
    if (n == 0) return;
    k_from_bf16<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, accumulate);
    CUDA_CHECK_LAUNCH();
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
