// tula-train: command-line options, their validation and default rules (see app.hpp and tula-train(1)).
#include <CLI/CLI.hpp>

#include <malloc.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "train/checkpoint.hpp"
#include "dist/comm.hpp"
#include "data/data.hpp"
#include "cpu/gemm/gemm.hpp"
#include "train/metrics.hpp"
#include "dist/local_sgd.hpp"
#include "core/model.hpp"
#include "optim/optim.hpp"
#include "train/train.hpp"
#include "tula/conf.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/workload.hpp"
#ifdef TULA_HAVE_CUDA
#include "gpu_train.hpp"
#endif

#include "app/app.hpp"

namespace tula {
namespace train {
namespace app {

std::string bare(const std::string& m) { return m.rfind("tula: ", 0) == 0 ? m.substr(6) : m; }
std::string msg(const std::string& m) { return "tula-train: " + bare(m); }

void say(bool root, const std::string& m) {
    if (!root) return;
    std::fprintf(stdout, "%s\n", m.c_str());
    std::fflush(stdout);
}

void warn(const std::string& m) {
    std::fprintf(stderr, "%s\n", msg("warning: " + m).c_str());
    std::fflush(stderr);
}

std::string fmt(const char* f, double v) {
    char b[64];
    std::snprintf(b, sizeof b, f, v);
    return b;
}

std::string join_models() {
    std::string s;
    for (const auto& n : model_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
}

std::string host_name() {
    char h[256] = {0};
    if (gethostname(h, sizeof h - 1) != 0) return "unknown";
    return h;
}


// The ranks of this job on this host (OMPI_COMM_WORLD_LOCAL_SIZE; 1 when not under mpirun).
int local_ranks() {
    const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    return v && std::atoi(v) > 1 ? std::atoi(v) : 1;
}

// The CPUs this rank may use: those of its affinity mask (sched_getaffinity; Slurm's task
// binding and mpirun's --bind-to narrow it), divided by the ranks on this node
// (OMPI_COMM_WORLD_LOCAL_SIZE) when the mask is the whole machine, i.e. the ranks are not
// bound and share it. At least 1.
int rank_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    int cpus = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus >= online) cpus /= local_ranks();
    return std::max(1, cpus);
}

// Parses the command line into `o`. Returns -1 to go on, or the exit status. Only rank 0
// prints (every rank parses the same arguments and reaches the same verdict).
namespace {

// The model, the data, the batch and the learning-rate schedule's options.
void add_model_and_schedule_options(CLI::App& app, Options& o) {
    app.set_help_flag("-h,--help", "print this help and exit");
    app.add_option("--model", o.model, "network: " + join_models());
    app.add_option("--data", o.data,
                   "data set: fashion-mnist, cifar10:DIR, cifar100:DIR (binary version), or synthetic:CxHxW:K (random images, for profiling)")
        ->capture_default_str();
    app.add_option("--data-dir", o.data_dir, "directory of the IDX .gz files")->capture_default_str();
    app.add_option("--epochs", o.epochs,
                   "training epochs; a job planned by Tula (global batch from $TULA_BATCH_SIZE) trains $TULA_EPOCHS, "
                   "the epochs its batch needs to match what these reach at batch 64")
        ->capture_default_str();
    app.add_option("--batch-size", o.batch,
                   "global batch (all ranks together); default $TULA_BATCH_SIZE, else 64");
    app.add_option("--lr", o.lr, "base learning rate for --lr-base-batch examples")->capture_default_str();
    app.add_option("--lr-base-batch", o.lr_base_batch, "batch the base rate is for (linear scaling)")
        ->capture_default_str();
    app.add_option("--lr-max", o.lr_max, "cap on the scaled rate lr*B/B0 (0: no cap)")->capture_default_str();
    app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "L2 weight decay (not on biases and BN)")->capture_default_str();
    app.add_option("--label-smoothing", o.label_smoothing,
                   "label smoothing EPS of the training loss, 0 <= EPS < 1 (Szegedy et al. 2016; CPU only)")
        ->capture_default_str();
    app.add_option("--warmup-epochs", o.warmup_epochs,
                   "linear warmup epochs; default 0 when the batch is <= --lr-base-batch, 1 up to 8 times it, else 2");
    app.add_option("--schedule", o.schedule,
                   "rate decay after warmup: cosine, constant, or wsd (warmup-stable-decay: the peak, then linear "
                   "to 0 over the last --decay-fraction of the steps)")
        ->capture_default_str();
    app.add_option("--decay-fraction", o.decay_fraction, "wsd: fraction of the post-warmup steps spent decaying")
        ->capture_default_str();
    app.add_option("--decay-epochs", o.decay_epochs,
                   "wsd: decay over the last D epochs instead of --decay-fraction (the stable phase is then the same "
                   "for every --epochs; D may be fractional)");
}

// The optimizer, the device and Local SGD's options.
void add_optimizer_options(CLI::App& app, Options& o) {
    app.add_option("--optimizer", o.optimizer,
                   "sgd, ags (adaptive gradient scaling), lars, lamb, or auto (sgd up to --sgd-max-batch, ags above)")
        ->capture_default_str();
    app.add_option("--sgd-max-batch", o.sgd_max_batch,
                   "auto: the largest global batch trained with plain SGD and linear scaling; larger ones use AGS "
                   "(default 4 x --lr-base-batch)");
    app.add_option("--lr-scaling", o.lr_scaling, "linear, sqrt or noise (noise-scale aware); default noise with ags, else linear");
    app.add_option("--ags-rate-rule", o.ags_rate_rule,
                   "with --lr-scaling noise: linear (McCandlish et al.'s rate ratio), sqrt (its square root) or first "
                   "(the ratio of the first noise-scale estimate, held)")
        ->capture_default_str();
    app.add_option("--eta-trust", o.eta_trust, "AGS / LARS trust coefficient; default 0.2 with ags, 0.02 with lars");
    app.add_option("--s-min", o.s_min, "AGS lower bound of the scaling factor (> 0)")->capture_default_str();
    app.add_option("--s-max", o.s_max, "AGS upper bound of the scaling factor (>= --s-min)")->capture_default_str();
    app.add_option("--ags-lambda", o.ags_lambda, "AGS lambda: s = eta|w|/(|g| + lambda|w|)")->capture_default_str();
    app.add_option("--noise-scale-every", o.noise_every, "estimate the gradient noise scale every K steps (0: never); default 10 with ags, else 0");
    app.add_option("--warmup-threshold", o.warmup_threshold,
                   "end warmup once the relative change of the EMA of |g|^2 over 10 steps is at most this (0: fixed warmup); default 0.05 with ags, else 0");
    app.add_option("--device", o.device, "cpu, or cuda (the GPU backend: cuDNN / cuBLAS; one GPU per rank)")
        ->capture_default_str();
    app.add_flag("--no-tf32", o.no_tf32, "cuda: keep convolutions in strict fp32 (default: TF32 tensor cores, as PyTorch)");
    app.add_option("--precision", o.precision,
                   "cuda: fp32, or bf16 (mixed precision: bf16 convolutions and fully connected layers with fp32 "
                   "accumulation, fp32 weights, gradients, batch norm and loss)")
        ->capture_default_str();
    app.add_option("--gpu-allreduce", o.gpu_allreduce, "cuda: gradient allreduce methods in order of preference (nccl, mpi)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--warmup-from", o.warmup_from,
                   "rate at the first warmup step (default: --lr; near zero for the data-driven warmup)");
    app.add_option("--warmup-min-steps", o.warmup_min_steps, "fewest steps of the data-driven warmup")
        ->capture_default_str();
    app.add_option("--hessian-every", o.hessian_every,
                   "largest Hessian eigenvalue (power iteration on a fixed probe batch) every K steps (0: never)")
        ->capture_default_str();
    app.add_option("--hessian-batch", o.hessian_batch, "examples in the Hessian probe batch")->capture_default_str();
    app.add_option("--local-steps", o.local_steps,
                   "Local SGD: H local steps between parameter averages, with an adaptive batch (0: synchronous SGD)")
        ->capture_default_str();
    app.add_option("--batch-test", o.batch_test, "Local SGD batch growth: norm, inner (product) or none")
        ->capture_default_str();
    app.add_option("--batch-test-eta", o.batch_test_eta, "eta of the norm test")->capture_default_str();
    app.add_option("--batch-test-theta", o.batch_test_theta, "theta of the inner-product test")->capture_default_str();
    app.add_option("--batch-test-beta", o.batch_test_beta,
                   "EMA weight of the batch test's variance and |g|^2 over averaging rounds, in [0, 1) (0: each round's own)")
        ->capture_default_str();
    app.add_option("--max-batch-size", o.max_batch, "cap on the adaptive global batch (0: the training set); memory caps it too")
        ->capture_default_str();
    app.add_option("--max-batch-growth", o.max_batch_growth,
                   "largest factor the adaptive batch grows by per averaging round (0: unlimited)")
        ->capture_default_str();
}

// The run's limits, outputs, checkpoints and profiles.
void add_run_options(CLI::App& app, Options& o) {
    app.add_option("--seed", o.seed, "random seed (weights, data order)")->capture_default_str();
    app.add_option("--limit-train", o.limit_train, "use only the first N training examples (0: all)");
    app.add_option("--val-split", o.val_split,
                   "hold out the last N training examples (after --limit-train) as a validation set, evaluated "
                   "every epoch (0: none)")
        ->capture_default_str();
    app.add_option("--target-accuracy", o.target_accuracy,
                   "stop at the end of the first epoch whose test accuracy reaches A, 0 < A <= 1 (0: train all epochs)")
        ->capture_default_str();
    app.add_option("--limit-test", o.limit_test, "use only the first N test examples (0: all)");
    app.add_option("--metrics", o.metrics,
                   "write a JSON-lines log of every step and epoch to FILE (rank 0); with --profile-compute or "
                   "--profile-allreduce, the profile (tula-jobs(7))");
    app.add_option("--summary", o.summary,
                   "at the end, write the run's summary to FILE (rank 0): a run file of the job contract (header, one "
                   "line per epoch, a \"summary\" line) that tula db record reads");
    app.add_option("--metrics-every", o.metrics_every, "log every K-th step in --metrics")->capture_default_str();
    app.add_option("--checkpoint", o.checkpoint,
                   "checkpoint FILE written on SIGTERM/SIGUSR1 (default under Slurm: tula-train-$SLURM_JOB_ID.ckpt)");
    app.add_flag("--resume", o.resume, "continue from --checkpoint (automatic when SLURM_RESTART_COUNT > 0 and it exists)");
    app.add_option("--requeue", o.requeue,
                   "auto: under Slurm, stop before the job's time limit and on SIGUSR1, write the checkpoint and "
                   "requeue the job (scontrol requeue); no: only write the checkpoint on SIGTERM/SIGUSR1")
        ->capture_default_str();
    app.add_option("--save-epochs", o.save_epochs,
                   "also write the training state to CHECKPOINT.eK at the end of each epoch K listed (comma-separated), "
                   "and go on: the branch points for --branch-from")
        ->delimiter(',');
    app.add_option("--branch-from", o.branch_from,
                   "start from a state saved by --save-epochs (or a checkpoint) with this run's --epochs and schedule, "
                   "e.g. a wsd decay off a constant-rate run; every other option must match the saved run's");
    app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket size in MiB for the overlapped allreduce (0: one blocking allreduce)")
        ->capture_default_str();
    app.add_option("--augment", o.augment,
                   "training augmentation: none, crop (pad 4, random 32x32-style crop), flip, crop-flip; default crop-flip for CIFAR, else none");
    app.add_option("--threads", o.threads, "threads per rank for the matrix products; default $SLURM_CPUS_PER_TASK, else 1");
    app.add_option("--prefetch", o.prefetch,
                   "gather the next training batch on a background thread: on, off, or auto (on when this rank has a CPU beyond --threads); default $TULA_PREFETCH, else auto")
        ->capture_default_str();
    app.add_option("--db", o.db,
                   "profile database that `tula db record` adds the run or profile to (default: the user's, "
                   "$XDG_DATA_HOME/tula/profiles.db)");
    app.add_flag("--no-db", o.no_db, "do not record the run or profile (tula db record is not run)");
    app.add_flag("--quiet", o.quiet, "print only the final line");
    app.add_flag("--list-models", o.list_models, "list the models and their parameter counts");
    app.add_flag("--profile-compute", o.profile_compute, "measure seconds per training step at --batch-sizes");
    app.add_option("--batch-sizes", o.batch_sizes, "local batch sizes for --profile-compute")->delimiter(',');
    app.add_option("--iters", o.iters, "timed iterations per batch size (at least)")->capture_default_str();
    app.add_option("--min-time", o.min_time,
                   "--profile-compute: time each batch size for at least this many seconds (more iterations when "
                   "--iters take less; CPU only)")
        ->capture_default_str();
    app.add_flag("--profile-allreduce", o.profile_allreduce, "measure MPI_Allreduce at --sizes (bytes)");
    app.add_option("--sizes", o.sizes, "message sizes in bytes for --profile-allreduce")->delimiter(',');
}

// The options of tula-train (tula-train(1)) on `app`, stored in `o`.
void add_options(CLI::App& app, Options& o) {
    add_model_and_schedule_options(app, o);
    add_optimizer_options(app, o);
    add_run_options(app, o);
}

// The data set, the device and the augmentation: "" when they are valid, else the message.
std::string check_data_and_device(Options& o) {
    if (o.data != "fashion-mnist") {
        if (!is_synthetic(o.data) && !is_cifar(o.data))
            return ("unknown data set '" + o.data +
                       "'; valid data sets: fashion-mnist, cifar10:DIR, cifar100:DIR, synthetic:CxHxW:K");
        try {
            if (is_cifar(o.data)) parse_cifar(o.data);
            else parse_synthetic(o.data);
        } catch (const std::exception& e) {
            return (e.what());
        }
    }
    if (o.device == "cuda" && (o.local_steps > 0 || o.hessian_every > 0))
        return ("--local-steps and --hessian-every are not implemented with --device cuda yet");
    if (o.device == "cuda" && (!o.checkpoint.empty() || o.resume))
        return ("--checkpoint and --resume are not implemented with --device cuda yet");
    if (o.device == "cuda" && !o.augment.empty() && o.augment != "none")
        return ("--augment is not implemented with --device cuda yet; give --augment none");
    if (o.augment.empty()) o.augment = is_cifar(o.data) && o.device != "cuda" ? "crop-flip" : "none";
    if (o.augment != "none" && o.augment != "crop" && o.augment != "flip" && o.augment != "crop-flip")
        return ("unknown --augment '" + o.augment + "'; valid: none, crop, flip, crop-flip");
    return "";
}

// The model, epochs, schedule, saved states and limits: "" when valid, else the message.
std::string check_schedule_values(const CLI::App& app, const Options& o) {
    const bool need_model = !o.profile_allreduce;
    if (need_model && o.model.empty()) return ("--model is required (one of: " + join_models() + ")");
    if (!o.model.empty()) {
        bool known = false;
        for (const auto& n : model_names()) known = known || n == o.model;
        if (!known) return ("unknown model '" + o.model + "'; valid models: " + join_models());
    }
    if (o.epochs < 1 || o.epochs > 100000) return ("--epochs must be between 1 and 100000 (got " + std::to_string(o.epochs) + ")");
    if (!(o.lr > 0) || !std::isfinite(o.lr)) return ("--lr must be a positive number");
    if (o.lr_base_batch < 1) return ("--lr-base-batch must be a positive number of examples");
    if (!(o.lr_max >= 0) || !std::isfinite(o.lr_max)) return ("--lr-max must be >= 0 (0: no cap)");
    if (!(o.momentum >= 0 && o.momentum < 1)) return ("--momentum must be in [0, 1)");
    if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) return ("--weight-decay must be >= 0");
    if (o.warmup_epochs != -1 && !(o.warmup_epochs >= 0 && o.warmup_epochs <= o.epochs))
        return ("--warmup-epochs must be between 0 and --epochs");
    if (o.schedule != "cosine" && o.schedule != "constant" && o.schedule != "wsd")
        return ("unknown --schedule '" + o.schedule + "'; valid: cosine, constant, wsd");
    if (!(o.decay_fraction > 0 && o.decay_fraction <= 1))
        return ("--decay-fraction must be in (0, 1] (the fraction of the post-warmup steps spent decaying)");
    if (app.count("--decay-fraction") && o.schedule != "wsd")
        return ("--decay-fraction is for --schedule wsd");
    if (app.count("--decay-epochs")) {
        if (o.schedule != "wsd") return ("--decay-epochs is for --schedule wsd");
        if (!(o.decay_epochs > 0 && o.decay_epochs <= o.epochs))
            return ("--decay-epochs must be in (0, --epochs] (the epochs at the end spent decaying)");
        if (app.count("--decay-fraction")) return ("give --decay-epochs or --decay-fraction, not both");
    }
    for (int e : o.save_epochs)
        if (e < 1 || e > o.epochs)
            return ("--save-epochs: epoch " + std::to_string(e) + " is not between 1 and --epochs (" +
                       std::to_string(o.epochs) + ")");
    if (!o.save_epochs.empty() && o.checkpoint.empty() && !std::getenv("SLURM_JOB_ID"))
        return ("--save-epochs needs --checkpoint FILE (the saved states are FILE.eK)");
    if (!o.branch_from.empty() && o.resume)
        return ("give --branch-from or --resume, not both");
    if ((!o.save_epochs.empty() || !o.branch_from.empty()) && (o.device == "cuda" || o.local_steps > 0))
        return ("--save-epochs and --branch-from are not implemented with --device cuda or --local-steps yet");
    if (app.count("--decay-epochs") && o.local_steps > 0)
        return ("--decay-epochs is not implemented with --local-steps (its schedule follows the examples seen)");
    if (o.limit_train < 0 || o.limit_test < 0) return ("--limit-train and --limit-test must be >= 0");
    if (o.val_split < 0) return ("--val-split must be >= 0 examples (0: none)");
    if (!(o.target_accuracy >= 0 && o.target_accuracy <= 1))
        return ("--target-accuracy must be a fraction in (0, 1] (0: train all epochs)");
    return "";
}

// The optimizer's and the batch test's values: "" when valid, else the message.
std::string check_optimizer_values(const CLI::App& app, const Options& o) {
    if (o.ags_rate_rule != "linear" && o.ags_rate_rule != "sqrt" && o.ags_rate_rule != "first")
        return ("unknown --ags-rate-rule '" + o.ags_rate_rule + "'; valid: linear, sqrt, first");
    if (!(o.batch_test_beta >= 0 && o.batch_test_beta < 1)) return ("--batch-test-beta must be in [0, 1)");
    if (o.optimizer != "sgd" && o.optimizer != "ags" && o.optimizer != "lars" && o.optimizer != "lamb" &&
        o.optimizer != "auto")
        return ("unknown --optimizer '" + o.optimizer + "'; valid: sgd, ags, lars, lamb, auto");
    if (app.count("--sgd-max-batch") && o.sgd_max_batch < 1)
        return ("--sgd-max-batch must be a positive number of examples");
    if (o.requeue != "auto" && o.requeue != "no") return ("unknown --requeue '" + o.requeue + "'; valid: auto, no");
    if (!o.lr_scaling.empty() && o.lr_scaling != "linear" && o.lr_scaling != "sqrt" && o.lr_scaling != "noise")
        return ("unknown --lr-scaling '" + o.lr_scaling + "'; valid: linear, sqrt, noise");
    if (app.count("--eta-trust") && (!(o.eta_trust > 0) || !std::isfinite(o.eta_trust)))
        return ("--eta-trust must be a positive number");
    if (!(o.s_min > 0) || !std::isfinite(o.s_min)) return ("--s-min must be > 0 (the AGS bound needs 0 < s_min <= s_max)");
    if (!(o.s_max >= o.s_min) || !std::isfinite(o.s_max)) return ("--s-max must be a number >= --s-min");
    if (!(o.ags_lambda >= 0) || !std::isfinite(o.ags_lambda)) return ("--ags-lambda must be >= 0");
    if (o.noise_every < -1 || (app.count("--noise-scale-every") && o.noise_every < 0))
        return ("--noise-scale-every must be >= 0 steps (0: never)");
    if (app.count("--warmup-threshold") && !(o.warmup_threshold >= 0 && std::isfinite(o.warmup_threshold)))
        return ("--warmup-threshold must be >= 0 (0: fixed warmup)");
    if (app.count("--warmup-from") && !(o.warmup_from >= 0 && std::isfinite(o.warmup_from)))
        return ("--warmup-from must be a rate >= 0");
    if (o.warmup_min_steps < 1) return ("--warmup-min-steps must be >= 1 step");
    if (o.hessian_every < 0) return ("--hessian-every must be >= 0 steps (0: never)");
    if (o.hessian_batch < 1) return ("--hessian-batch must be a positive number of examples");
    if (o.local_steps < 0) return ("--local-steps must be >= 0 (0: synchronous SGD)");
    if (o.batch_test != "none" && o.batch_test != "norm" && o.batch_test != "inner")
        return ("unknown --batch-test '" + o.batch_test + "'; valid: none, norm, inner");
    if (!(o.batch_test_eta > 0) || !std::isfinite(o.batch_test_eta)) return ("--batch-test-eta must be > 0");
    if (!(o.batch_test_theta > 0) || !std::isfinite(o.batch_test_theta)) return ("--batch-test-theta must be > 0");
    if (o.max_batch < 0) return ("--max-batch-size must be >= 0 examples (0: no cap but the training set)");
    if (!std::isfinite(o.max_batch_growth) || (o.max_batch_growth != 0 && !(o.max_batch_growth > 1)))
        return ("--max-batch-growth must be > 1 (a factor per averaging round) or 0 (unlimited)");
    return "";
}

// The thread count (--threads, $SLURM_CPUS_PER_TASK, else 1) and the prefetching (--prefetch,
// $TULA_PREFETCH) they resolve to: "" when valid, else the message. Warnings on rank 0 (`root`).
std::string resolve_threads_and_prefetch(const CLI::App& app, Options& o, bool root) {
    if (app.count("--threads")) {
        if (o.threads < 1 || o.threads > 1024) return ("--threads must be between 1 and 1024");
        o.threads_source = "--threads";
    } else if (const char* env = std::getenv("SLURM_CPUS_PER_TASK"); env && *env) {
        const int v = std::atoi(env);
        if (v >= 1 && v <= 1024) {
            o.threads = v;
            o.threads_source = "SLURM_CPUS_PER_TASK";
        } else {
            if (root) warn(std::string("ignoring SLURM_CPUS_PER_TASK='") + env + "'; using 1 thread");
            o.threads = 1;
        }
    } else {
        o.threads = 1;
    }
    std::string prefetch_from = "--prefetch";
    if (!app.count("--prefetch"))
        if (const char* env = std::getenv("TULA_PREFETCH"); env && *env) {
            o.prefetch = env;
            prefetch_from = "TULA_PREFETCH";
        }
    if (o.prefetch != "on" && o.prefetch != "off" && o.prefetch != "auto")
        return ("unknown " + prefetch_from + " '" + o.prefetch + "'; valid: on, off, auto");
    if (o.prefetch == "auto") {
        const int cpus = rank_cpus();
        o.prefetch = cpus > o.threads ? "on" : "off";
        o.prefetch_why = " (auto: " + std::to_string(cpus) + " CPU(s) for " + std::to_string(o.threads) + " thread(s))";
    }
    return "";
}

// The outputs', the profiles' and the device's values: "" when valid, else the message.
std::string check_output_and_device(const Options& o) {
    if (o.metrics_every < 1) return ("--metrics-every must be a positive number of steps");
    if (!(o.bucket_mb >= 0 && o.bucket_mb <= 4096)) return ("--bucket-mb must be between 0 and 4096 MiB");
    if (o.resume && o.checkpoint.empty() && !std::getenv("SLURM_JOB_ID"))
        return ("--resume needs --checkpoint FILE (outside Slurm there is no default checkpoint file)");
    if (o.iters < 1 || o.iters > 100000) return ("--iters must be between 1 and 100000");
    if (!(o.min_time >= 0 && o.min_time <= 60)) return ("--min-time must be between 0 and 60 seconds");
    for (int b : o.batch_sizes)
        if (b < 1 || b > 65536) return ("--batch-sizes: " + std::to_string(b) + " is not in [1, 65536]");
    if (o.batch_sizes.empty()) return ("--batch-sizes: give at least one batch size");
    for (int64_t s : o.sizes)
        if (s < 4 || s > (int64_t{1} << 30)) return ("--sizes: " + std::to_string(s) + " is not in [4, 1073741824] bytes");
    if (o.profile_compute && o.profile_allreduce) return ("give one of --profile-compute and --profile-allreduce");
    if (o.device != "cpu" && o.device != "cuda") return ("unknown --device '" + o.device + "'; valid: cpu, cuda");
    if (!(o.label_smoothing >= 0 && o.label_smoothing < 1))
        return ("--label-smoothing must be in [0, 1) (got " + fmt("%g", o.label_smoothing) + ")");
    if (o.label_smoothing > 0 && o.device == "cuda") return ("--label-smoothing is for --device cpu only");
    if (o.precision != "fp32" && o.precision != "bf16")
        return ("unknown --precision '" + o.precision + "'; valid: fp32, bf16");
    if (o.precision == "bf16" && o.device != "cuda")
        return ("--precision bf16 needs --device cuda (the CPU path computes in fp32 only)");
    if (o.precision == "bf16" && o.no_tf32)
        return ("--no-tf32 and --precision bf16 contradict each other (bf16 convolutions use tensor cores)");
    for (const auto& m : o.gpu_allreduce)
        if (m != "nccl" && m != "mpi") return ("unknown --gpu-allreduce method '" + m + "'; valid: nccl, mpi");
    if (o.gpu_allreduce.empty()) return ("--gpu-allreduce: give at least one method (nccl, mpi)");
#ifndef TULA_HAVE_CUDA
    if (o.device == "cuda")
        return ("--device cuda: this tula-train was built without the CUDA backend (USE_CUDA=no, or no nvcc and "
                   "cuDNN under CUDA_HOME at build time); rebuild with USE_CUDA=yes or use --device cpu");
#endif

    if (!o.db.empty() && o.no_db) return ("--db and --no-db contradict each other");
    return "";
}

// The values of the options, and the thread count and prefetching they resolve to: "" when
// they are valid, else the message. Warnings on rank 0 (`root`).
std::string check_values(const CLI::App& app, Options& o, bool root) {
    std::string m = check_schedule_values(app, o);
    if (m.empty()) m = check_optimizer_values(app, o);
    if (m.empty()) m = resolve_threads_and_prefetch(app, o, root);
    if (m.empty()) m = check_output_and_device(o);
    return m;
}

// The global batch (--batch-size, else $TULA_BATCH_SIZE, else 64) and the epochs (a planned
// job's TULA_EPOCHS): "" when they are valid, else the message. Warnings on rank 0 (`root`).
std::string resolve_batch_and_epochs(const CLI::App& app, Options& o, bool root) {
    // Global batch: --batch-size, else $TULA_BATCH_SIZE (set by the Tula SPANK plugin), else 64.
    if (app.count("--batch-size")) {
        if (o.batch < 1) return ("--batch-size must be a positive number of examples (got " + std::to_string(o.batch) + ")");
        o.batch_source = "--batch-size";
    } else if (const char* env = std::getenv("TULA_BATCH_SIZE"); env && *env) {
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(env, &end, 10);
        if (errno == 0 && end && *end == '\0' && v >= 1 && v <= (1 << 24)) {
            o.batch = static_cast<int>(v);
            o.batch_source = "TULA_BATCH_SIZE";
        } else {
            if (root) warn(std::string("ignoring TULA_BATCH_SIZE='") + env + "' (not a positive integer); using " +
                           std::to_string(kTrainerDefaultBatch));
            o.batch = kTrainerDefaultBatch;
            o.batch_source = "default";
        }
    } else {
        o.batch = kTrainerDefaultBatch;
        o.batch_source = "default";
    }

    // Epochs: a job planned by Tula (its global batch from TULA_BATCH_SIZE) trains the plan's
    // TULA_EPOCHS, the epochs its batch needs to reach the accuracy --epochs reach at the
    // script's own batch (tula-train's default, since the script gave no --batch-size).
    if (o.batch_source == "TULA_BATCH_SIZE") {
        if (const char* env = std::getenv("TULA_EPOCHS"); env && *env) {
            char* end = nullptr;
            errno = 0;
            const long v = std::strtol(env, &end, 10);
            if (errno == 0 && end && *end == '\0' && v >= 1 && v <= 100000 && v >= o.warmup_epochs) {
                if (v != o.epochs)
                    o.epochs_note = std::to_string(o.epochs) + " at batch " + std::to_string(kTrainerDefaultBatch) + " -> " +
                                    std::to_string(v) + " at batch " + std::to_string(o.batch) + ", tula plan";
                o.epochs = static_cast<int>(v);
            } else if (root) {
                warn(std::string("ignoring TULA_EPOCHS='") + env + "' (not a whole number of epochs in [1, 100000] and at least --warmup-epochs); training " +
                     std::to_string(o.epochs) + " (--epochs)");
            }
        }
    }
    return "";
}

// --optimizer auto and the defaults that depend on the update rule.
void resolve_optimizer(const CLI::App& app, Options& o) {
    // --optimizer auto: auto does not tune, so it takes the rule that holds up at its default
    // rate. In results/ags-study/lenet5/report.md (lenet5, 10 epochs, validation accuracy at each method's
    // default rate, x1 cosine, seed 1) SGD with linear scaling is best up to 256 (0.913 against
    // AGS's 0.901) and diverges at 512 and from 2048 on; AGS trains at every batch to 8192
    // (0.908 at 1024, 0.894 at 2048, 0.856 at 4096), where LARS diverges from 4096 and LAMB
    // trails it (0.887, 0.871, 0.815). Tuned per batch, LAMB matches or beats AGS there (same
    // report).
    if (o.optimizer == "auto") {
        const int limit = o.sgd_max_batch > 0 ? o.sgd_max_batch : 4 * o.lr_base_batch;
        const bool sgd = o.batch <= limit;
        o.optimizer = sgd ? "sgd" : "ags";
        o.optimizer_why = std::string(" (auto: global batch ") + std::to_string(o.batch) + (sgd ? " <= " : " > ") +
                          std::to_string(limit) + (o.sgd_max_batch > 0 ? " --sgd-max-batch)" : " = 4 x --lr-base-batch)");
        // the noise scale is measured either way: the planner's convergence model reads it
        if (o.noise_every < 0) o.noise_every = 10;
    }
    // Defaults that depend on the update rule.
    if (o.eta_trust < 0) o.eta_trust = o.optimizer == "ags" ? 0.2 : 0.02;
    if (o.noise_every < 0) o.noise_every = o.optimizer == "ags" ? 10 : 0;
    if (o.warmup_threshold < 0) o.warmup_threshold = o.optimizer == "ags" ? 0.05 : 0.0;
    if (o.lr_scaling.empty()) o.lr_scaling = o.optimizer == "ags" ? "noise" : "linear";
    // the --lr-max cap is a guard for plain SGD; the trust-ratio optimizers bound the step themselves
    if (!app.count("--lr-max") && o.optimizer != "sgd") o.lr_max = 0;
}

}  // namespace

int parse_args(int argc, char** argv, Options& o, bool root) {
    CLI::App app{"tula-train: trains a CNN on Fashion-MNIST with MPI data parallelism (see tula-train(1))",
                 "tula-train"};
    add_options(app, o);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        if (root) std::printf("%s", app.help().c_str());
        return 0;
    } catch (const CLI::ParseError& e) {
        if (root) std::fprintf(stderr, "%s; see tula-train --help\n", msg(e.what()).c_str());
        return 2;
    }
    auto bad = [&](const std::string& m) {
        if (root) std::fprintf(stderr, "%s\n", msg(m).c_str());
        return 2;
    };
    if (const std::string e = check_data_and_device(o); !e.empty()) return bad(e);
    if (o.list_models) return -1;
    if (const std::string e = check_values(app, o, root); !e.empty()) return bad(e);
    if (const std::string e = resolve_batch_and_epochs(app, o, root); !e.empty()) return bad(e);
    resolve_optimizer(app, o);
    return -1;
}

}  // namespace app
}  // namespace train
}  // namespace tula
