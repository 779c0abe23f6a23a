// tula-train CUDA backend: the training step on a GPU (cuda::GpuTrainer, a StepEngine of
// train(), train.hpp) and the compute-step timer for profiling GPU nodes.
//
// Only code built with the CUDA backend includes this header (tula-train's app/ under
// TULA_HAVE_CUDA, tests/gpu). Errors of CUDA, cuDNN and cuBLAS surface as
// std::runtime_error with file and line (check.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "allreduce.hpp"
#include "gpu.hpp"
#include "train/train.hpp"

namespace tula {
namespace train {
namespace cuda {

/// One rank's training step on its GPU, equivalent to the CPU Trainer's (train.hpp):
///  - the model is the GPU twin of the host Model (build_gpu_model with the same name,
///    input shape and classes, so the fused buffers have the same layout); begin() uploads
///    the host parameters and BN state, end() downloads them again;
///  - the data set's bytes are uploaded once per Dataset (uint8, (count, C, H, W)) and each
///    batch is gathered and normalized on the GPU ((v/255 - mean)/std, as gather_batch);
///  - gradients are averaged over ranks by ONE allreduce of the fused gradient buffer, with
///    the first method of `allreduce` that works: "nccl" (ncclAllReduce with ncclAvg on the
///    context's stream, GPU to GPU; needs a build with NCCL and an NCCL communicator, set up
///    from a unique id that rank 0 broadcasts over MPI) or "mpi" (host-staged: device ->
///    host, Comm::allreduce_sum, host -> device). With one rank nothing is reduced, unless
///    `force_allreduce` (a test hook: reduce anyway, over the one rank);
///  - SGD with momentum and weight decay runs on the GPU (GpuSgd). AGS and LARS run on the
///    GPU too: the per-segment |w| and |g| come from the norm kernel, the factors s_p from
///    the CPU rule's own ags_factor / lars_factor (optim.hpp, one value per segment), and one
///    fused kernel launch applies v = mu v + s_p (g + wd w), w -= lr v to every segment.
///    LAMB runs the CPU Optimizer on host copies of parameters and gradients (correct, but
///    each step moves the parameters across PCIe twice);
///  - |g|^2 for StepStats comes from the per-segment norm kernel; noise-scale observations
///    (measure_noise) are taken as Trainer::step takes them (McCandlish et al. 2018, App.
///    A.1): across ranks, or with one rank from two micro-batches combined on the GPU.
/// Errors: std::invalid_argument for an optimizer config the Optimizer rejects;
/// std::runtime_error from CUDA.
class GpuTrainer : public StepEngine {
public:
    GpuTrainer(GpuContext& ctx, Model& host_model, Comm& comm, const OptimConfig& oc, uint64_t seed = 1,
               const std::vector<std::string>& allreduce = {"nccl", "mpi"}, bool force_allreduce = false);
    /// The allreduce method in use ("nccl", "mpi", or "none" for one rank) and, when a method
    /// earlier in the list could not be used, why (else empty).
    const std::string& allreduce_method() const { return method_; }
    const std::string& allreduce_fallback_reason() const { return fallback_why_; }
    ~GpuTrainer() override;
    GpuTrainer(const GpuTrainer&) = delete;
    GpuTrainer& operator=(const GpuTrainer&) = delete;
    void begin() override;
    double step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                StepStats* stats = nullptr, bool measure_noise = false) override;
    EvalResult evaluate(const Dataset& d, int batch) override;
    void end() override;
    GpuModel& gpu_model() { return *g_; }

private:
    void gather(const Dataset& d, const int* idx, int n);  // x_ (n, C, H, W), labels_ (n,) on the host
    double grad_norm2();
    void trust_ratio_step(double lr);  // AGS / LARS on the device
    void allreduce_grads();             // the mean over ranks, by allreduce_

    GpuContext& ctx_;
    Model& host_;
    Comm& comm_;
    OptimConfig oc_;
    std::unique_ptr<GpuModel> g_;
    std::unique_ptr<GpuSgd> sgd_;         // SGD on the device
    std::unique_ptr<Optimizer> host_opt_; // LAMB, on host copies
    bool trust_ = false;                  // AGS / LARS on the device
    DevMem vel_, blk_seg_, blk_beg_, blk_end_, seg_scale_, seg_wd_, wnorm_out_;
    int nblocks_ = 0;
    std::vector<double> wnorms_;
    std::vector<float> scale_;
    GpuSoftmaxCrossEntropy ce_;
    const Dataset* cached_ = nullptr;     // whose bytes are in images_
    DevMem images_, idx_dev_, seg_meta_, seg_out_;
    DevMem gacc_;                         // first micro-batch's weighted gradient (noise, 1 rank)
    DevMem bn_saved_;                     // BN running statistics before a noise-measuring step (1 rank)
    DevTensor x_;
    std::vector<int> labels_;
    int* idx_pinned_ = nullptr;           // pinned host staging of a batch's indices
    size_t idx_pinned_n_ = 0;
    std::vector<float> hp_, hg_;          // host staging (parameters, gradients)
    std::vector<double> norms_;
    std::string method_ = "none", fallback_why_;
    bool force_allreduce_ = false;
    std::unique_ptr<GpuAllreduce> allreduce_;  // the gradient mean over ranks; null for one rank
};

/// Mean seconds of one full training step (forward, loss, backward, SGD update, no
/// allreduce) of `model`'s GPU twin at local batch `batch` on device `ctx`, like
/// time_compute_step (train.hpp): `warmup` untimed steps (they also run cuDNN's algorithm
/// search), then `iters` timed ones, each ending when the device is idle. With the
/// environment variable TULA_GPU_LAYER_TIMES=1 it also prints, to stderr, the mean forward
/// and backward milliseconds of every top-level layer (CUDA events). Errors: TrainError
/// for an empty batch or data set; std::runtime_error from CUDA (e.g. out of memory).
double time_compute_step_gpu(GpuContext& ctx, Model& model, const Dataset& d, int batch, int warmup, int iters);

/// y (n, C, H, W) = (images[idx[i]] / 255 - mean) / std for i < n; images (count, C, H, W)
/// bytes and idx (n,) in device memory.
void gather_normalize(cudaStream_t s, const uint8_t* images, const int* idx, int n, size_t px, float mean, float std_,
                      float* y);

}  // namespace cuda
}  // namespace train
}  // namespace tula
