// tula-train: the training loop (data parallel), evaluation, and the profiling kernels.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tula/workload.hpp"
#include "train/checkpoint.hpp"
#include "dist/comm.hpp"
#include "data/data.hpp"
#include "optim/hessian.hpp"
#include "core/layers.hpp"
#include "core/model.hpp"
#include "optim/noise_scale.hpp"
#include "optim/optim.hpp"
#include "train/prefetch.hpp"

namespace tula {
namespace train {

/// Optimizer steps in one epoch of `examples` at `global_batch` as tula-train trains it: the
/// last, smaller batch is left out (tula::steps_per_epoch with LastBatch::Drop, the one place
/// steps are counted), floor(examples / global_batch); 0 when either is not > 0.
inline int64_t epoch_steps(int64_t examples, int64_t global_batch) {
    return static_cast<int64_t>(tula::steps_per_epoch(static_cast<double>(examples), static_cast<double>(global_batch),
                                                      tula::LastBatch::Drop));
}

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
    /// Label smoothing eps of the training loss (SoftmaxCrossEntropy::set_label_smoothing,
    /// Szegedy et al. 2016, sec. 7), in [0, 1); 0: plain cross-entropy. CPU path only.
    float label_smoothing = 0.0f;
    uint64_t seed = 1;         ///< data order (shuffle); the model is initialized by the caller
    int eval_batch = tula::kTrainerEvalBatch;  ///< examples per evaluation forward pass (per rank)
    /// Update rule and its hyper-parameters; optim.momentum / optim.weight_decay are
    /// overwritten by momentum / weight_decay above.
    OptimConfig optim;
    /// Estimate the gradient noise scale (NoiseScale) every this many steps; 0: never.
    int noise_every = 0;
    double noise_beta = 0.9;   ///< EMA weight of the noise-scale estimator
    /// > 0: the warmup ends once the relative change of the EMA of |g|^2 over the last
    /// warmup_window steps falls to this (NormWarmup, capped at lr.warmup_epochs, ramping
    /// from near zero: LrSchedule::at_adaptive); 0: fixed linear warmup (LrSchedule::at).
    double warmup_threshold = 0;
    double warmup_beta = 0.9;  ///< EMA weight of |g|^2 for the warmup test
    int warmup_window = 10;    ///< steps over which the warmup test measures the change
    /// Gradient bucket size in bytes for the overlapped allreduce (Trainer::set_bucket_bytes);
    /// 0: one blocking allreduce of all gradients after backward.
    size_t bucket_bytes = size_t{25} << 20;
    /// Random crop / flip of the training batches (Trainer::set_augment); none by default.
    Augment augment;
    /// Gather (and augment) step k+1's batch on a background thread while step k computes
    /// (Trainer::set_prefetch; CPU path only, the loss trajectory is the same either way).
    bool prefetch = true;
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
    /// > 0: stop at the end of the first epoch whose test accuracy reaches this fraction
    /// (reached_target); the schedule still spans `epochs`. 0: train all epochs.
    double target_accuracy = 0;
    /// Held-out validation examples evaluated after every epoch into EpochResult::
    /// val_accuracy / val_loss (split_validation); null or empty: none. Not owned.
    const Dataset* val_set = nullptr;
};

/// Whether training stops after an epoch of test accuracy `accuracy` (a fraction) under
/// TrainConfig::target_accuracy `target`: target > 0 and accuracy >= target. Pure.
bool reached_target(double accuracy, double target);

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
    double val_loss = 0;       ///< on TrainConfig::val_set, evaluation mode; 0 without one
    double val_accuracy = -1;  ///< fraction of TrainConfig::val_set classified right; -1: no validation set
    /// Wall time of the evaluations after the epoch, the test set's and then the validation
    /// set's when there is one (this rank's, up to the allreduce of the sums that ends each), seconds.
    double eval_seconds = 0;
};

/// What one Trainer::step measured besides the loss (identical on all ranks).
struct StepStats {
    double grad_norm2 = 0;     ///< |g|^2 of the gradient used for the update (global batch)
    bool noise = false;        ///< whether the noise-scale observation below was taken
    double b_small = 0, g2_small = 0;  ///< micro/local batch size and its mean |g|^2
    double b_big = 0, g2_big = 0;      ///< global batch size and its |g|^2
    /// Seconds the step spent getting its batch: gathering it, or with a prefetched batch
    /// waiting for the loader thread (0 when the engine does not measure it).
    double gather_seconds = 0;
    /// The smallest and largest per-tensor factor the update applied over the segments with
    /// weight decay (Optimizer::last_factors: AGS s_p, LARS lambda_p, LAMB r_p; 1 for SGD);
    /// 0 and 0 when the engine does not report them or the model has no such segment.
    double trust_min = 0, trust_max = 0;

