// tula-train: trains a CNN on Fashion-MNIST with MPI data parallelism and writes the
// measured times to the profile database; also the profiling modes of `tula profile`.
// See tula-train(1).
//
// Exit status: 0 success; 1 training failed (diverged, internal error; or a profiling
// mode could not write its rows); 2 bad usage or bad input (unknown model, batch not
// divisible by the ranks, missing / truncated dataset file, unusable checkpoint); 3 stopped
// by SIGTERM / SIGUSR1 after writing a checkpoint.
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

namespace {

using namespace tula::train;

/// Default base learning rate for --lr-base-batch examples (see tula-train(1) for the
/// measurements it was chosen from).
constexpr double kDefaultLr = 0.05;
/// Default cap on the linearly scaled rate: LeNet-5 diverged at a peak of 0.8 (batch 1024
/// with the default rate) and trained to 89.6 % at 0.4 (see tula-train(1)).
constexpr double kDefaultLrMax = 0.4;
constexpr int kDefaultBatch = 64;
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
    double warmup_epochs = -1;  // -1: automatic
    std::string schedule = "cosine";  // cosine | constant | wsd
    double decay_fraction = 0.3;      // wsd: fraction of the post-warmup steps spent decaying
    std::string optimizer = "sgd";  // sgd | ags | lars | lamb | auto (resolved to sgd or ags once the batch is known)
    std::string optimizer_why;      // for the header line: how auto chose
    int sgd_max_batch = 0;          // auto: largest global batch trained with plain SGD (0: 4 x lr_base_batch)
    std::string lr_scaling;         // linear | sqrt | noise; "": linear, noise with ags
    // eta_trust -1: 0.2 with ags (lenet5 at batch 4096: 0.879 vs 0.817 with 0.02), 0.02 with lars
    double eta_trust = -1, s_min = 0.01, s_max = 10.0, ags_lambda = 0.0;
    int noise_every = -1;           // -1: 10 with ags, else 0 (off)
    double warmup_threshold = -1;   // -1: 0.05 with ags, else 0 (fixed warmup)
    double warmup_from = -1;        // -1: --lr (Goyal et al.'s warmup from the small-batch rate)
    int warmup_min_steps = 1;       // fewest steps of the data-driven warmup
    int hessian_every = 0, hessian_batch = 256;  // largest Hessian eigenvalue every K steps (0: off)
    int local_steps = 0;            // Local SGD: H local steps per averaging round (0: synchronous SGD)
    std::string batch_test = "norm";  // Local SGD batch growth: none | norm | inner
    double batch_test_eta = 0.5, batch_test_theta = 0.5;
    int max_batch = 0;              // cap on the adaptive global batch (0: the training set)
    double max_batch_growth = 0;    // largest factor the adaptive batch grows by per round (0: unlimited)
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
    std::string device = "cpu"; // cpu | cuda
    bool no_tf32 = false;       // cuda: strict fp32 convolutions
    std::string precision = "fp32";  // fp32 | bf16 (cuda only: bf16 convolutions and GEMMs)
    std::vector<std::string> gpu_allreduce{"nccl", "mpi"};  // cuda: methods, first usable wins
    std::string metrics;        // --metrics FILE ("": none)
    int metrics_every = 1;
    std::string checkpoint;     // --checkpoint FILE ("": tula-train-$SLURM_JOB_ID.ckpt under Slurm)
    bool resume = false;
    double bucket_mb = 25;
    std::string augment;        // none | crop | flip | crop-flip; "": crop-flip for CIFAR, else none
    int threads = 0;            // 0: $SLURM_CPUS_PER_TASK, else 1
    std::string threads_source = "default";
    std::string prefetch = "auto";  // on | off | auto (on when a CPU is spare: rank_cpus() > threads); default $TULA_PREFETCH
    std::string prefetch_why;       // for the header line
};

/// `m` without libtula's "tula: " prefix.
std::string bare(const std::string& m) { return m.rfind("tula: ", 0) == 0 ? m.substr(6) : m; }
/// "tula-train: " + bare(m).
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

