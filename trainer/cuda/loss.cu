// tula-train CUDA backend: softmax cross-entropy, with its kernels.
// See gpu.hpp for the maths and the shapes.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"

namespace tula {
namespace train {
namespace cuda {
namespace {

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

}  // namespace

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

double GpuSoftmaxCrossEntropy::forward(const DevTensor& logits, const int* labels, int n, int64_t* correct) {
    if (logits.n != n)
        throw std::invalid_argument("softmax cross-entropy: " + std::to_string(n) + " labels for logits " + logits.str());
    const int k = static_cast<int>(logits.sample_size());
    for (int i = 0; i < n; ++i)
        if (labels[i] < 0 || labels[i] >= k)
            throw std::invalid_argument("softmax cross-entropy: label " + std::to_string(labels[i]) + " outside [0, " +
                                        std::to_string(k) + ")");
    prob_.resize(n, k, 1, 1);
    if (n == 0) return 0.0;
    int* dlab = static_cast<int*>(labels_.reserve(sizeof(int) * n));
    double* dloss = static_cast<double*>(loss_.reserve(sizeof(double) * n));
    int* dhit = static_cast<int*>(hits_.reserve(sizeof(int) * n));
    CUDA_CHECK(cudaMemcpyAsync(dlab, labels, sizeof(int) * n, cudaMemcpyHostToDevice, ctx_.stream()));
    softmax_xent_forward(ctx_.stream(), logits.ptr(), dlab, prob_.ptr(), dloss, dhit, n, k);
    loss_host_.resize(n);
    hits_host_.resize(n);
    CUDA_CHECK(cudaMemcpyAsync(loss_host_.data(), dloss, sizeof(double) * n, cudaMemcpyDeviceToHost, ctx_.stream()));
    CUDA_CHECK(cudaMemcpyAsync(hits_host_.data(), dhit, sizeof(int) * n, cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.sync();
    double loss = 0;
    int64_t right = 0;
    for (int i = 0; i < n; ++i) {
        loss += loss_host_[i];
        right += hits_host_[i];
    }
    if (correct) *correct += right;
    return loss / n;
}

const DevTensor& GpuSoftmaxCrossEntropy::backward() {
    dz_.resize_like(prob_);
    softmax_xent_backward(ctx_.stream(), prob_.ptr(), static_cast<const int*>(labels_.get()), dz_.ptr(), prob_.n,
                          prob_.c);
    return dz_;
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
