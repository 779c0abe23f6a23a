// tula-train CUDA backend, internal to trainer/cuda/: what the op files share: the launch
// geometry of the element-wise kernels (256-thread blocks, grid-stride loops), the input-shape
// check, the empty gradient, the cuDNN tensor descriptor and the scaling constants.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "check.hpp"
#include "gpu.hpp"

namespace tula {
namespace train {
namespace cuda {

constexpr int kThreads = 256;

// Blocks for n elements, capped (grid-stride loops cover the rest).
inline unsigned blocks_for(size_t n) {
    const size_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 * 8 ? 65535 * 8 : b));
}

#define TULA_GRID_STRIDE(i, n)                                                          \
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
         i += static_cast<size_t>(gridDim.x) * blockDim.x)

/// Throws std::invalid_argument naming `who` when x's example shape (C, H, W) is not `in`.
inline void check_input(const DevTensor& x, const Shape& in, const std::string& who) {
    if (x.shape() != in)
        throw std::invalid_argument(who + ": input " + x.str() + " does not match the configured " +
                                    "example shape " + in.str());
}

/// t emptied (shape (0, 0, 0, 0)): what backward() returns when no input gradient is needed.
inline const DevTensor& no_grad(DevTensor& t) {
    t.resize(0, 0, 0, 0);
    return t;
}

// RAII wrapper of a cuDNN tensor descriptor.
struct TensorDesc {
    cudnnTensorDescriptor_t d = nullptr;
    TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
    ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
    void set(int n, int c, int h, int w, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, n, c, h, w));
    }
};

// alpha and beta of cuDNN / cuBLAS calls.
const float kOne = 1.0f, kZero = 0.0f;

}  // namespace cuda
}  // namespace train
}  // namespace tula
