// tula-train CUDA backend: the gradient allreduce methods. See allreduce.hpp.
#include "allreduce.hpp"

#include <stdexcept>

#include "check.hpp"
#ifdef TULA_HAVE_NCCL
#include <nccl.h>
#endif

namespace tula {
namespace train {
namespace cuda {
namespace {

// Host-staged: device -> host, sum over ranks with MPI, divide, host -> device. The copies are
// ordered on the context's stream, which is a non-blocking stream: a plain cudaMemcpy runs on
// the legacy default stream and would not wait for the backward kernels that write buf.
class MpiStagedAllreduce final : public GpuAllreduce {
public:
    MpiStagedAllreduce(GpuContext& ctx, Comm& comm) : ctx_(ctx), comm_(comm) {}
    const char* name() const override { return "mpi"; }
    void mean(float* buf, size_t n) override {
        host_.resize(n);
        CUDA_CHECK(cudaMemcpyAsync(host_.data(), buf, sizeof(float) * n, cudaMemcpyDeviceToHost, ctx_.stream()));
        CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
        comm_.allreduce_sum(host_.data(), n);
        const float inv = 1.0f / static_cast<float>(comm_.size());
        for (float& v : host_) v *= inv;
        CUDA_CHECK(cudaMemcpyAsync(buf, host_.data(), sizeof(float) * n, cudaMemcpyHostToDevice, ctx_.stream()));
        // host_ must outlive the copy (the next call may reallocate it)
        CUDA_CHECK(cudaStreamSynchronize(ctx_.stream()));
    }

private:
    GpuContext& ctx_;
    Comm& comm_;
    std::vector<float> host_;
};

#ifdef TULA_HAVE_NCCL
// GPU to GPU: ncclAllReduce with ncclAvg on the context's stream.
class NcclAllreduce final : public GpuAllreduce {
public:
    NcclAllreduce(GpuContext& ctx, ncclComm_t c) : ctx_(ctx), nccl_(c) {}
    ~NcclAllreduce() override { ncclCommDestroy(nccl_); }
    const char* name() const override { return "nccl"; }
    void mean(float* buf, size_t n) override {
        const ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat, ncclAvg, nccl_, ctx_.stream());
        if (r != ncclSuccess)
            throw std::runtime_error(std::string("tula-train: ncclAllReduce failed: ") + ncclGetErrorString(r));
    }

private:
    GpuContext& ctx_;
    ncclComm_t nccl_;
};

// An NCCL communicator over the ranks of `comm`, or nullptr with *why set when any rank
// could not make one (all ranks agree).
std::unique_ptr<GpuAllreduce> try_nccl(GpuContext& ctx, Comm& comm, std::string* why) {
    ncclUniqueId id{};
    double ok = 1;
    if (comm.rank() == 0 && ncclGetUniqueId(&id) != ncclSuccess) ok = 0;
    static_assert(sizeof(id) % sizeof(float) == 0, "ncclUniqueId is a whole number of floats");
    comm.broadcast(reinterpret_cast<float*>(&id), sizeof(id) / sizeof(float), 0);  // the bytes, as floats
    double all = ok;
    comm.allreduce_sum(&all, 1);
    ncclComm_t c = nullptr;
    ncclResult_t r = ncclSuccess;
    if (all == comm.size()) r = ncclCommInitRank(&c, comm.size(), id, comm.rank());
    double good = (all == comm.size() && r == ncclSuccess) ? 1 : 0;
    comm.allreduce_sum(&good, 1);
    if (good == comm.size()) return std::make_unique<NcclAllreduce>(ctx, c);
    if (c) ncclCommDestroy(c);
    *why = std::string("NCCL could not be set up (") + (r != ncclSuccess ? ncclGetErrorString(r) : "on another rank") +
           ")";
    return nullptr;
}
#endif

}  // namespace

std::unique_ptr<GpuAllreduce> make_gpu_allreduce(GpuContext& ctx, Comm& comm, const std::vector<std::string>& methods,
                                                 std::string* fallback_why) {
    std::string why;
    for (const std::string& m : methods) {
        if (m == "mpi") {
            if (fallback_why) *fallback_why = why;
            return std::make_unique<MpiStagedAllreduce>(ctx, comm);
        }
        if (m != "nccl") throw std::invalid_argument("unknown GPU allreduce method '" + m + "'; valid: nccl, mpi");
#ifdef TULA_HAVE_NCCL
        if (auto a = try_nccl(ctx, comm, &why)) {
            if (fallback_why) *fallback_why = why;
            return a;
        }
#else
        (void)ctx;
        why = "this build has no NCCL";
#endif
    }
    throw std::invalid_argument("no usable GPU allreduce method in the list" + (why.empty() ? std::string() : ": " + why));
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
