// tula-train: the training loop (data parallel), evaluation, and the profiling kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm.hpp"
#include "data.hpp"
#include "hessian.hpp"
#include "layers.hpp"
#include "model.hpp"
#include "noise_scale.hpp"
#include "optim.hpp"

namespace tula {
namespace train {

/// A training run that cannot go on (diverged loss, inconsistent configuration). Every
/// rank throws it at the same point (it is decided on allreduced values).
struct TrainError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// Everything train() needs besides the model and the data.
struct TrainConfig {
    int epochs = 12;
    int global_batch = 64;     ///< B, examples per step summed over ranks; divisible by ranks
    LrSchedule lr;             ///< global_batch / steps_per_epoch / epochs are filled by train()
    double momentum = 0.9;
    double weight_decay = 5e-4;
    uint64_t seed = 1;         ///< data order (shuffle); the model is initialized by the caller
    int eval_batch = 500;      ///< examples per evaluation forward pass (per rank)
    /// Update rule and its hyper-parameters; optim.momentum / optim.weight_decay are
    /// overwritten by momentum / weight_decay above.
    OptimConfig optim;
    /// Estimate the gradient noise scale (NoiseScale) every this many steps; 0: never.
    int noise_every = 0;
    double noise_beta = 0.9;   ///< EMA weight of the noise-scale estimator
    /// > 0: the warmup ends once the relative change of the EMA of |g|^2 falls to this
    /// (NormWarmup, capped at lr.warmup_epochs); 0: fixed linear warmup (LrSchedule::at).
    double warmup_threshold = 0;
    double warmup_beta = 0.9;  ///< EMA weight of |g|^2 for the warmup test
    /// Fewest steps of the data-driven warmup (at least 1).
    int warmup_min_steps = 1;
    /// Measure the largest Hessian eigenvalue (HessianProbe) every this many steps, after
    /// the update of steps 0, K, 2K, ...; 0: never.
    int hessian_every = 0;
    int hessian_batch = 256;   ///< examples in the fixed probe batch (drawn once from the seed)
    PowerIterConfig hessian;   ///< power-iteration settings of the probe
    /// Called on every rank after each Hessian measurement with the step t (0-based, over
    /// the run), the eigenvalue, and |g| of step t's global-batch gradient (the gradient
    /// the update used, before the update). May be empty.
    std::function<void(int64_t step, double eigenvalue, double grad_norm)> on_hessian;
};

/// One epoch's numbers, identical on every rank (allreduced).
struct EpochResult {
    int epoch = 0;             ///< 1-based
    double train_loss = 0;     ///< mean training loss over the epoch's examples
    double train_accuracy = 0; ///< fraction of the epoch's training examples classified right (train mode)
    double test_loss = 0;
    double test_accuracy = 0;  ///< fraction of the test set, evaluation mode
    double seconds = 0;        ///< wall time of the training loop of the epoch (max over ranks), no evaluation, no Hessian probe
    double images_per_second = 0;  ///< training examples of the epoch (all ranks) / seconds
    double noise_scale = 0;    ///< B_simple estimate at the end of the epoch, examples; 0: none yet
    double lr = 0;             ///< rate of the epoch's last step
    int64_t warmup_end = -1;   ///< step at which the data-driven warmup ended; -1: not (yet)
    double grad_norm = 0;      ///< mean over the epoch's steps of |g| of the global-batch gradient
    /// Largest Hessian eigenvalue of the last measurement in or before this epoch
    /// (TrainConfig::hessian_every); 0: none measured.
    double hessian_eig = 0;
    int batch = 0;             ///< global batch of the epoch's last step, examples (grows with Local SGD's test)
};

/// What one Trainer::step measured besides the loss (identical on all ranks).
struct StepStats {
    double grad_norm2 = 0;     ///< |g|^2 of the gradient used for the update (global batch)
    bool noise = false;        ///< whether the noise-scale observation below was taken
    double b_small = 0, g2_small = 0;  ///< micro/local batch size and its mean |g|^2
    double b_big = 0, g2_big = 0;      ///< global batch size and its |g|^2
};

/// Mean loss and accuracy on a data set.
struct EvalResult {
    double loss = 0;
    double accuracy = 0;
    int64_t count = 0;
};

/// Holds what one training step needs besides the model: optimizer state, loss, batch
/// buffers. One per rank.
class Trainer {
public:
    Trainer(Model& model, Comm& comm, double momentum, double weight_decay);
    /// With the update rule of `oc`. Errors: std::invalid_argument as Optimizer.
    Trainer(Model& model, Comm& comm, const OptimConfig& oc);
    /// One data-parallel SGD step on examples idx[0..n) of `d` (this rank's share):
    /// forward, loss, backward; when `sync` and more than one rank, ONE allreduce of the
    /// fused gradient buffer and division by the rank count (the mean of the ranks' mean
    /// gradients = the gradient of the global batch's mean loss); then the SGD update
    /// with rate `lr`. Returns this rank's mean loss on its n examples; adds the number
    /// classified right to *correct (if non-null).
    /// When `stats` is given, fills its grad_norm2; when also `measure_noise`, takes a
    /// noise-scale observation (McCandlish et al. 2018, App. A.1): with K > 1 ranks the
    /// local |g_r|^2 (B_small = n) averaged over ranks (one extra allreduce of a scalar)
    /// against the allreduced |g|^2 (B_big = K n); with one rank and n >= 2, the batch is
    /// run as two micro-batches of floor(n/2) and n - floor(n/2) examples whose gradients
    /// are combined (weighted by size) into the batch gradient, B_small = n/2 and g2_small
    /// the mean of the two micro-batches' |g|^2. Collective: every rank must pass the same
    /// measure_noise.
    double step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                StepStats* stats = nullptr, bool measure_noise = false);
    /// Evaluation-mode loss and accuracy on all of `d`, sharded: rank r evaluates the
    /// contiguous slice [r*N/K, (r+1)*N/K) and the sums are allreduced, so every rank gets
    /// the result for the whole set. First broadcasts rank 0's BN running statistics (like
    /// PyTorch DDP's broadcast_buffers), so that all ranks evaluate the same network.
    EvalResult evaluate(const Dataset& d, int batch);
    Model& model() { return m_; }
    Optimizer& optimizer() { return opt_; }

private:
    Model& m_;
    Comm& comm_;
    Optimizer opt_;
    std::vector<float> gacc_;  // first micro-batch's gradient (noise measurement, 1 rank)
    SoftmaxCrossEntropy ce_;
    Tensor x_;
    std::vector<int> labels_;
    std::vector<int> idx_;
};

/// Trains `model` (already initialized, identical on all ranks) on `train_set` for
/// cfg.epochs epochs with global batch B = cfg.global_batch split evenly over comm's K
/// ranks. Each epoch: one permutation of the training set from Rng(seed) (the same on all
/// ranks), floor(N/B) steps (the last partial batch is dropped), rank r taking the
/// contiguous slice [r*B/K, (r+1)*B/K) of each global batch; then evaluation on test_set
/// (Trainer::evaluate). Calls on_epoch (if set) on every rank after each epoch.
/// The update rule is cfg.optim; the rate LrSchedule::at (fixed warmup) or, with
/// cfg.warmup_threshold > 0, LrSchedule::at_adaptive with a NormWarmup fed the global |g|^2
/// of every step; every cfg.noise_every steps a NoiseScale observation is taken
/// (Trainer::step) and, with LrScaling::Noise, its B_simple becomes the schedule's B_noise.
/// Errors: TrainError if the training set is smaller than one global batch, B is not
/// divisible by K, or the loss becomes non-finite (diverged: lower --lr).
std::vector<EpochResult> train(Model& model, const Dataset& train_set, const Dataset& test_set, const TrainConfig& cfg,
                               Comm& comm, const std::function<void(const EpochResult&)>& on_epoch);

/// Mean seconds of one full training step (forward, backward, SGD update, no allreduce)
/// at local batch `batch` on this process: `warmup` untimed steps, then `iters` timed
/// ones, on consecutive examples of `d` (wrapping around). The model's weights change.
double time_compute_step(Model& model, const Dataset& d, int batch, int warmup, int iters);

/// Mean seconds of one MPI_Allreduce(SUM) of ceil(bytes/4) float32 values across all
/// ranks of `comm`: `warmup` untimed, then `iters` timed calls between barriers; the
/// maximum over ranks. Collective: every rank must call it. 0 for a single rank.
double time_allreduce(Comm& comm, int64_t bytes, int warmup, int iters);

}  // namespace train
}  // namespace tula