#ifdef TULA_HAVE_CUDA
// The GPU of this rank: the node-local rank (Open MPI's or Slurm's) modulo the number of
// devices. Throws std::runtime_error when no device can be used.
std::unique_ptr<cuda::GpuContext> open_gpu(const Options& o) {
    std::string why;
    const int n = cuda::device_count(&why);
    if (n <= 0) throw std::runtime_error("--device cuda: no usable CUDA device (" + why + "); use --device cpu");
    int local = 0;
    for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
        if (const char* e = std::getenv(v); e && *e) {
            local = std::atoi(e);
            break;
        }
    return std::make_unique<cuda::GpuContext>(local % n, !o.no_tf32, cuda::parse_precision(o.precision));
}
#endif

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
int parse_args(int argc, char** argv, Options& o, bool root) {
    CLI::App app{"tula-train: trains a CNN on Fashion-MNIST with MPI data parallelism (see tula-train(1))",
                 "tula-train"};
    app.set_help_flag("-h,--help", "print this help and exit");
    app.add_option("--model", o.model, "network: " + join_models());
    app.add_option("--data", o.data,
                   "data set: fashion-mnist, cifar10:DIR, cifar100:DIR (binary version), or synthetic:CxHxW:K (random images, for profiling)")
        ->capture_default_str();
    app.add_option("--data-dir", o.data_dir, "directory of the IDX .gz files")->capture_default_str();
    app.add_option("--epochs", o.epochs, "training epochs")->capture_default_str();
    app.add_option("--batch-size", o.batch,
                   "global batch (all ranks together); default $TULA_BATCH_SIZE, else 64");
    app.add_option("--lr", o.lr, "base learning rate for --lr-base-batch examples")->capture_default_str();
    app.add_option("--lr-base-batch", o.lr_base_batch, "batch the base rate is for (linear scaling)")
        ->capture_default_str();
    app.add_option("--lr-max", o.lr_max, "cap on the scaled rate lr*B/B0 (0: no cap)")->capture_default_str();
    app.add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
    app.add_option("--weight-decay", o.weight_decay, "L2 weight decay (not on biases and BN)")->capture_default_str();
    app.add_option("--warmup-epochs", o.warmup_epochs,
                   "linear warmup epochs; default 0 when the batch is <= --lr-base-batch, 1 up to 8 times it, else 2");
    app.add_option("--schedule", o.schedule,
                   "rate decay after warmup: cosine, constant, or wsd (warmup-stable-decay: the peak, then linear "
                   "to 0 over the last --decay-fraction of the steps)")
        ->capture_default_str();
    app.add_option("--decay-fraction", o.decay_fraction, "wsd: fraction of the post-warmup steps spent decaying")
        ->capture_default_str();
    app.add_option("--optimizer", o.optimizer,
                   "sgd, ags (adaptive gradient scaling), lars, lamb, or auto (sgd up to --sgd-max-batch, ags above)")
        ->capture_default_str();
    app.add_option("--sgd-max-batch", o.sgd_max_batch,
                   "auto: the largest global batch trained with plain SGD and linear scaling; larger ones use AGS "
                   "(default 4 x --lr-base-batch)");
    app.add_option("--lr-scaling", o.lr_scaling, "linear, sqrt or noise (noise-scale aware); default noise with ags, else linear");
    app.add_option("--eta-trust", o.eta_trust, "AGS / LARS trust coefficient; default 0.2 with ags, 0.02 with lars");
    app.add_option("--s-min", o.s_min, "AGS lower bound of the scaling factor (> 0)")->capture_default_str();
    app.add_option("--s-max", o.s_max, "AGS upper bound of the scaling factor (>= --s-min)")->capture_default_str();
    app.add_option("--ags-lambda", o.ags_lambda, "AGS lambda: s = eta|w|/(|g| + lambda|w|)")->capture_default_str();
    app.add_option("--noise-scale-every", o.noise_every, "estimate the gradient noise scale every K steps (0: never); default 10 with ags, else 0");
    app.add_option("--warmup-threshold", o.warmup_threshold,
                   "end warmup once the relative change of the EMA of |g|^2 is at most this (0: fixed warmup); default 0.05 with ags, else 0");
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
                   "rate at the first warmup step (default: --lr)");
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
    app.add_option("--max-batch-size", o.max_batch, "cap on the adaptive global batch (0: the training set); memory caps it too")
        ->capture_default_str();
    app.add_option("--max-batch-growth", o.max_batch_growth,
                   "largest factor the adaptive batch grows by per averaging round (0: unlimited)")
        ->capture_default_str();
    app.add_option("--seed", o.seed, "random seed (weights, data order)")->capture_default_str();
    app.add_option("--limit-train", o.limit_train, "use only the first N training examples (0: all)");
    app.add_option("--limit-test", o.limit_test, "use only the first N test examples (0: all)");
    app.add_option("--metrics", o.metrics, "write a JSON-lines log of every step and epoch to FILE (rank 0)");
    app.add_option("--metrics-every", o.metrics_every, "log every K-th step in --metrics")->capture_default_str();
    app.add_option("--checkpoint", o.checkpoint,
                   "checkpoint FILE written on SIGTERM/SIGUSR1 (default under Slurm: tula-train-$SLURM_JOB_ID.ckpt)");
    app.add_flag("--resume", o.resume, "continue from --checkpoint (automatic when SLURM_RESTART_COUNT > 0 and it exists)");
    app.add_option("--bucket-mb", o.bucket_mb, "gradient bucket size in MiB for the overlapped allreduce (0: one blocking allreduce)")
        ->capture_default_str();
    app.add_option("--augment", o.augment,
                   "training augmentation: none, crop (pad 4, random 32x32-style crop), flip, crop-flip; default crop-flip for CIFAR, else none");
    app.add_option("--threads", o.threads, "threads per rank for the matrix products; default $SLURM_CPUS_PER_TASK, else 1");
    app.add_option("--prefetch", o.prefetch,
                   "gather the next training batch on a background thread: on, off, or auto (on when this rank has a CPU beyond --threads); default $TULA_PREFETCH, else auto")
        ->capture_default_str();
    app.add_option("--db", o.db, "profile database (default: the user's, $XDG_DATA_HOME/tula/profiles.db)");
    app.add_flag("--no-db", o.no_db, "do not write to the profile database");
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
    if (o.data != "fashion-mnist") {
        if (!is_synthetic(o.data) && !is_cifar(o.data))
            return bad("unknown data set '" + o.data +
                       "'; valid data sets: fashion-mnist, cifar10:DIR, cifar100:DIR, synthetic:CxHxW:K");
        try {
            if (is_cifar(o.data)) parse_cifar(o.data);
            else parse_synthetic(o.data);
        } catch (const std::exception& e) {
            return bad(e.what());
        }
    }
    if (o.device == "cuda" && (o.local_steps > 0 || o.hessian_every > 0))
        return bad("--local-steps and --hessian-every are not implemented with --device cuda yet");
    if (o.device == "cuda" && (!o.checkpoint.empty() || o.resume))
        return bad("--checkpoint and --resume are not implemented with --device cuda yet");
    if (o.device == "cuda" && !o.augment.empty() && o.augment != "none")
        return bad("--augment is not implemented with --device cuda yet; give --augment none");
    if (o.augment.empty()) o.augment = is_cifar(o.data) && o.device != "cuda" ? "crop-flip" : "none";
    if (o.augment != "none" && o.augment != "crop" && o.augment != "flip" && o.augment != "crop-flip")
        return bad("unknown --augment '" + o.augment + "'; valid: none, crop, flip, crop-flip");
    if (o.list_models) return -1;
    const bool need_model = !o.profile_allreduce;
    if (need_model && o.model.empty()) return bad("--model is required (one of: " + join_models() + ")");
    if (!o.model.empty()) {
        bool known = false;
        for (const auto& n : model_names()) known = known || n == o.model;
        if (!known) return bad("unknown model '" + o.model + "'; valid models: " + join_models());
    }
    if (o.epochs < 1 || o.epochs > 100000) return bad("--epochs must be between 1 and 100000 (got " + std::to_string(o.epochs) + ")");
    if (!(o.lr > 0) || !std::isfinite(o.lr)) return bad("--lr must be a positive number");
    if (o.lr_base_batch < 1) return bad("--lr-base-batch must be a positive number of examples");
    if (!(o.lr_max >= 0) || !std::isfinite(o.lr_max)) return bad("--lr-max must be >= 0 (0: no cap)");
    if (!(o.momentum >= 0 && o.momentum < 1)) return bad("--momentum must be in [0, 1)");
    if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) return bad("--weight-decay must be >= 0");
    if (o.warmup_epochs != -1 && !(o.warmup_epochs >= 0 && o.warmup_epochs <= o.epochs))
        return bad("--warmup-epochs must be between 0 and --epochs");
    if (o.schedule != "cosine" && o.schedule != "constant" && o.schedule != "wsd")
        return bad("unknown --schedule '" + o.schedule + "'; valid: cosine, constant, wsd");
    if (!(o.decay_fraction > 0 && o.decay_fraction <= 1))
        return bad("--decay-fraction must be in (0, 1] (the fraction of the post-warmup steps spent decaying)");
    if (app.count("--decay-fraction") && o.schedule != "wsd")
        return bad("--decay-fraction is for --schedule wsd");
    if (o.limit_train < 0 || o.limit_test < 0) return bad("--limit-train and --limit-test must be >= 0");
    if (o.optimizer != "sgd" && o.optimizer != "ags" && o.optimizer != "lars" && o.optimizer != "lamb" &&
        o.optimizer != "auto")
        return bad("unknown --optimizer '" + o.optimizer + "'; valid: sgd, ags, lars, lamb, auto");
    if (app.count("--sgd-max-batch") && o.sgd_max_batch < 1)
        return bad("--sgd-max-batch must be a positive number of examples");
    if (!o.lr_scaling.empty() && o.lr_scaling != "linear" && o.lr_scaling != "sqrt" && o.lr_scaling != "noise")
        return bad("unknown --lr-scaling '" + o.lr_scaling + "'; valid: linear, sqrt, noise");
    if (app.count("--eta-trust") && (!(o.eta_trust > 0) || !std::isfinite(o.eta_trust)))
        return bad("--eta-trust must be a positive number");
    if (!(o.s_min > 0) || !std::isfinite(o.s_min)) return bad("--s-min must be > 0 (the AGS bound needs 0 < s_min <= s_max)");
    if (!(o.s_max >= o.s_min) || !std::isfinite(o.s_max)) return bad("--s-max must be a number >= --s-min");
    if (!(o.ags_lambda >= 0) || !std::isfinite(o.ags_lambda)) return bad("--ags-lambda must be >= 0");
    if (o.noise_every < -1 || (app.count("--noise-scale-every") && o.noise_every < 0))
        return bad("--noise-scale-every must be >= 0 steps (0: never)");
    if (app.count("--warmup-threshold") && !(o.warmup_threshold >= 0 && std::isfinite(o.warmup_threshold)))
        return bad("--warmup-threshold must be >= 0 (0: fixed warmup)");
    if (app.count("--warmup-from") && !(o.warmup_from >= 0 && std::isfinite(o.warmup_from)))
        return bad("--warmup-from must be a rate >= 0");
    if (o.warmup_min_steps < 1) return bad("--warmup-min-steps must be >= 1 step");
    if (o.hessian_every < 0) return bad("--hessian-every must be >= 0 steps (0: never)");
    if (o.hessian_batch < 1) return bad("--hessian-batch must be a positive number of examples");
    if (o.local_steps < 0) return bad("--local-steps must be >= 0 (0: synchronous SGD)");
    if (o.batch_test != "none" && o.batch_test != "norm" && o.batch_test != "inner")
        return bad("unknown --batch-test '" + o.batch_test + "'; valid: none, norm, inner");
    if (!(o.batch_test_eta > 0) || !std::isfinite(o.batch_test_eta)) return bad("--batch-test-eta must be > 0");
    if (!(o.batch_test_theta > 0) || !std::isfinite(o.batch_test_theta)) return bad("--batch-test-theta must be > 0");
    if (o.max_batch < 0) return bad("--max-batch-size must be >= 0 examples (0: no cap but the training set)");
    if (!std::isfinite(o.max_batch_growth) || (o.max_batch_growth != 0 && !(o.max_batch_growth > 1)))
        return bad("--max-batch-growth must be > 1 (a factor per averaging round) or 0 (unlimited)");
    if (app.count("--threads")) {
        if (o.threads < 1 || o.threads > 1024) return bad("--threads must be between 1 and 1024");
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
        return bad("unknown " + prefetch_from + " '" + o.prefetch + "'; valid: on, off, auto");
    if (o.prefetch == "auto") {
        const int cpus = rank_cpus();
        o.prefetch = cpus > o.threads ? "on" : "off";
        o.prefetch_why = " (auto: " + std::to_string(cpus) + " CPU(s) for " + std::to_string(o.threads) + " thread(s))";
    }
    if (o.metrics_every < 1) return bad("--metrics-every must be a positive number of steps");
    if (!(o.bucket_mb >= 0 && o.bucket_mb <= 4096)) return bad("--bucket-mb must be between 0 and 4096 MiB");
    if (o.resume && o.checkpoint.empty() && !std::getenv("SLURM_JOB_ID"))
        return bad("--resume needs --checkpoint FILE (outside Slurm there is no default checkpoint file)");
    if (o.iters < 1 || o.iters > 100000) return bad("--iters must be between 1 and 100000");
    if (!(o.min_time >= 0 && o.min_time <= 60)) return bad("--min-time must be between 0 and 60 seconds");
    for (int b : o.batch_sizes)
        if (b < 1 || b > 65536) return bad("--batch-sizes: " + std::to_string(b) + " is not in [1, 65536]");
    if (o.batch_sizes.empty()) return bad("--batch-sizes: give at least one batch size");
    for (int64_t s : o.sizes)
        if (s < 4 || s > (int64_t{1} << 30)) return bad("--sizes: " + std::to_string(s) + " is not in [4, 1073741824] bytes");
    if (o.profile_compute && o.profile_allreduce) return bad("give one of --profile-compute and --profile-allreduce");
    if (o.device != "cpu" && o.device != "cuda") return bad("unknown --device '" + o.device + "'; valid: cpu, cuda");
    if (o.precision != "fp32" && o.precision != "bf16")
        return bad("unknown --precision '" + o.precision + "'; valid: fp32, bf16");
    if (o.precision == "bf16" && o.device != "cuda")
        return bad("--precision bf16 needs --device cuda (the CPU path computes in fp32 only)");
    if (o.precision == "bf16" && o.no_tf32)
        return bad("--no-tf32 and --precision bf16 contradict each other (bf16 convolutions use tensor cores)");
    for (const auto& m : o.gpu_allreduce)
        if (m != "nccl" && m != "mpi") return bad("unknown --gpu-allreduce method '" + m + "'; valid: nccl, mpi");
    if (o.gpu_allreduce.empty()) return bad("--gpu-allreduce: give at least one method (nccl, mpi)");
#ifndef TULA_HAVE_CUDA
    if (o.device == "cuda")
        return bad("--device cuda: this tula-train was built without the CUDA backend (USE_CUDA=no, or no nvcc and "
                   "cuDNN under CUDA_HOME at build time); rebuild with USE_CUDA=yes or use --device cpu");
#endif

    if (!o.db.empty() && o.no_db) return bad("--db and --no-db contradict each other");

    // Global batch: --batch-size, else $TULA_BATCH_SIZE (set by the Tula SPANK plugin), else 64.
    if (app.count("--batch-size")) {
        if (o.batch < 1) return bad("--batch-size must be a positive number of examples (got " + std::to_string(o.batch) + ")");
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
                           std::to_string(kDefaultBatch));
            o.batch = kDefaultBatch;
            o.batch_source = "default";
        }
    } else {
        o.batch = kDefaultBatch;
        o.batch_source = "default";
    }

    // --optimizer auto: AGS is for the large batches where the linear scaling rule breaks down;
    // below them plain SGD with linear scaling trains faster per epoch and as accurately
    // (docs/ags-report.md: lenet5, 10 epochs, SGD 0.9093 at 64 and 0.9055 at 256 vs AGS 0.8840
    // and 0.8960; SGD collapsed at 1024 in 1 of 3 seeds, AGS 0.9093 there).
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
    return -1;
}

