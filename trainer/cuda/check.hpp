// tula-train CUDA backend: error checks for the CUDA runtime, cuDNN and cuBLAS.
//
// Each macro evaluates a call once; on failure it throws std::runtime_error with the
// message "tula-train: <file>:<line>: <call> failed: <library's error string> (<code>)".
// The library's own strings come from cudaGetErrorString, cudnnGetErrorString and
// cublasGetStatusString (cuBLAS >= 11.4).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <stdexcept>
#include <string>

namespace tula {
namespace train {
namespace cuda {

/// Builds the message of a failed call and throws it as std::runtime_error.
[[noreturn]] inline void throw_error(const char* file, int line, const char* call, const char* what, int code) {
    throw std::runtime_error(std::string("tula-train: ") + file + ":" + std::to_string(line) + ": " + call +
                             " failed: " + (what ? what : "unknown error") + " (" + std::to_string(code) + ")");
}

}  // namespace cuda
}  // namespace train
}  // namespace tula

/// Throws if a CUDA runtime call does not return cudaSuccess.
#define CUDA_CHECK(call)                                                                              \
    do {                                                                                              \
        const cudaError_t tula_e_ = (call);                                                           \
        if (tula_e_ != cudaSuccess)                                                                   \
            ::tula::train::cuda::throw_error(__FILE__, __LINE__, #call, cudaGetErrorString(tula_e_),  \
                                             static_cast<int>(tula_e_));                              \
    } while (0)

/// Throws if a cuDNN call does not return CUDNN_STATUS_SUCCESS.
#define CUDNN_CHECK(call)                                                                             \
    do {                                                                                              \
        const cudnnStatus_t tula_s_ = (call);                                                         \
        if (tula_s_ != CUDNN_STATUS_SUCCESS)                                                          \
            ::tula::train::cuda::throw_error(__FILE__, __LINE__, #call, cudnnGetErrorString(tula_s_), \
                                             static_cast<int>(tula_s_));                              \
    } while (0)

/// Throws if a cuBLAS call does not return CUBLAS_STATUS_SUCCESS.
#define CUBLAS_CHECK(call)                                                                               \
    do {                                                                                                 \
        const cublasStatus_t tula_b_ = (call);                                                           \
        if (tula_b_ != CUBLAS_STATUS_SUCCESS)                                                            \
            ::tula::train::cuda::throw_error(__FILE__, __LINE__, #call, cublasGetStatusString(tula_b_),  \
                                             static_cast<int>(tula_b_));                                 \
    } while (0)

/// Throws if the last kernel launch failed (launch configuration errors; asynchronous
/// faults surface at the next synchronizing call).
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())