    /// Takes the two-batch gradient noise observation of a data-parallel step (McCandlish et
    /// al. 2018, App. A.1): sums this rank's squared local-gradient norm `local_g2` over the
    /// ranks of `comm` (one collective, every rank must call it) and sets B_small = n (the
    /// local batch, examples), g2_small = the ranks' mean, B_big = K n. g2_big is set by the
    /// caller from the reduced gradient.
    void observe_noise(Comm& comm, double local_g2, int n);
};

/// One training step as the --metrics log and the progress bar see it (identical on all ranks).
struct StepRecord {
    int64_t step = 0;            ///< 0-based step over the whole run
    int epoch = 1;               ///< 1-based
    int64_t step_in_epoch = 0;   ///< 0-based within the epoch
    int64_t steps_per_epoch = 0;
    double loss = 0;             ///< mean training loss of the step's global batch
    double lr = 0;               ///< rate used by the step
    double grad_norm = 0;        ///< |g| of the averaged gradient (before the update)
    double seconds = 0;          ///< wall time of the step on rank 0 (incl. communication)
    double images_per_second = 0;  ///< global batch / seconds
    int64_t examples = 0;        ///< examples of the step over all ranks (its global batch)
    double gather_seconds = 0;   ///< of `seconds`, rank 0's time getting the batch (StepStats::gather_seconds)
    double trust_min = 0, trust_max = 0;  ///< the update's per-tensor factor range (StepStats::trust_min); 0: not reported
};

/// Optional extras of train(): a per-step callback, a checkpoint to resume from, and where
/// to write a checkpoint when a stop signal arrives (see checkpoint.hpp).
struct TrainHooks {
    /// Called on every rank after every step.
    std::function<void(const StepRecord&)> on_step;
    /// Checkpoint file written on a stop signal ("": stop signals are not checked).
    std::string checkpoint_path;
    /// The run's configuration (stored in, and compared with, checkpoints).
    RunConfig config = RunConfig::object();
    /// Continue from this state (read_checkpoint; config already compared), or nullptr. A
    /// branch (a checkpoint of another schedule) is resumed the same way: its weights,
    /// optimizer, warmup and noise state and position, with this run's schedule.
    const Checkpoint* resume = nullptr;
    /// Epochs (1-based) at whose end the state is also written, to
    /// saved_epoch_path(checkpoint_path, epoch), and training goes on: the branch points of
    /// warmup-stable-decay runs (Hägele et al. 2024, §3). Needs checkpoint_path.
    std::vector<int> save_epochs;
    /// Called after every step, on the ranks where it is set, with the longest step so far
    /// (seconds); true stops the run as SIGUSR1 does (checkpoint, then requeue): the time limit
    /// is near (tula-train's job_time_left and stop_reserve_seconds, tula/stop.hpp).
    std::function<bool(double longest_step_seconds)> time_is_up;
    /// Output: set when train() returned early after writing a checkpoint on a signal.
    bool stopped = false;
    /// Output, with `stopped`: no rank got SIGTERM, so the job may be requeued to go on.
    bool requeue = false;
    /// Output, with `stopped`: the steps this call of train() trained, their training seconds
    /// (the step loops' time, without evaluations and Hessian probes), and the steps of the
    /// run left after the stop (epochs x steps per epoch less those done).
    int64_t part_steps = 0;
    double part_train_seconds = 0;
    double longest_step = 0;  ///< the longest of those steps, seconds
    int64_t steps_left = 0;
    /// Output: the run's steps, epochs x steps per epoch, its global batch and epochs (set
    /// when train() starts).
    int64_t total_steps = 0;
    int global_batch = 0;
    int epochs = 0;
    /// Output, set at the end of every epoch: the run's gradient noise scale for the profile
    /// database (examples; 0 when not estimated): the median of the estimator's B_simple
    /// (NoiseScale::value, the ratio of the EMAs) taken after each observation of the epoch,
    /// or its final value when no observation of the epoch had one. The median over the
    /// epoch's ~steps/noise_every EMA values is less sensitive to the last few noisy
    /// observations than the final EMA (McCandlish et al. 2018, App. A.1: single estimates
    /// are very noisy). A resumed epoch counts its observations since the resume.
    double noise_scale = 0;
    int64_t noise_observations = 0;  ///< Output: noise-scale observations of the run so far
    /// Output: steps of this call of train() whose batch the CPU Trainer's loader thread had
    /// gathered in advance (TrainConfig::prefetch; 0 when off or with another engine).
    int64_t prefetched = 0;
    /// Output, set when train() returns without a stop: the training seconds of each part of
    /// the run, in order: those of the parts before the resume (Checkpoint::parts), then this
    /// one's, which is the rest of the sum of the epochs' seconds (so the list sums to it). A
    /// run never stopped has one part. A part's seconds are those it trained: its whole epochs
    /// and its share of an epoch a stop split. Empty before, and after a stop.
    std::vector<double> part_seconds;
};

