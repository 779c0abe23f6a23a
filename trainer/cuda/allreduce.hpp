// tula-train CUDA backend: the gradient allreduce of data-parallel GPU training, one interface
// with one class per method (NCCL on the device, or MPI staged through the host).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "gpu.hpp"
#include "dist/comm.hpp"

namespace tula {
namespace train {
namespace cuda {

/// The mean over the ranks of a float32 device buffer, in place. Every rank must call mean()
/// with the same n in the same order (collective semantics).
class GpuAllreduce {
public:
    virtual ~GpuAllreduce() = default;
    /// "nccl" or "mpi".
    virtual const char* name() const = 0;
    /// buf[0, n) (device memory, float32) becomes its mean over the ranks, ordered on the
    /// context's stream. Errors: std::runtime_error when the collective fails.
    virtual void mean(float* buf, size_t n) = 0;
};

/// The first method of `methods` that every rank can use:
///  - "nccl": ncclAllReduce with ncclAvg on the context's stream, GPU to GPU. Needs a build
///    with NCCL; the communicator is set up from a unique id that rank 0 broadcasts over
///    `comm`, and the set-up's success is agreed on by all ranks.
///  - "mpi": host-staged, device -> host, Comm::allreduce_sum, divide by the ranks,
///    host -> device; both copies are ordered on the context's stream and waited for.
/// When an earlier method could not be used, *fallback_why (if given) says why.
/// Errors: std::invalid_argument for an unknown method name, or when no method of the list
/// can be used (naming why).
std::unique_ptr<GpuAllreduce> make_gpu_allreduce(GpuContext& ctx, Comm& comm, const std::vector<std::string>& methods,
                                                 std::string* fallback_why);

}  // namespace cuda
}  // namespace train
}  // namespace tula