// Opens the profile database for writing: --db, else the user's. Throws tula::Error.
tula::ProfileDb open_db(const Options& o) {
    const std::string path =
        o.db.empty() ? tula::user_db_path(std::getenv("XDG_DATA_HOME"), std::getenv("HOME")) : o.db;
    return tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
}

// The data set's name in workload names: "cifar10" / "cifar100" without the directory,
// else --data as given.
std::string data_name(const Options& o) {
    if (is_cifar(o.data)) return "cifar" + std::to_string(parse_cifar(o.data).classes);
    return o.data;
}

// The workload's row: the data set's full sizes (from the IDX headers), even when this run
// used --limit-train / --limit-test, since the planner computes epochs from them.
tula::Workload workload_of(const Options& o, const Model& m, int64_t train_n, int64_t test_n) {
    if ((o.limit_train > 0 || o.limit_test > 0) && is_cifar(o.data)) {
        train_n = 50000;  // both CIFARs: 50,000 training and 10,000 test images
        test_n = 10000;
    } else if ((o.limit_train > 0 || o.limit_test > 0) && !is_synthetic(o.data)) {
        train_n = fashion_mnist_count(o.data_dir, true);
        test_n = fashion_mnist_count(o.data_dir, false);
    }
    tula::Workload w;
    w.model = o.model;
    w.dataset = data_name(o);
    w.name = tula::workload_name(o.model, data_name(o));
    w.params = static_cast<int64_t>(m.num_params());
    w.train_examples = train_n;
    w.test_examples = test_n;
    return w;
}