/// The file of the state saved at the end of `epoch` (TrainHooks::save_epochs):
/// checkpoint_path + ".e" + epoch, e.g. "run.ckpt.e8". Its position is the start of the next
/// epoch. Pure.
std::string saved_epoch_path(const std::string& checkpoint_path, int epoch);

/// Mean loss and accuracy on a data set.
struct EvalResult {
    double loss = 0;
    double accuracy = 0;
    int64_t count = 0;
};

/// The per-step work of train(), behind which the backends differ: Trainer (below) runs
/// on the CPU with the host Model; cuda::GpuTrainer (trainer/cuda/gpu_train.hpp) runs the
/// same step on a GPU. train() calls begin() once after the start weights are agreed on
/// (broadcast into the host Model), step() per step, evaluate() per epoch, and end() at the
/// end (after which the host Model holds the final weights).
class StepEngine {
public:
    virtual ~StepEngine() = default;
    /// Takes the host Model's current parameters and state (no-op on the CPU).
    virtual void begin() {}
    /// See Trainer::prefetch (no-op: an engine that does not prefetch).
    virtual void prefetch(const Dataset& /*d*/, const int* /*idx*/, int /*n*/) {}
    /// See Trainer::step.
    virtual double step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                        StepStats* stats = nullptr, bool measure_noise = false) = 0;
    /// See Trainer::evaluate.
    virtual EvalResult evaluate(const Dataset& d, int batch) = 0;
    /// Leaves the final parameters and state in the host Model (no-op on the CPU).
    virtual void end() {}
};

/// The end of an epoch shared by train() and train_local_sgd(): refuses a non-finite
/// training loss (TrainError "training diverged in epoch E ..."), evaluates `test_set`
/// with `engine` in batches of `eval_batch` into r.test_loss / r.test_accuracy (and
/// `val_set`, when given and not empty, into r.val_loss / r.val_accuracy), appends r to
/// `out` and calls on_epoch(r) if set. Collective (evaluation is sharded over ranks).
void finish_epoch(EpochResult& r, StepEngine& engine, const Dataset& test_set, int eval_batch,
                  std::vector<EpochResult>& out, const std::function<void(const EpochResult&)>& on_epoch,
                  const Dataset* val_set = nullptr);

/// Mean loss and accuracy of `d` evaluated in shards: rank r of comm's K ranks evaluates the
/// contiguous slice [r*N/K, (r+1)*N/K) in batches of at most `batch` examples, calling
/// eval_batch(idx, n, &correct) for each (it returns the batch's mean loss and adds the
/// number classified right), and the sums are allreduced, so every rank gets the result for
/// the whole set. Collective. Errors: whatever eval_batch throws.
EvalResult evaluate_sharded(const Dataset& d, int batch, Comm& comm,
                            const std::function<double(const int* idx, int n, int64_t* correct)>& eval_batch);

