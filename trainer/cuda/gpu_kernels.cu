// tula-train CUDA backend: the hand-written kernels (see gpu.hpp for the maths).
// Elementwise kernels use grid-stride loops with 256-thread blocks; reductions accumulate
// in double through shared memory.
#include <cfloat>

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

}  // namespace cuda
}  // namespace train
}  // namespace tula