// Example shape and class count of --data (Fashion-MNIST: 1x28x28, 10 classes).
SyntheticSpec input_of(const Options& o) {
    if (is_synthetic(o.data)) return parse_synthetic(o.data);
    if (is_cifar(o.data)) return SyntheticSpec{Shape{3, 32, 32}, parse_cifar(o.data).classes};
    return SyntheticSpec{Shape{1, 28, 28}, 10};
}

// The training (train = true) or test set of --data; a synthetic set has --limit-train
// (default 10,000) / --limit-test (default 1,000) random images. Errors: DataError.
Dataset load_set(const Options& o, bool train) {
    if (is_synthetic(o.data)) {
        const int64_t lim = train ? o.limit_train : o.limit_test;
        const int n = lim > 0 ? static_cast<int>(std::min<int64_t>(lim, 1 << 30)) : (train ? 10000 : 1000);
        return make_synthetic(parse_synthetic(o.data), n, o.seed + (train ? 1 : 2));
    }
    if (is_cifar(o.data)) return load_cifar(parse_cifar(o.data), train, train ? o.limit_train : o.limit_test);
    return load_fashion_mnist(o.data_dir, train, train ? o.limit_train : o.limit_test);
}

// Loads both data sets on every rank. On failure anywhere, every rank learns it (one
// allreduce) and the caller exits 2 on all ranks; the failing ranks print why.
bool load_data(const Options& o, Comm& comm, Dataset& tr, Dataset& te) {
    std::string err;
    try {
        tr = load_set(o, true);
        te = load_set(o, false);
    } catch (const std::exception& e) {
        err = e.what();
    }
    double fail[2] = {err.empty() ? 0.0 : 1.0, (!err.empty() && comm.rank() == 0) ? 1.0 : 0.0};
    comm.allreduce_sum(fail, 2);
    if (fail[0] == 0) {
        if (is_cifar(o.data)) {  // normalize both sets with the training set's pixel statistics
            double m = 0, sd = 1;
            pixel_stats(tr, &m, &sd);
            if (!(sd > 0)) sd = 1;
            tr.mean = te.mean = static_cast<float>(m);
            tr.std = te.std = static_cast<float>(sd);
        }
        return true;
    }
    // rank 0's message suffices when it failed too; otherwise each failing rank speaks
    if (!err.empty() && (comm.rank() == 0 || fail[1] == 0)) {
        const std::string who = comm.size() > 1 && comm.rank() != 0 ? "rank " + std::to_string(comm.rank()) + ": " : "";
        std::fprintf(stderr, "%s\n", msg(who + err).c_str());
        std::fflush(stderr);
    }
    return false;
}

// Name and parameter count of every model for the example shape and classes of --data.
int list_models(const Options& o) {
    const SyntheticSpec in = input_of(o);
    std::printf("models for %s input, %d classes:\n", in.shape.str().c_str(), in.classes);
    for (const auto& n : model_names()) {
        try {
            std::printf("%-18s %zu parameters\n", n.c_str(), count_model_params(n, in.shape, in.classes));
        } catch (const std::exception& e) {
            std::printf("%-18s (does not fit: %s)\n", n.c_str(), e.what());
        }
    }
    return 0;
}