/// Holds what one training step needs besides the model: optimizer state, loss, batch
/// buffers. One per rank.
class Trainer : public StepEngine {
public:
    Trainer(Model& model, Comm& comm, double momentum, double weight_decay);
    /// With the update rule of `oc`. Errors: std::invalid_argument as Optimizer.
    Trainer(Model& model, Comm& comm, const OptimConfig& oc);
    /// Label smoothing of the training loss (see TrainConfig::label_smoothing). Errors:
    /// std::invalid_argument unless 0 <= eps < 1.
    void set_label_smoothing(float eps) { ce_.set_label_smoothing(eps); }
    /// One data-parallel SGD step on examples idx[0..n) of `d` (this rank's share):
    /// forward, loss, backward; when `sync` and more than one rank, ONE allreduce of the
    /// fused gradient buffer and division by the rank count (the mean of the ranks' mean
    /// gradients = the gradient of the global batch's mean loss); then the SGD update
    /// with rate `lr`. Returns this rank's mean loss on its n examples; adds the number
    /// classified right to *correct (if non-null).
    /// When `stats` is given, fills its grad_norm2 and trust_min/trust_max; when also `measure_noise`, takes a
    /// noise-scale observation (McCandlish et al. 2018, App. A.1): with K > 1 ranks the
    /// local |g_r|^2 (B_small = n) averaged over ranks (one extra allreduce of a scalar)
    /// against the allreduced |g|^2 (B_big = K n); with one rank and n >= 2, the batch is
    /// run as two micro-batches of floor(n/2) and n - floor(n/2) examples whose gradients
    /// are combined (weighted by size) into the batch gradient, B_small = n/2 and g2_small
    /// the mean of the two micro-batches' |g|^2, and the batch-norm running statistics are
    /// left as they were before the step (the half-batch passes would update them twice, so
    /// the steps that measure would train them differently from the others). Collective:
    /// every rank must pass the same measure_noise.
    double step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                StepStats* stats = nullptr, bool measure_noise = false) override;
    /// Evaluation-mode loss and accuracy on all of `d`, sharded: rank r evaluates the
    /// contiguous slice [r*N/K, (r+1)*N/K) and the sums are allreduced, so every rank gets
    /// the result for the whole set. First broadcasts rank 0's BN running statistics (like
    /// PyTorch DDP's broadcast_buffers), so that all ranks evaluate the same network.
    EvalResult evaluate(const Dataset& d, int batch) override;
    /// With more than one rank, reduce the gradients in buckets of about `bytes` bytes
    /// (contiguous ranges of grads(), from its end) with MPI_Iallreduce, each started as soon
    /// as backward has finished every layer it covers (Model::backward's callback), so the
    /// communication overlaps the rest of backward; all are waited for before the update
    /// (as PyTorch DDP's gradient buckets, Li et al. 2020, PVLDB 13(12), sec. 3.2.3). The sums
    /// are elementwise the same as one blocking allreduce. 0: one blocking allreduce.
    void set_bucket_bytes(size_t bytes);
    /// Augment the training batches of step() from now on with `a`: the k-th call of step()
    /// (counted from `first_step`, so that a resumed run continues the sequence) draws from
    /// Rng(splitmix64(seed, k, rank)), independent of any other state, so the same seed, step
    /// and rank give the same crops and flips.
    void set_augment(const Augment& a, uint64_t seed, int64_t first_step = 0);
    /// on: a loader thread (BatchLoader) gathers the batch announced by prefetch() while the
    /// step before it computes; off (the default): every batch is gathered in step(). The
    /// batches, and so the losses, are bit-identical either way.
    void set_prefetch(bool on);
    /// Announces examples idx[0..n) of `d` as the batch of the step() (or take_batch()) call
    /// AFTER the next one: the next call starts gathering it (with that later step's crops
    /// and flips) on the loader thread once it has its own batch. A call with another batch
    /// (e.g. after a batch-size change) gathers its own and drops the prefetched one. The
    /// indices are copied; `d` must outlive the Trainer or the call that takes the batch.
    /// Without set_prefetch(true) only remembered and dropped.
    void prefetch(const Dataset& d, const int* idx, int n) override;
    /// The training batch of one step, examples idx[0..n) of `d` augmented as set_augment
    /// says, counting as a step() for the augmentation sequence: the prefetched batch when
    /// it is this one, else gathered now; then starts the announced next batch. Valid until
    /// the next step() / take_batch(). *gather_seconds (if given): the seconds it took.
    /// Errors: DataError (an index outside the set), also one the loader thread met.
    const Batch& take_batch(const Dataset& d, const int* idx, int n, double* gather_seconds = nullptr);
    /// Batches step() / take_batch() got from the loader thread (prefetched) since the last
    /// set_prefetch() that changed the mode.
    int64_t prefetched() const { return loader_->hits(); }
    Model& model() { return m_; }
    Optimizer& optimizer() { return opt_; }

