// tula-train CUDA backend: fully connected layer (cuBLAS), with its bias kernels.
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

class LinearGpu final : public LeafLayer<GpuLayer, spec::Linear> {
public:
    LinearGpu(GpuContext& ctx, int in, int out) : LeafLayer(spec::Linear(in, out)), ctx_(ctx) {}
    // Row-major X (N, F), W (out, F), Y (N, out) are the column-major X^T (F, N), W^T (F, out),
    // Y^T (out, N): Y^T = (W^T)^T X^T.
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "linear");
        x_ = &x;
        y_.resize(x.n, spec_.out_f, 1, 1);
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, spec_.out_f, x.n, spec_.in_f, params_, spec_.in_f, x.ptr(), spec_.in_f, kZero, y_.ptr(), spec_.out_f);
        add_row_bias(ctx_.stream(), y_.ptr(), bias(params_), x.n, spec_.out_f);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.sample_size() != static_cast<size_t>(spec_.out_f))
            throw std::invalid_argument("linear backward: dy " + dy.str());
        // dW (out, F) += G^T X  <=>  dW^T (F, out) += X^T (F, N) * G (N, out) [G^T col-major (out, N)]
        gemm(CUBLAS_OP_N, CUBLAS_OP_T, spec_.in_f, spec_.out_f, x.n, x.ptr(), spec_.in_f, dy.ptr(), spec_.out_f, kOne, grads_, spec_.in_f);
        add_col_sums(ctx_.stream(), dy.ptr(), bias(grads_), x.n, spec_.out_f);
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(x);
        // dX (N, F) = G W  <=>  dX^T (F, N) = W^T (F, out) * G^T (out, N)
        gemm(CUBLAS_OP_N, CUBLAS_OP_N, spec_.in_f, x.n, spec_.out_f, params_, spec_.in_f, dy.ptr(), spec_.out_f, kZero, dx_.ptr(), spec_.in_f);
        return dx_;
    }

private:
    float* bias(float* base) const { return base + static_cast<size_t>(spec_.in_f) * spec_.out_f; }
    // C = op(A) op(B) + beta C, column-major, float32 operands: SGEMM, or on a Bf16 context
    // GemmEx with bf16 tensor-core compute and float32 accumulation.
    void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda, const float* b,
              int ldb, const float& beta, float* c, int ldc) {
        if (ctx_.bf16())
            CUBLAS_CHECK(cublasGemmEx(ctx_.blas(), ta, tb, m, n, k, &kOne, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                                      &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
        else
            CUBLAS_CHECK(cublasSgemm(ctx_.blas(), ta, tb, m, n, k, &kOne, a, lda, b, ldb, &beta, c, ldc));
    }

    GpuContext& ctx_;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
};

}  // namespace

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

std::unique_ptr<GpuLayer> make_gpu_linear(GpuContext& ctx, int in_features, int out_features) {
    return std::make_unique<LinearGpu>(ctx, in_features, out_features);
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