// --profile-compute: seconds per training step at each --batch-sizes local batch. On one
// rank it times alone. Under mpirun -np K (one rank per node of a K-node job) every rank
// times the same steps at the same time, every step started together, and the mean of each
// step's slowest rank is recorded with ranks = K (ComputeSample): what a synchronous
// step of K nodes waits for when they share hardware. Rank 0 writes the samples.
int profile_compute(const Options& o, Comm& comm) {
    const bool root = comm.rank() == 0;
    const std::string wl = tula::workload_name(o.model, data_name(o));
    const int ranks = comm.size();
    int rc = 0;
    Dataset tr, te;
    try {
        tr = load_set(o, true);
        te = load_set(o, false);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", msg(e.what()).c_str());  // whichever rank it is: it may be the only one
        rc = 2;
    }
    {
        double r = rc;
        comm.allreduce_max(&r, 1);  // every rank stops when one cannot read the data
        if (r != 0) return static_cast<int>(r);
    }
    std::vector<tula::ComputeSample> samples;
    auto model = build_model(o.model, input_of(o).shape, input_of(o).classes);
    model->init(o.seed);
#ifdef TULA_HAVE_CUDA
    std::unique_ptr<cuda::GpuContext> gpu;
    {
        std::string why;
        try {
            if (o.device == "cuda") gpu = open_gpu(o);
        } catch (const std::exception& e) {
            why = e.what();
        }
        double r = why.empty() ? 0 : 2;
        if (!why.empty()) std::fprintf(stderr, "%s\n", msg(why).c_str());
        comm.allreduce_max(&r, 1);
        if (r != 0) return 2;
    }
#endif
    say(root, "profile " + wl + ": " +
                  (o.device == "cuda" ? "GPU (cuda, " + o.precision + ")"
                                      : std::to_string(gemm_threads()) + " thread(s), matrix kernels " +
                                            std::string(gemm_isa_name(gemm_isa()))) +
                  ", host " + host_name() +
                  (ranks > 1 ? ", " + std::to_string(ranks) + " ranks at once (each step at its slowest rank)" : ""));
    bool fresh = true;  // the process's first batch size: its warm-up steps are a run's start-up
    for (int b : o.batch_sizes) {
        int timed = o.iters;
        double startup = std::numeric_limits<double>::quiet_NaN();
        comm.barrier();  // the ranks start each batch size together
#ifdef TULA_HAVE_CUDA
        double s = gpu ? cuda::time_compute_step_gpu(*gpu, *model, tr, b, 3, o.iters)
                       : time_compute_step(*model, tr, b, 3, o.iters, o.min_time, &timed, &startup, &comm);
#else
        double s = time_compute_step(*model, tr, b, 3, o.iters, o.min_time, &timed, &startup, &comm);
#endif
        comm.allreduce_max(&s, 1);  // the GPU path times each rank alone (the CPU path's s is already the same)
        // start-up: measured alone in a fresh process only (see ComputeSample)
        if (!fresh || ranks > 1) startup = std::numeric_limits<double>::quiet_NaN();
        fresh = false;
        // with several ranks on the CPU, also the whole data-parallel step as a job takes it
        double synced = std::numeric_limits<double>::quiet_NaN();
        if (ranks > 1 && o.device != "cuda" && static_cast<int64_t>(b) * ranks <= tr.count)
            synced = time_synced_step(*model, tr, b, 3, o.iters, o.min_time, comm,
                                      static_cast<size_t>(o.bucket_mb * 1048576.0));
        say(root, "profile " + wl + ": local batch " + std::to_string(b) + ": " + fmt("%.2f", s * 1e3) + " ms/iter (" +
                      std::to_string(timed) + " iters" + (ranks > 1 ? ", slowest of " + std::to_string(ranks) + " ranks" : "") +
                      (std::isfinite(startup) ? ", start-up " + fmt("%.3f", startup) + " s" : "") + ")" +
                      (std::isfinite(synced) ? "; synchronized step with its allreduce " + fmt("%.2f", synced * 1e3) + " ms" : ""));
        tula::ComputeSample c;
        c.workload = wl;
        c.host = host_name();
        c.local_batch = b;
        c.threads = gemm_threads();
        c.seconds_per_iter = s;
        c.iters = timed;
        c.ranks = ranks;
        c.startup_seconds = startup;
        c.synced_seconds_per_iter = synced;
        samples.push_back(c);
    }
    if (root && !o.no_db) {
        try {
            tula::ProfileDb db = open_db(o);
            db.upsert_workload(workload_of(o, *model, tr.count, te.count));
            for (const auto& c : samples) db.add_compute(c);
            say(root, "tula-train: wrote " + std::to_string(samples.size()) + " compute samples of " + wl +
                          (ranks > 1 ? " (" + std::to_string(ranks) + " ranks at once)" : "") + " to " + db.path());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s\n", msg("cannot write the compute profile: " + std::string(e.what())).c_str());
            rc = 1;
        }
    }
    double r = rc;
    comm.allreduce_max(&r, 1);  // the other ranks share rank 0's exit status
    return static_cast<int>(r);
}

int profile_allreduce(const Options& o, Comm& comm) {
    const bool root = comm.rank() == 0;
    if (comm.size() < 2) {
        say(root, "tula-train: --profile-allreduce: only 1 rank, nothing to measure (start it with mpirun -np K, K >= 2)");
        return 0;
    }
    std::vector<int64_t> sizes = o.sizes;
    if (!o.model.empty()) sizes.push_back(4 * static_cast<int64_t>(count_model_params(o.model, input_of(o).shape, input_of(o).classes)));
    std::vector<tula::AllreduceSample> samples;
    for (int64_t bytes : sizes) {
        const double s = time_allreduce(comm, bytes, 3, 20);
        say(root, "profile allreduce: " + std::to_string(comm.size()) + " ranks, " + std::to_string(bytes) +
                      " bytes: " + fmt("%.3f", s * 1e3) + " ms (20 iters)");
        tula::AllreduceSample a;
        a.host = host_name();
        a.nodes = comm.size();
        a.bytes = bytes;
        a.seconds = s;
        samples.push_back(a);
    }
    int rc = 0;
    if (root && !o.no_db) {
        try {
            tula::ProfileDb db = open_db(o);
            for (const auto& a : samples) db.add_allreduce(a);
            say(root, "tula-train: wrote " + std::to_string(samples.size()) + " allreduce samples to " + db.path());
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s\n", msg("cannot write the allreduce profile: " + std::string(e.what())).c_str());
            rc = 1;
        }
    }
    double r = rc;
    comm.allreduce_max(&r, 1);
    return static_cast<int>(r);
}

// The options that determine the loss trajectory, as "key=value ..." (stored in checkpoints;
// a checkpoint resumes only a run with the same string). The rank count is not in it.
std::string run_config(const Options& o, const TrainConfig& c) {
    auto num = [](double v) { return nlohmann::json(v).dump(); };  // shortest round-trip text
    std::string s = "model=" + o.model + " data=" + o.data + " limit_train=" + std::to_string(o.limit_train) +
                    " limit_test=" + std::to_string(o.limit_test) + " epochs=" + std::to_string(o.epochs) +
                    " batch=" + std::to_string(o.batch) + " seed=" + std::to_string(o.seed) + " lr=" + num(o.lr) +
                    " lr_base_batch=" + std::to_string(o.lr_base_batch) + " lr_max=" + num(o.lr_max) +
                    " momentum=" + num(o.momentum) + " weight_decay=" + num(o.weight_decay) +
                    " warmup_epochs=" + num(c.lr.warmup_epochs) + " schedule=" + o.schedule +
                    (o.schedule == "wsd" ? " decay_fraction=" + num(o.decay_fraction) : std::string()) +
                    " optimizer=" + o.optimizer + " lr_scaling=" + o.lr_scaling + " eta_trust=" + num(o.eta_trust) +
                    " s_min=" + num(o.s_min) + " s_max=" + num(o.s_max) +
                    " ags_lambda=" + num(o.ags_lambda) + " noise_every=" + std::to_string(o.noise_every) +
                    " warmup_threshold=" + num(o.warmup_threshold) + " augment=" + o.augment;
    return s;
}