private:
    Model& m_;
    Comm& comm_;
    Optimizer opt_;
    std::vector<float> gacc_;  // first micro-batch's gradient (noise measurement, 1 rank)
    std::vector<float> bn_saved_;  // batch-norm running statistics before a noise-measuring step (1 rank)
    std::vector<std::pair<size_t, size_t>> buckets_;  // [lo, hi) of grads(), last first
    Augment aug_;
    uint64_t aug_seed_ = 0;
    int64_t aug_step_ = 0;
    std::unique_ptr<BatchLoader> loader_;  // gathers the training batches (threaded: prefetching)
    BatchKey next_;                        // announced by prefetch() (next_.data null: none)
    SoftmaxCrossEntropy ce_;
    Tensor x_;
    std::vector<int> labels_;
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
/// With `hooks`: on_step after every step; with hooks->resume, training continues from the
/// checkpoint's epoch and step with its weights, BN statistics, optimizer, warmup and noise
/// state (the data order is replayed from the seed), so the loss trajectory is the one of an
/// uninterrupted run; with a checkpoint_path, after every step the ranks agree (one
/// allreduce, with the step's loss) whether any got a stop signal, and if so rank 0 writes
/// the checkpoint, all ranks return the epochs finished so far and hooks->stopped is set.
/// `engine`: the step engine to use (e.g. a cuda::GpuTrainer over `model`); null: a CPU
/// Trainer built from cfg.optim (with cfg.bucket_bytes and cfg.augment). With an engine,
/// checkpoints (hooks->resume, hooks->checkpoint_path) and augmentation are refused
/// (TrainError).
/// Errors: TrainError if the training set is smaller than one global batch, B is not
/// divisible by K, the loss becomes non-finite (diverged: lower --lr), the checkpoint does
/// not fit the model, or it cannot be written.
std::vector<EpochResult> train(Model& model, const Dataset& train_set, const Dataset& test_set, const TrainConfig& cfg,
                               Comm& comm, const std::function<void(const EpochResult&)>& on_epoch,
                               TrainHooks* hooks = nullptr, StepEngine* engine = nullptr);

/// Mean seconds of one full training step (forward, backward, SGD update, no allreduce)
/// at local batch `batch` on this process: `warmup` untimed steps (and more until
/// min_seconds / 4 have passed), then at least `iters` timed ones, continued until they
/// sum to min_seconds (at most 1000 x iters), on consecutive examples of `d` (wrapping
/// around). A floor on the timed duration, as benchmark harnesses set one (Google
/// Benchmark's min_time), keeps millisecond steps from being timed over a few milliseconds
/// of scheduler and clock-frequency noise. The timed step count goes to *timed when given.
/// *startup, when given, gets the seconds the warm-up steps took beyond as many timed
/// steps (>= 0): in a process's first call, what a training run pays once for touching its
/// buffers for the first time. The model's weights change.
/// With `together` (the ranks of a job measured at once, size > 1) every step starts on all
/// ranks together (the ranks agree through an untimed allreduce whether to take one more
/// step, which also lines them up), and a step counts as its slowest rank's time: the mean
/// over steps of the per-step maximum, what a data-parallel step waits for before its
/// allreduce (a rank's jitter delays every rank). The result is the same on every rank.
/// Errors: TrainError for an empty batch, data set or count.
double time_compute_step(Model& model, const Dataset& d, int batch, int warmup, int iters, double min_seconds = 0,
                         int* timed = nullptr, double* startup = nullptr, Comm* together = nullptr);

/// Mean seconds of one data-parallel training step at local batch `batch` on the ranks of
/// `comm`, taken as train() takes it in a job under Slurm: each rank's slice of a shuffled
/// order of `d` (global batch batch x ranks), the gradients allreduced and averaged in
/// buckets of `bucket_bytes` (Trainer::set_bucket_bytes; 0: one blocking allreduce), the
/// squared gradient norm of every step and the noise-scale statistics every 10th, the
/// momentum-SGD update, and the 2-value allreduce by which the ranks agree on stopping.
/// `warmup` untimed steps, then at least `iters` and (up to 1000 x iters) `min_seconds`,
/// the ranks agreeing on the count; the time of the whole timed stretch over its steps, the
/// maximum over ranks (ranks that wait for each other in the allreduce share the stretch).
/// What it adds over time_compute_step (of the same ranks at once) plus time_allreduce is
/// what the planner's sync factor corrects (ComputeModel::synced_factor, libtula). The
/// model's weights change. Collective. Errors: TrainError for an empty batch, data set or
/// count, or a data set smaller than one global batch.
double time_synced_step(Model& model, const Dataset& d, int batch, int warmup, int iters, double min_seconds, Comm& comm,
                        size_t bucket_bytes);

/// Mean seconds of one MPI_Allreduce(SUM) of ceil(bytes/4) float32 values across all
/// ranks of `comm`: `warmup` untimed, then `iters` timed calls between barriers; the
/// maximum over ranks. Collective: every rank must call it. 0 for a single rank.
double time_allreduce(Comm& comm, int64_t bytes, int warmup, int iters);

}  // namespace train
}  // namespace tula
