// tula-train's application layer (trainer/app/): the command-line options and their rules,
// and the three commands main.cpp runs: train (train_command.cpp), profile compute / profile
// allreduce and list models (profile_command.cpp). See tula-train(1).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model.hpp"
#include "data/data.hpp"
#include "dist/comm.hpp"
#include "train/metrics.hpp"
#include "train/train.hpp"
#include "tula/workload.hpp"

#include <nlohmann/json_fwd.hpp>
#ifdef TULA_HAVE_CUDA
#include "gpu_train.hpp"
#endif

namespace tula {
namespace train {
namespace app {

/// Default base learning rate for --lr-base-batch examples (see tula-train(1) for the
/// measurements it was chosen from).
constexpr double kDefaultLr = 0.05;
/// Default cap on the linearly scaled rate: LeNet-5 diverged at a peak of 0.8 (batch 1024
/// with the default rate) and trained to 89.6 % at 0.4 (see tula-train(1)).
constexpr double kDefaultLrMax = 0.4;
constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";

struct Options {
    std::string model;
    std::string data = "fashion-mnist";
    std::string data_dir = kDefaultDataDir;
    int epochs = 12;
    int batch = 0;              // 0: not given
    double lr = kDefaultLr;
    int lr_base_batch = 64;
    double lr_max = kDefaultLrMax;
    double momentum = 0.9;
    double weight_decay = 5e-4;
    double label_smoothing = 0;     // --label-smoothing EPS, [0, 1); CPU only
    double warmup_epochs = -1;  // -1: automatic
    std::string schedule = "cosine";  // cosine | constant | wsd
    double decay_fraction = 0.3;      // wsd: fraction of the post-warmup steps spent decaying
    double decay_epochs = 0;          // wsd: > 0: decay over the last D epochs instead (rounded to steps)
    std::string optimizer = "sgd";  // sgd | ags | lars | lamb | auto (resolved to sgd or ags once the batch is known)
    std::string optimizer_why;      // for the header line: how auto chose
    int sgd_max_batch = 0;          // auto: largest global batch trained with plain SGD (0: 4 x lr_base_batch)
    std::string lr_scaling;         // linear | sqrt | noise; "": linear, noise with ags
    // eta_trust -1: 0.2 with ags (lenet5 at batch 4096: 0.879 vs 0.817 with 0.02), 0.02 with lars
    double eta_trust = -1, s_min = 0.01, s_max = 10.0, ags_lambda = 0.0;
    std::string ags_rate_rule = "linear";  // with --lr-scaling noise: linear (the ratio) | sqrt (its square root) | first (held)
    int noise_every = -1;           // -1: 10 with ags, else 0 (off)
    double warmup_threshold = -1;   // -1: 0.05 with ags, else 0 (fixed warmup)
    double warmup_from = -1;        // -1: --lr (Goyal et al.'s warmup from the small-batch rate)
    int warmup_min_steps = 1;       // fewest steps of the data-driven warmup
    int hessian_every = 0, hessian_batch = 256;  // largest Hessian eigenvalue every K steps (0: off)
    int local_steps = 0;            // Local SGD: H local steps per averaging round (0: synchronous SGD)
    std::string batch_test = "norm";  // Local SGD batch growth: none | norm | inner
    double batch_test_eta = 0.5, batch_test_theta = 0.5;
    double batch_test_beta = 0.9;   // EMA weight of the batch test's statistics over rounds (0: none)
    double target_accuracy = 0;     // > 0: stop after the first epoch whose test accuracy reaches it
    int64_t val_split = 0;          // last N training examples (after --limit-train) held out for validation
    int max_batch = 0;              // cap on the adaptive global batch (0: the training set)
    double max_batch_growth = 2;    // largest factor the adaptive batch grows by per round (0: unlimited)
    uint64_t seed = 1;
    int64_t limit_train = 0, limit_test = 0;
    std::string db;
    bool no_db = false, quiet = false, list_models = false;
    bool profile_compute = false, profile_allreduce = false;
    std::vector<int> batch_sizes{16, 32, 64, 128, 256};
    int iters = 20;
    double min_time = 0.2;      // --profile-compute: seconds each batch size is timed for, at least
    std::vector<int64_t> sizes{4096, 65536, 262144, 1048576, 4194304};
    std::string batch_source;   // where the global batch came from, for the header line
    // "12 at batch 64 -> 18 at batch 512, tula plan" when the epochs came from the plan's
    // TULA_EPOCHS and differ from --epochs; "" otherwise (for the header line)
    std::string epochs_note;
    std::string device = "cpu"; // cpu | cuda
    bool no_tf32 = false;       // cuda: strict fp32 convolutions
    std::string precision = "fp32";  // fp32 | bf16 (cuda only: bf16 convolutions and GEMMs)
    std::vector<std::string> gpu_allreduce{"nccl", "mpi"};  // cuda: methods, first usable wins
    std::string metrics;        // --metrics FILE ("": none)
    std::string summary;        // --summary FILE ("": none)
    int metrics_every = 1;
    std::string checkpoint;     // --checkpoint FILE ("": tula-train-$SLURM_JOB_ID.ckpt under Slurm)
    bool resume = false;
    std::string requeue = "auto";  // --requeue auto|no
    std::vector<int> save_epochs;  // --save-epochs: also write the state to CHECKPOINT.eK at the end of epoch K
    std::string branch_from;       // --branch-from FILE: start from a saved state with this run's schedule
    double bucket_mb = 25;
    std::string augment;        // none | crop | flip | crop-flip; "": crop-flip for CIFAR, else none
    int threads = 0;            // 0: $SLURM_CPUS_PER_TASK, else 1
    std::string threads_source = "default";
    std::string prefetch = "auto";  // on | off | auto (on when a CPU is spare: rank_cpus() > threads); default $TULA_PREFETCH
    std::string prefetch_why;       // for the header line
};

/// `m` without libtula's "tula: " prefix.
std::string bare(const std::string& m);
/// "tula-train: " + bare(m).
std::string msg(const std::string& m);
/// Prints `m` on standard output when `root` (rank 0), flushed.
void say(bool root, const std::string& m);
/// Prints msg("warning: " + m) on standard error, flushed.
void warn(const std::string& m);
/// printf of one number.
std::string fmt(const char* f, double v);
/// The model names, comma-separated (for messages).
std::string join_models();
/// This host's name, "unknown" when gethostname fails.
std::string host_name();
/// The ranks of this job on this host (OMPI_COMM_WORLD_LOCAL_SIZE; 1 when not under mpirun).
int local_ranks();
/// The CPUs this rank may use (its affinity mask, shared among the node's unbound ranks), >= 1.
int rank_cpus();
#ifdef TULA_HAVE_CUDA
/// The GPU of this rank: the node-local rank modulo the number of devices. Throws
/// std::runtime_error when no device can be used.
std::unique_ptr<cuda::GpuContext> open_gpu(const Options& o);
#endif

/// Parses the command line into `o` and applies the default rules (auto optimizer, warmup,
/// rate scaling, threads, prefetch, CUDA gating). Returns -1 to go on, or the exit status (0
/// after --help, 2 for bad usage, with one message). Only rank 0 prints (every rank parses
/// the same arguments and reaches the same verdict).
int parse_args(int argc, char** argv, Options& o, bool root);

/// The dataset name as the workload records it.
std::string data_name(const Options& o);
/// The workload row of model `m` on the data (params, train and test examples).
tula::Workload workload_of(const Options& o, const Model& m, int64_t train_n, int64_t test_n);
/// The synthetic input of --data synthetic.
SyntheticSpec input_of(const Options& o);
/// The training (train) or test set of --data, limited by --limit-train / --limit-test.
Dataset load_set(const Options& o, bool train);
/// Loads both sets on every rank; false (message printed) when that fails on any rank.
bool load_data(const Options& o, Comm& comm, Dataset& tr, Dataset& te);

/// The job a run or profile belongs to, as its header names it.
struct RunShape {
    int nodes = 1;               ///< nodes of the job, >= 1
    int ranks = 1;               ///< ranks of the job, a multiple of nodes
    std::string hardware_class;  ///< tula::hardware_class_from_env's class ("" = unknown)
};

/// The "run" header of the job contract (tula-jobs(7)) for a run of `o` with model `m` on the
/// sets `tr` and `te`: workload, shape, sizes (the data set's full sizes as
/// dataset_train_examples / dataset_test_examples), activation floats, optimizer, seed,
/// hardware class and host. The metrics file and the summary start with it.
nlohmann::json run_header(const Options& o, const RunShape& s, const Model& m, const Dataset& tr, const Dataset& te);

/// The summary's last line: {"type":"summary", "train_seconds" (sum of the epochs' seconds),
/// "test_accuracy" (the last epoch's), "epochs_trained", "stopped_at_target", "noise_scale"
/// (the run's B_simple, examples; null when not measured or with Local SGD),
/// "noise_observations", "parts" (the processes the run trained in: 1, plus one per stop and
/// resume), "part_seconds" (the training seconds of each part, summing to train_seconds:
/// TrainHooks::part_seconds, or [train_seconds] when it is empty), "val_accuracy" (with
/// --val-split)}.
nlohmann::json run_summary_line(const Options& o, const std::vector<EpochResult>& res, const TrainHooks& hooks,
                                bool at_target);

/// The training seconds of each part of the run whose epochs are `res`: hooks.part_seconds,
/// or one part of all the epochs' seconds when it is empty (a run never stopped, Local SGD).
std::vector<double> run_part_seconds(const std::vector<EpochResult>& res, const TrainHooks& hooks);

/// The tula command beside this tula-train (/proc/self/exe's directory), else the first on
/// $PATH; "" when there is none.
std::string find_tula();

/// Writes a file of the job contract atomically (`fill` writes its lines; FILE.tmp, then
/// renamed) to `given`, or, when `given` is "" and the database is written, to a temporary
/// file; then, unless --no-db, records it (record_file) and removes a temporary file. `what`
/// ("run", "compute profile", "allreduce profile") names it in warnings. Rank 0 only.
/// Failures are warnings; returns false after one.
bool finish_file(const Options& o, const std::string& given, const std::function<void(MetricsLog&)>& fill,
                 const std::string& what);

/// Adds the file of the job contract at `file` (a run summary or a profile) to the profile
/// database (--db, else the user's) by running `tula db record --metrics FILE [--db DB]`
/// (find_tula), its output passed on (standard output silenced with --quiet). A failure is a
/// warning naming why (then false).
bool record_file(const Options& o, const std::string& file, const std::string& what);

/// TULA_PROFILE's budget of the measurement before training: the most seconds it may take.
/// kMeasureSeconds for "1" or "yes", the value for seconds in (0, 3600]; at most kMeasureShare
/// of the job's time left when that is known (`time_left`, seconds); 0 (not measured) when
/// unset, "", "0" or "no", and for anything else with the reason in `why`. Pure.
constexpr double kMeasureSeconds = 60, kMeasureShare = 0.02;
double measure_budget(const char* value, std::optional<double> time_left, std::string* why);
/// The first job measures itself (tula-jobs(7), TULA_PROFILE): when measure_budget gives
/// seconds (rank 0's environment and time limit; not on a resumed run, a GPU or Local SGD),
/// every rank times kTimedSteps steps at local batches b/4, b/2, b and 2b (b = the job's global
/// batch / ranks) on a throwaway copy of the model, together, as long as the next batch's
/// estimate (the last one's step scaled by the batch) stays within the budget. Rank 0 records
/// the slowest rank's seconds as compute samples of the run's header (finish_file, "compute
/// profile"), each with its start-up (startup_seconds: the seconds its warm-up step took
/// beyond a steady one, time_compute_step's *startup, the largest over the ranks); `trained`
/// is the model the job trains, untouched. A batch that fails on any rank
/// (out of memory, an error) is skipped with one warning. Never fails the job.
void measure_before_training(const Options& o, Comm& comm, const Model& trained, const Dataset& tr, const Dataset& te,
                             bool resume);

/// --list-models: the zoo with parameter counts. Exit status.
int list_models(const Options& o);
/// --profile-compute: seconds per training step at each local batch, as "profile" lines of
/// the job contract written to --metrics and recorded by `tula db record` (finish_file). Exit
/// status: 1 when they could not be written or recorded.
int profile_compute(const Options& o, Comm& comm);
/// --profile-allreduce: allreduce seconds per message size, as "allreduce" lines (as
/// profile_compute). Exit status.
int profile_allreduce(const Options& o, Comm& comm);
/// Trains (the default command): header, epochs, checkpoint on SIGTERM/SIGUSR1, and at the
/// end the summary and the run's record (finish_file). Exit status (see main.cpp).
int run_training(const Options& o, Comm& comm);

/// Seconds left until this Slurm job's time limit: $SLURM_JOB_END_TIME (Unix seconds, where
/// Slurm sets it) less now, else `squeue -h -j $SLURM_JOB_ID -o %L` (Slurm's duration, read by
/// tula_parse_duration) under timeout(1) of 10 s. nullopt outside a job, for an unlimited job,
/// or when squeue does not answer.
std::optional<double> job_time_left();
/// With --requeue auto under Slurm, on rank 0 (`root`) of a run with a checkpoint file: sets
/// hooks->time_is_up so that training stops when now + stop_reserve_seconds(longest step,
/// the checkpoint's write time at kCheckpointWriteBandwidth for `params` parameters) reaches
/// the time limit (tula/stop.hpp), and says so. Otherwise does nothing.
void watch_time_limit(const Options& o, bool root, size_t params, TrainHooks* hooks);
/// After train() stopped on a signal or the time limit, with the checkpoint written: rank 0
/// says so and, with --requeue auto under Slurm when no rank got SIGTERM (hooks.requeue),
/// runs `scontrol requeue $SLURM_JOB_ID` (timeout 30 s); a refusal (--no-requeue) is a
/// warning that says how to resume. Returns exit status 3.
int finish_stopped(const Options& o, bool root, const TrainHooks& hooks, size_t epochs_done);

}  // namespace app
}  // namespace train
}  // namespace tula