// The first "key=value" of `a` that differs in `b`, as "key: A here, B in the checkpoint".
std::string first_difference(const std::string& now, const std::string& then) {
    auto split = [](const std::string& s) {
        std::vector<std::string> v;
        size_t p = 0;
        while (p < s.size()) {
            size_t q = s.find(' ', p);
            if (q == std::string::npos) q = s.size();
            v.push_back(s.substr(p, q - p));
            p = q + 1;
        }
        return v;
    };
    const auto a = split(now), b = split(then);
    for (size_t i = 0; i < a.size(); ++i) {
        if (i < b.size() && a[i] == b[i]) continue;
        const std::string key = a[i].substr(0, a[i].find('='));
        std::string other = "(absent)";
        for (const auto& x : b)
            if (x.compare(0, key.size() + 1, key + "=") == 0) other = x.substr(key.size() + 1);
        return key + " is " + a[i].substr(key.size() + 1) + " here but " + other + " in the checkpoint";
    }
    return "the configuration differs";
}

// The checkpoint file of this run: --checkpoint, else tula-train-$SLURM_JOB_ID.ckpt in the
// working directory under Slurm, else "" (stop signals then end the process as usual).
std::string checkpoint_path(const Options& o) {
    if (!o.checkpoint.empty()) return o.checkpoint;
    const char* job = std::getenv("SLURM_JOB_ID");
    return job && *job ? std::string("tula-train-") + job + ".ckpt" : std::string();
}

// Whether Slurm restarted this job (requeue): SLURM_RESTART_COUNT > 0.
bool requeued() {
    const char* r = std::getenv("SLURM_RESTART_COUNT");
    return r && std::atoi(r) > 0;
}

