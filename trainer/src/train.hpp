// tula-train: the training loop (data parallel), evaluation, and the profiling kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm.hpp"
#include "data.hpp"
#include "layers.hpp"
#include "model.hpp"
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
};

/// One epoch's numbers, identical on every rank (allreduced).
struct EpochResult {
    int epoch = 0;             ///< 1-based
    double train_loss = 0;     ///< mean training loss over the epoch's examples
    double train_accuracy = 0; ///< fraction of the epoch's training examples classified right (train mode)
    double test_loss = 0;
    double test_accuracy = 0;  ///< fraction of the test set, evaluation mode
    double seconds = 0;        ///< wall time of the training loop of the epoch (max over ranks), no evaluation
    double images_per_second = 0;  ///< training examples of the epoch (all ranks) / seconds
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
    /// One data-parallel SGD step on examples idx[0..n) of `d` (this rank's share):
    /// forward, loss, backward; when `sync` and more than one rank, ONE allreduce of the
    /// fused gradient buffer and division by the rank count (the mean of the ranks' mean
    /// gradients = the gradient of the global batch's mean loss); then the SGD update
    /// with rate `lr`. Returns this rank's mean loss on its n examples; adds the number
    /// classified right to *correct (if non-null).
    double step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct);
    /// Evaluation-mode loss and accuracy on all of `d`, sharded: rank r evaluates the
    /// contiguous slice [r*N/K, (r+1)*N/K) and the sums are allreduced, so every rank gets
    /// the result for the whole set. First broadcasts rank 0's BN running statistics (like
    /// PyTorch DDP's broadcast_buffers), so that all ranks evaluate the same network.
    EvalResult evaluate(const Dataset& d, int batch);
    Model& model() { return m_; }
    Sgd& optimizer() { return sgd_; }

private:
    Model& m_;
    Comm& comm_;
    Sgd sgd_;
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