int run_training(const Options& o, Comm& comm) {
    const bool root = comm.rank() == 0;
    const int K = comm.size();
    if (o.batch % K != 0) {
        if (root)
            std::fprintf(stderr, "%s\n",
                         msg("global batch " + std::to_string(o.batch) + " (from " + o.batch_source +
                             ") is not divisible by the " + std::to_string(K) +
                             " ranks; choose a multiple of the rank count")
                             .c_str());
        return 2;
    }
    Dataset tr, te;
    if (!load_data(o, comm, tr, te)) return 2;
    if (tr.count < o.batch) {
        if (root)
            std::fprintf(stderr, "%s\n",
                         msg("the training set has " + std::to_string(tr.count) + " examples, fewer than the global batch " +
                             std::to_string(o.batch))
                             .c_str());
        return 2;
    }
    auto model = build_model(o.model, input_of(o).shape, input_of(o).classes);
    model->init(o.seed);
    const std::string wl = tula::workload_name(o.model, data_name(o));

    TrainConfig cfg;
    cfg.epochs = o.epochs;
    cfg.global_batch = o.batch;
    cfg.momentum = o.momentum;
    cfg.weight_decay = o.weight_decay;
    cfg.seed = o.seed;
    cfg.lr.lr = o.lr;
    cfg.lr.base_batch = o.lr_base_batch;
    cfg.lr.max_lr = o.lr_max;
    // Default warmup: none when B <= B0, 1 epoch up to B = 8*B0, 2 epochs beyond (at batch
    // 1024 LeNet-5 died with 1 epoch of warmup and reached 89 % with 2; see tula-train(1)).
    cfg.lr.warmup_epochs = o.warmup_epochs >= 0              ? o.warmup_epochs
                           : o.batch > 8 * o.lr_base_batch ? 2.0
                           : o.batch > o.lr_base_batch     ? 1.0
                                                           : 0.0;
    cfg.lr.cosine = o.schedule == "cosine";
    cfg.lr.decay_fraction = o.schedule == "wsd" ? o.decay_fraction : 0.0;
    cfg.lr.global_batch = o.batch;
    cfg.lr.scaling = o.lr_scaling == "sqrt" ? LrScaling::Sqrt : o.lr_scaling == "noise" ? LrScaling::Noise : LrScaling::Linear;
    cfg.optim.kind = parse_optim_kind(o.optimizer);
    cfg.optim.eta_trust = o.eta_trust;
    cfg.optim.s_min = o.s_min;
    cfg.optim.s_max = o.s_max;
    cfg.optim.ags_lambda = o.ags_lambda;
    cfg.noise_every = o.noise_every;
    cfg.warmup_threshold = o.warmup_threshold;
    cfg.warmup_min_steps = o.warmup_min_steps;
    cfg.lr.warmup_from = o.warmup_from;
    cfg.hessian_every = o.hessian_every;
    cfg.hessian_batch = o.hessian_batch;
    if (o.hessian_every > 0 && !o.quiet)
        cfg.on_hessian = [&](int64_t t, double eig, double gn) {
            say(root, "hessian step " + std::to_string(t) + "  top-eig " + fmt("%.4g", eig) + "  grad-norm " + fmt("%.4g", gn));
        };
    cfg.bucket_bytes = static_cast<size_t>(o.bucket_mb * 1048576.0);
    cfg.augment.crop_pad = o.augment == "crop" || o.augment == "crop-flip" ? 4 : 0;
    cfg.augment.flip = o.augment == "flip" || o.augment == "crop-flip";
    cfg.prefetch = o.prefetch == "on";

    // Checkpoint and resume: every rank reads the checkpoint (like the data, it must be on a
    // file system all ranks see) and all agree on the verdict.
    TrainHooks hooks;
    hooks.config = run_config(o, cfg);
    // the GPU engine has no checkpoints yet: none by default there (explicit ones are refused)
    if (o.device != "cuda") hooks.checkpoint_path = checkpoint_path(o);
    struct stat sb;
    const bool ck_exists = !hooks.checkpoint_path.empty() && ::stat(hooks.checkpoint_path.c_str(), &sb) == 0;
    const bool resume = o.resume || (requeued() && ck_exists);
    Checkpoint ck;
    if (resume) {
        std::string err;
        try {
            ck = read_checkpoint(hooks.checkpoint_path);
            if (ck.config != hooks.config)
                err = hooks.checkpoint_path + " belongs to another run (" + first_difference(hooks.config, ck.config) +
                      "); resume with the same options, or start afresh without --resume";
        } catch (const CheckpointError& e) {
            err = e.what();
        }
        double fail = err.empty() ? 0.0 : 1.0;
        comm.allreduce_sum(&fail, 1);
        if (fail > 0) {
            if (!err.empty() && (root || K > 1))
                std::fprintf(stderr, "%s\n", msg((K > 1 ? "rank " + std::to_string(comm.rank()) + ": " : "") + err).c_str());
            return 2;
        }
        hooks.resume = &ck;
        if (ck.ranks != K && root)
            warn("the checkpoint was written by " + std::to_string(ck.ranks) + " ranks, this run has " + std::to_string(K) +
                 ": the loss trajectory will differ from an uninterrupted run's");
    }
    if (!hooks.checkpoint_path.empty()) install_stop_signals();

    // --metrics (rank 0), progress bar (rank 0, on a terminal)
    std::unique_ptr<MetricsLog> metrics;
    {
        std::string err;
        if (root && !o.metrics.empty()) {
            try {
                metrics.reset(new MetricsLog(o.metrics, resume));
            } catch (const std::exception& e) {
                err = e.what();
            }
        }
        double fail = err.empty() ? 0.0 : 1.0;
        comm.allreduce_sum(&fail, 1);
        if (fail > 0) {
            if (root) std::fprintf(stderr, "%s\n", msg(err + "; choose a writable path for --metrics").c_str());
            return 2;
        }
    }
    auto metrics_failed = [&](const std::exception& e) {
        warn(std::string(e.what()) + "; no more metrics are logged");
        metrics.reset();
    };
    if (metrics) {
        try {
            metrics->write({{"type", "run"}, {"model", o.model}, {"data", o.data}, {"params", model->num_params()},
                            {"train_examples", tr.count}, {"test_examples", te.count}, {"global_batch", o.batch},
                            {"ranks", K}, {"epochs", o.epochs}, {"steps_per_epoch", tr.count / o.batch},
                            {"seed", o.seed}, {"optimizer", o.optimizer}, {"peak_lr", cfg.lr.peak()},
                            {"resumed", resume}, {"resumed_at_step", resume ? ck.global_step : 0},
                            {"config_hash", fnv1a64(hooks.config)}});
        } catch (const std::exception& e) {
            metrics_failed(e);
        }
    }
    ProgressBar bar(root && !o.quiet, o.epochs);
    hooks.on_step = [&](const StepRecord& r) {
        if (!root) return;
        bar.step(r);
        if (metrics && r.step % o.metrics_every == 0) {
            try {
                metrics->step(r);
            } catch (const std::exception& e) {
                metrics_failed(e);
            }
        }
    };
    if (resume) say(root && !o.quiet, "tula-train: resuming from " + hooks.checkpoint_path + " at epoch " + std::to_string(ck.epoch) +
                                          ", step " + std::to_string(ck.step_in_epoch) + " of the epoch (" +
                                          std::to_string(ck.global_step) + " steps done)");

    const int64_t steps = tr.count / o.batch;
    if (!o.quiet)
        say(root, "tula-train: " + wl + ": " + std::to_string(model->num_params()) + " parameters; " +
                      std::to_string(tr.count) + " training / " + std::to_string(te.count) + " test examples; global batch " +
                      std::to_string(o.batch) + " (" + o.batch_source + ") = " + std::to_string(K) + " rank" +
                      (K > 1 ? "s" : "") + " x " + std::to_string(o.batch / K) + "; " + std::to_string(o.epochs) +
                      " epochs of " + std::to_string(steps) + " steps; lr " + fmt("%g", cfg.lr.peak()) + " (" +
                      fmt("%g", o.lr) + (o.lr_scaling == "sqrt" ? " x sqrt(" : " x ") + std::to_string(o.batch) + "/" +
                      std::to_string(o.lr_base_batch) + (o.lr_scaling == "sqrt" ? ")" : "") +
                      (o.lr_max > 0 && cfg.lr.peak() >= o.lr_max ? ", capped by --lr-max" : "") +
                      (o.lr_scaling == "noise" ? "; until the first noise-scale estimate, then the noise-scale rule" : "") +
                      "), warmup " + fmt("%g", cfg.lr.warmup_epochs) + " epochs, " + o.schedule + " schedule" +
                      (o.schedule == "wsd" ? fmt(" (linear decay over the last %g %%)", 100 * o.decay_fraction) : "") +
                      ", momentum " +
                      fmt("%g", o.momentum) + ", weight decay " + fmt("%g", o.weight_decay) + ", seed " +
                      std::to_string(o.seed) +
                      (o.device == "cuda" ? std::string("; device cuda")
                                          : "; matrix kernels " + std::string(gemm_isa_name(gemm_isa())) + ", " +
                                                std::to_string(gemm_threads()) + " thread(s) per rank (" + o.threads_source +
                                                "), prefetch " + o.prefetch + o.prefetch_why) +
                      "; optimizer " +
                      o.optimizer + o.optimizer_why + ", lr scaling " + o.lr_scaling +
                      (o.optimizer == "ags" || o.optimizer == "lars" ? ", eta_trust " + fmt("%g", o.eta_trust) : "") +
                      (o.optimizer == "ags" ? ", s in [" + fmt("%g", o.s_min) + ", " + fmt("%g", o.s_max) + "], lambda " + fmt("%g", o.ags_lambda) : "") +
                      (o.warmup_threshold > 0 ? ", warmup until the |g|^2 EMA changes <= " + fmt("%g", o.warmup_threshold) + "/step" : "") +
                      (o.noise_every > 0 ? ", noise scale every " + std::to_string(o.noise_every) + " steps" : ""));

    std::unique_ptr<StepEngine> engine;
#ifdef TULA_HAVE_CUDA
    std::unique_ptr<cuda::GpuContext> gpu;
    std::string gpu_allreduce;
    if (o.device == "cuda") {
        try {
            gpu = open_gpu(o);
            OptimConfig oc = cfg.optim;
            oc.momentum = cfg.momentum;
            oc.weight_decay = cfg.weight_decay;
            auto g = std::make_unique<cuda::GpuTrainer>(*gpu, *model, comm, oc, o.seed, o.gpu_allreduce);
            if (root && !g->allreduce_fallback_reason().empty())
                warn(g->allreduce_fallback_reason() + "; gradients are allreduced with " + g->allreduce_method());
            gpu_allreduce = g->allreduce_method();
            engine = std::move(g);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "%s\n", msg(e.what()).c_str());
            comm.abort(2);
        }
        if (!o.quiet)
            say(root, std::string("tula-train: device cuda, one GPU per rank, convolutions ") +
                          (o.precision == "bf16" ? "bf16 (TF32 where cuDNN's bf16 is slower) and fully connected "
                                                   "layers bf16, fp32 accumulation, weights, gradients, batch norm "
                                                   "and loss"
                                                 : o.no_tf32 ? "strict fp32" : "TF32 tensor cores") +
                          ", gradient allreduce " + gpu_allreduce);
    }
#endif
    std::vector<EpochResult> res;
    try {
        const std::function<void(const EpochResult&)> on_epoch = [&](const EpochResult& r) {
            bar.clear();
            if (metrics) {
                try {
                    metrics->epoch(r);
                } catch (const std::exception& e) {
                    metrics_failed(e);
                }
            }
            if (o.quiet) return;
            char line[256];
            std::snprintf(line, sizeof line,
                          "epoch %d/%d  loss %.4f  train-acc %.3f  test-acc %.3f  images/s %.0f  epoch-time %.2fs", r.epoch,
                          o.epochs, r.train_loss, r.train_accuracy, r.test_accuracy, r.images_per_second, r.seconds);
            std::string ln = line;
            if (o.noise_every > 0 || (o.local_steps > 0 && o.batch_test != "none")) ln += r.noise_scale > 0 ? "  noise-scale " + fmt("%.0f", r.noise_scale) : "  noise-scale n/a";
            if (o.optimizer != "sgd" || o.lr_scaling != "linear") ln += "  lr " + fmt("%.4g", r.lr);
            if (o.hessian_every > 0) ln += "  hessian-eig " + fmt("%.4g", r.hessian_eig);
            if (o.local_steps > 0) ln += "  batch " + std::to_string(r.batch);
            if (o.warmup_threshold > 0 && r.warmup_end >= 0 && r.warmup_end <= r.epoch * steps)
                ln += "  warmup-end-step " + std::to_string(r.warmup_end);
            say(root, ln);
        };
        if (o.local_steps > 0) {
            LocalSgdConfig lc;
            lc.local_steps = o.local_steps;
            lc.test = parse_batch_test(o.batch_test);
            lc.eta = o.batch_test_eta;
            lc.theta = o.batch_test_theta;
            lc.max_local_batch = o.max_batch / K;
            lc.max_growth = o.max_batch_growth;
            lc.local_ranks = local_ranks();
            lc.on_memory_cap = [&](int global_cap, double avail) {
                bar.clear();
                warn("the adaptive global batch is held at " + std::to_string(global_cap) +
                     " examples: a larger one would not fit in memory (" + fmt("%.2f", avail / (1 << 30)) +
                     " GiB left to this process: MemAvailable, or its control group's memory limit); the bound is"
                     " measured again at each growth, so the batch grows further only as memory allows;"
                     " --max-batch-size sets a cap of your own");
            };
            res = train_local_sgd(*model, tr, te, cfg, lc, comm, on_epoch);
        } else {
            res = train(*model, tr, te, cfg, comm, on_epoch, &hooks, engine.get());
        }
    } catch (const TrainError& e) {  // decided on allreduced values: every rank is here
        bar.clear();
        if (root) std::fprintf(stderr, "%s\n", msg(e.what()).c_str());
        return 1;
    }
    if (hooks.stopped) {
        bar.clear();
        say(root, "tula-train: stopped by a signal after " + std::to_string(res.size()) +
                      " finished epochs; checkpoint written to " + hooks.checkpoint_path +
                      "; continue with --resume --checkpoint " + hooks.checkpoint_path);
        return 3;
    }
    double train_seconds = 0;
    for (const auto& r : res) train_seconds += r.seconds;
    const double acc = res.empty() ? 0.0 : res.back().test_accuracy;
    char done[256];
    std::snprintf(done, sizeof done, "tula-train: done: train_seconds=%.2f test_accuracy=%.4f global_batch=%d nodes=%d",
                  train_seconds, acc, o.batch, K);
    say(root, done);

    if (root && !o.no_db) {
        try {
            tula::RunRecord rec;
            const char* job = std::getenv("SLURM_JOB_ID");
            rec.job_id = job ? job : "";
            rec.workload = wl;
            rec.nodes = K;
            rec.global_batch = o.batch;
            rec.epochs = o.epochs;
            const char* p = std::getenv("TULA_PREDICTED_SECONDS");
            if (!p || !*p) p = std::getenv("SLURM_SPANK_TULA_PREDICTED_SECONDS");  // as sbatch's plugin passes it
            if (p && *p) {
                char* end = nullptr;
                const double v = std::strtod(p, &end);
                if (end && *end == '\0' && std::isfinite(v) && v >= 0) rec.predicted_seconds = v;
                else warn(std::string("ignoring TULA_PREDICTED_SECONDS='") + p + "' (not a number of seconds)");
            }
            rec.measured_seconds = train_seconds;
            rec.test_accuracy = acc;
            rec.created = static_cast<double>(std::time(nullptr));
            rec.train_examples = tr.count;  // examples per epoch: fewer than the workload's with --limit-train
            if (o.local_steps == 0) {  // Local SGD's batch test measures another quantity: not recorded
                rec.noise_scale = hooks.noise_scale;
                rec.noise_observations = hooks.noise_observations;
            }
            for (const auto& r : res) {
                rec.epoch_seconds.push_back(r.seconds);
                rec.epoch_train_loss.push_back(r.train_loss);
                rec.epoch_test_accuracy.push_back(r.test_accuracy);
            }
            tula::ProfileDb db = open_db(o);
            db.upsert_workload(workload_of(o, *model, tr.count, te.count));
            db.add_run(rec);
            if (!o.quiet)
                say(root, "tula-train: run recorded in " + db.path() +
                              (rec.noise_scale > 0 ? " (noise scale B_simple " + fmt("%.4g", rec.noise_scale) + " examples, " +
                                                         std::to_string(rec.noise_observations) + " observations)"
                                                   : std::string(" (no noise scale measured; see --noise-scale-every)")));
        } catch (const std::exception& e) {
            warn("the run was not recorded in the profile database: " + bare(e.what()));
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // Eigen allocates its GEMM packing buffers on every product; keep freed memory in the
    // heap (no mmap / munmap and page faults per call). glibc-specific, harmless elsewhere.
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    Comm comm(&argc, &argv);
    const bool root = comm.rank() == 0;
    int rc = 0;
    try {
        Options o;
        rc = parse_args(argc, argv, o, root);
        if (rc < 0) set_gemm_threads(o.threads);
        if (rc < 0) {
            if (o.list_models) rc = root ? list_models(o) : 0;
            else if (o.profile_compute) rc = profile_compute(o, comm);
            else if (o.profile_allreduce) rc = profile_allreduce(o, comm);
            else rc = run_training(o, comm);
        }
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "%s\n",
                     msg("rank " + std::to_string(comm.rank()) +
                         ": out of memory; use a smaller --batch-size (or --batch-sizes)")
                         .c_str());
        comm.abort(1);
    } catch (const std::exception& e) {
        // Unexpected and possibly on this rank only: end every rank so none waits forever.
        std::fprintf(stderr, "%s\n", msg(std::string("rank ") + std::to_string(comm.rank()) + ": " + e.what()).c_str());
        comm.abort(1);
    }
    std::fflush(stdout);
    comm.finalize();
    return rc;
}
