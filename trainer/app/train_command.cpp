// tula-train: the training command: the header line, the epochs, checkpoints, and the run record.
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
#include "tula/error.hpp"
#include "tula/workload.hpp"
#ifdef TULA_HAVE_CUDA
#include "gpu_train.hpp"
#endif

#include "app/app.hpp"

namespace tula {
namespace train {
namespace app {

namespace {

// The options that determine the loss trajectory, in a fixed order (stored in checkpoints;
// a checkpoint resumes only a run with the same configuration). The rank count is not in it.
RunConfig run_config(const Options& o, const TrainConfig& c) {
    RunConfig r = RunConfig::object();
    r["model"] = o.model;
    r["data"] = o.data;
    r["limit_train"] = o.limit_train;
    r["limit_test"] = o.limit_test;
    r["epochs"] = o.epochs;
    r["batch"] = o.batch;
    r["seed"] = o.seed;
    r["lr"] = o.lr;
    r["lr_base_batch"] = o.lr_base_batch;
    r["lr_max"] = o.lr_max;
    r["momentum"] = o.momentum;
    r["weight_decay"] = o.weight_decay;
    r["warmup_epochs"] = c.lr.warmup_epochs;
    r["schedule"] = o.schedule;
    if (o.schedule == "wsd") {
        if (o.decay_epochs > 0) r["decay_epochs"] = o.decay_epochs;
        else r["decay_fraction"] = o.decay_fraction;
    }
    r["optimizer"] = o.optimizer;
    r["lr_scaling"] = o.lr_scaling;
    r["eta_trust"] = o.eta_trust;
    r["s_min"] = o.s_min;
    r["s_max"] = o.s_max;
    r["ags_lambda"] = o.ags_lambda;
    r["noise_every"] = o.noise_every;
    if (o.ags_rate_rule != "linear") r["ags_rate_rule"] = o.ags_rate_rule;
    if (o.val_split > 0) r["val_split"] = o.val_split;
    if (o.target_accuracy > 0) r["target_accuracy"] = o.target_accuracy;
    r["warmup_threshold"] = o.warmup_threshold;
    r["augment"] = o.augment;
    return r;
}

// `config` (run_config) without the keys a branch may change: the run's length and its rate
// schedule after the branch point (epochs, schedule, decay_fraction, decay_epochs,
// target_accuracy).
RunConfig branch_invariant(RunConfig config) {
    for (const char* k : {"epochs", "schedule", "decay_fraction", "decay_epochs", "target_accuracy"}) config.erase(k);
    return config;
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

}  // namespace

// The training configuration of the options (rates, schedule, optimizer, noise scale,
// warmup, Hessian probe, buckets, augmentation); `val` the validation set (nullptr: none).
TrainConfig train_config(const Options& o, const Dataset& tr, const Dataset* val, bool root) {
    TrainConfig cfg;
    cfg.epochs = o.epochs;
    cfg.global_batch = o.batch;
    cfg.momentum = o.momentum;
    cfg.weight_decay = o.weight_decay;
    cfg.label_smoothing = static_cast<float>(o.label_smoothing);
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
    if (o.schedule == "wsd" && o.decay_epochs > 0)
        cfg.lr.decay_steps = std::max<int64_t>(1, std::llround(o.decay_epochs * static_cast<double>(train::epoch_steps(tr.count, o.batch))));
    cfg.lr.global_batch = o.batch;
    cfg.lr.scaling = o.lr_scaling == "sqrt"    ? LrScaling::Sqrt
                     : o.lr_scaling == "noise" ? (o.ags_rate_rule == "sqrt"    ? LrScaling::NoiseSqrt
                                                  : o.ags_rate_rule == "first" ? LrScaling::NoiseFirst
                                                                               : LrScaling::Noise)
                                               : LrScaling::Linear;
    cfg.target_accuracy = o.target_accuracy;
    cfg.val_set = val;
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
    return cfg;
}

// Where the checkpoint goes and whether this run resumes (--resume, a requeued job with a
// checkpoint, --branch-from): every rank reads the checkpoint (like the data, it must be on a
// file system all ranks see) and all agree on the verdict. Rank 0 removes the temporary files
// of the checkpoint path that a killed writer left. Sets hooks->checkpoint_path,
// save_epochs and resume (pointing at *ck). Returns 0, or 2 when the checkpoint cannot be
// used (the message printed).
int open_checkpoint(const Options& o, Comm& comm, TrainHooks* hooks, Checkpoint* ck, std::string* ck_path,
                    bool* resume, bool* branch) {
    const bool root = comm.rank() == 0;
    const int K = comm.size();
    // the GPU engine has no checkpoints yet: none by default there (explicit ones are refused)
    if (o.device != "cuda") hooks->checkpoint_path = checkpoint_path(o);
    struct stat sb;
    const bool ck_exists = !hooks->checkpoint_path.empty() && ::stat(hooks->checkpoint_path.c_str(), &sb) == 0;
    *branch = !o.branch_from.empty();
    *resume = *branch || o.resume || (requeued() && ck_exists);
    *ck_path = *branch ? o.branch_from : hooks->checkpoint_path;
    hooks->save_epochs = o.save_epochs;
    // a writer killed before its rename left a temporary file: the job keeps one checkpoint
    if (root && !hooks->checkpoint_path.empty()) remove_checkpoint_temporaries(hooks->checkpoint_path);
    if (*resume) {
        std::string err;
        try {
            *ck = read_checkpoint(*ck_path);
            const std::string differs = *branch ? config_difference(branch_invariant(hooks->config), branch_invariant(ck->config))
                                                : config_difference(hooks->config, ck->config);
            if (*branch && !differs.empty())
                err = *ck_path + " was saved by a run that differs in more than its schedule (" + differs +
                      "); branch with the saved run's options, changing only --epochs, --schedule, --decay-epochs, "
                      "--decay-fraction or --target-accuracy";
            else if (!differs.empty())
                err = *ck_path + " belongs to another run (" + differs +
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
        hooks->resume = ck;
        if (ck->ranks != K && root)
            warn("the checkpoint was written by " + std::to_string(ck->ranks) + " ranks, this run has " + std::to_string(K) +
                 ": the loss trajectory will differ from an uninterrupted run's");
    }
    return 0;
}

// The line that says what this run trains: workload, examples, batch, epochs, rates,
// schedule, kernels, optimizer, Local SGD, validation and target.
std::string run_summary(const Options& o, const TrainConfig& cfg, Model& m, const Dataset& tr, const Dataset& te,
                        const Dataset& val, int K, const std::string& wl) {
    const int64_t steps = train::epoch_steps(tr.count, o.batch);
    Model* model = &m;
    return "tula-train: " + wl + ": " + std::to_string(model->num_params()) + " parameters; " +
           std::to_string(tr.count) + " training / " + std::to_string(te.count) + " test examples; global batch " +
           std::to_string(o.batch) + " (" + o.batch_source + ") = " + std::to_string(K) + " rank" +
           (K > 1 ? "s" : "") + " x " + std::to_string(o.batch / K) + "; " + std::to_string(o.epochs) +
           " epochs" + (o.epochs_note.empty() ? "" : " (" + o.epochs_note + ")") + " of " +
           std::to_string(steps) + " steps; lr " + fmt("%g", cfg.lr.peak()) + " (" +
           (o.lr_scaling == "noise"
                ? std::string("the base rate for ") + std::to_string(o.lr_base_batch) +
                      " until the first noise-scale estimate, then the noise-scale rule" +
                      (o.ags_rate_rule == "sqrt"    ? " (its square root)"
                       : o.ags_rate_rule == "first" ? " (held at the first estimate)"
                                                    : "")
                : fmt("%g", o.lr) + (o.lr_scaling == "sqrt" ? " x sqrt(" : " x ") + std::to_string(o.batch) +
                      "/" + std::to_string(o.lr_base_batch) + (o.lr_scaling == "sqrt" ? ")" : "")) +
           (o.lr_max > 0 && cfg.lr.peak() >= o.lr_max ? ", capped by --lr-max" : "") +
           "), warmup " + fmt("%g", cfg.lr.warmup_epochs) + " epochs, " + o.schedule + " schedule" +
           (o.schedule != "wsd"     ? std::string()
            : o.decay_epochs > 0 ? fmt(" (linear decay over the last %g epochs)", o.decay_epochs)
                                 : fmt(" (linear decay over the last %g %%)", 100 * o.decay_fraction)) +
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
           (o.warmup_threshold > 0 ? ", warmup until the |g|^2 EMA changes <= " + fmt("%g", o.warmup_threshold) + " over 10 steps" : "") +
           (o.noise_every > 0 ? ", noise scale every " + std::to_string(o.noise_every) + " steps" : "") +
           (o.local_steps > 0
                ? "; Local SGD: " + std::to_string(o.local_steps) + " local steps per averaging round, batch test " +
                      o.batch_test +
                      (o.batch_test == "none"
                           ? std::string(" (fixed batch)")
                           : " (EMA weight " + fmt("%g", o.batch_test_beta) + ", growth " +
                                 (o.max_batch_growth > 0 ? fmt("at most x%g per round", o.max_batch_growth)
                                                         : std::string("unlimited")) +
                                 ")")
                : std::string()) +
           (o.val_split > 0 ? "; " + std::to_string(val.count) + " training examples held out for validation" : "") +
           (o.target_accuracy > 0 ? "; stops at the first epoch with test accuracy >= " + fmt("%g", o.target_accuracy)
                                  : "");
}

// Opens --metrics on rank 0 (appending when the run resumes); every rank agrees on the
// verdict. Returns false when it cannot be opened (the message printed on rank 0).
bool open_metrics(const Options& o, Comm& comm, bool resume, std::unique_ptr<MetricsLog>* metrics) {
    const bool root = comm.rank() == 0;
    std::string err;
    if (root && !o.metrics.empty()) {
        try {
            metrics->reset(new MetricsLog(o.metrics, resume));
        } catch (const std::exception& e) {
            err = e.what();
        }
    }
    double fail = err.empty() ? 0.0 : 1.0;
    comm.allreduce_sum(&fail, 1);
    if (fail > 0) {
        if (root) std::fprintf(stderr, "%s\n", msg(err + "; choose a writable path for --metrics").c_str());
        return false;
    }
    return true;
}

namespace {

// Checks the global batch against the ranks, loads the data sets on every rank and holds out
// the validation set (--val-split). False (message printed on rank 0) when the run cannot start.
bool load_training_data(const Options& o, Comm& comm, Dataset* tr, Dataset* te, Dataset* val) {
    const bool root = comm.rank() == 0;
    const int K = comm.size();
    if (o.batch % K != 0) {
        if (root)
            std::fprintf(stderr, "%s\n",
                         msg("global batch " + std::to_string(o.batch) + " (from " + o.batch_source +
                             ") is not divisible by the " + std::to_string(K) +
                             " ranks; choose a multiple of the rank count")
                             .c_str());
        return false;
    }
    if (!load_data(o, comm, *tr, *te)) return false;
    if (o.val_split > 0) {
        try {
            split_validation(*tr, o.val_split, *val);
        } catch (const DataError& e) {  // the same sizes on every rank: the same verdict
            if (root) std::fprintf(stderr, "%s\n", msg(std::string("--val-split: ") + e.what()).c_str());
            return false;
        }
    }
    if (tr->count < o.batch) {
        if (root)
            std::fprintf(stderr, "%s\n",
                         msg("the training set has " + std::to_string(tr->count) + " examples, fewer than the global batch " +
                             std::to_string(o.batch))
                             .c_str());
        return false;
    }
    return true;
}

// The epoch line: "epoch e/E  loss ...  epoch-time S" and the optional columns of the run's options.
std::string epoch_line(const Options& o, const EpochResult& r, int64_t steps) {
    char line[256];
    std::snprintf(line, sizeof line,
                  "epoch %d/%d  loss %.4f  train-acc %.3f  test-acc %.3f  images/s %.0f  epoch-time %.2fs", r.epoch,
                  o.epochs, r.train_loss, r.train_accuracy, r.test_accuracy, r.images_per_second, r.seconds);
    std::string ln = line;
    if (r.val_accuracy >= 0) ln += "  val-acc " + fmt("%.3f", r.val_accuracy);
    if (o.noise_every > 0 || (o.local_steps > 0 && o.batch_test != "none")) ln += r.noise_scale > 0 ? "  noise-scale " + fmt("%.0f", r.noise_scale) : "  noise-scale n/a";
    if (o.optimizer != "sgd" || o.lr_scaling != "linear") ln += "  lr " + fmt("%.4g", r.lr);
    if (o.hessian_every > 0) ln += "  hessian-eig " + fmt("%.4g", r.hessian_eig);
    if (o.local_steps > 0) ln += "  batch " + std::to_string(r.batch);
    if (o.warmup_threshold > 0 && r.warmup_end >= 0 && r.warmup_end <= r.epoch * steps)
        ln += "  warmup-end-step " + std::to_string(r.warmup_end);
    return ln;
}

// The lines after the last epoch (the target reached, the done line, the noise scale) and,
// on rank 0, the summary and the run's record (finish_file).
void end_training(const Options& o, Comm& comm, const nlohmann::json& header, const std::vector<EpochResult>& res,
                  const TrainHooks& hooks) {
    const bool root = comm.rank() == 0;
    double train_seconds = 0;
    for (const auto& r : res) train_seconds += r.seconds;
    const double acc = res.empty() ? 0.0 : res.back().test_accuracy;
    const bool at_target = !res.empty() && reached_target(acc, o.target_accuracy);
    if (at_target && res.size() < static_cast<size_t>(o.epochs) && !o.quiet)
        say(root, "tula-train: test accuracy " + fmt("%.4f", acc) + " reached the target " + fmt("%g", o.target_accuracy) +
                      " after epoch " + std::to_string(res.size()) + " of " + std::to_string(o.epochs) + "; stopping");
    char done[256];
    std::snprintf(done, sizeof done,
                  "tula-train: done: train_seconds=%.2f test_accuracy=%.4f global_batch=%d nodes=%d ranks=%d epochs=%d",
                  train_seconds, acc, o.batch, comm.nodes(), comm.size(), o.epochs);
    std::string done_line = done;
    if (o.val_split > 0 && !res.empty()) done_line += " val_accuracy=" + fmt("%.4f", res.back().val_accuracy);
    if (o.target_accuracy > 0)
        done_line += " epochs_trained=" + std::to_string(res.size()) + " stopped_at_target=" + (at_target ? "1" : "0");
    const size_t parts = run_part_seconds(res, hooks).size();
    if (parts > 1) done_line += " parts=" + std::to_string(parts);
    say(root, done_line);
    if (!root) return;
    if (!o.quiet && !o.no_db && o.local_steps == 0)
        say(root, hooks.noise_scale > 0 ? "tula-train: noise scale B_simple " + fmt("%.4g", hooks.noise_scale) + " examples (" +
                                              std::to_string(hooks.noise_observations) + " observations)"
                                        : std::string("tula-train: no noise scale measured (see --noise-scale-every)"));
    const nlohmann::json summary = run_summary_line(o, res, hooks, at_target);
    finish_file(o, o.summary, [&](MetricsLog& f) {
        f.write(header);
        for (const auto& r : res) f.epoch(r);
        f.write(summary);
    }, "run");
}

#ifdef TULA_HAVE_CUDA
// The GPU step engine of --device cuda (one GPU per rank, its context in *gpu), the line that
// says how it computes and allreduces; a rank that cannot open its GPU aborts the job (exit 2).
std::unique_ptr<StepEngine> open_gpu_engine(const Options& o, Comm& comm, const TrainConfig& cfg, Model& m,
                                            std::unique_ptr<cuda::GpuContext>* gpu_out) {
    const bool root = comm.rank() == 0;
    Model* model = &m;
    std::unique_ptr<cuda::GpuContext>& gpu = *gpu_out;
    std::unique_ptr<StepEngine> engine;
    std::string gpu_allreduce;
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
    return engine;
}
#endif

// Local SGD's settings from the options (--local-steps, --batch-test*, --max-batch-size and
// --max-batch-growth) for K ranks; on_memory_cap is left to the caller.
LocalSgdConfig local_sgd_config(const Options& o, int K) {
    LocalSgdConfig lc;
    lc.local_steps = o.local_steps;
    lc.test = parse_batch_test(o.batch_test);
    lc.eta = o.batch_test_eta;
    lc.theta = o.batch_test_theta;
    lc.test_beta = o.batch_test_beta;
    lc.max_local_batch = o.max_batch / K;
    lc.max_growth = o.max_batch_growth;
    lc.local_ranks = local_ranks();
    return lc;
}

// The run's placement for its header: nodes, ranks and (rank 0, warning when it cannot be
// read) the hardware class.
RunShape run_shape(Comm& comm) {
    RunShape shape;
    shape.nodes = comm.nodes();
    shape.ranks = comm.size();
    if (comm.rank() == 0) {
        std::string why;
        shape.hardware_class = tula::hardware_class_from_env(&why);
        if (!why.empty()) warn(why);
    }
    return shape;
}

}  // namespace

int run_training(const Options& o, Comm& comm) {
    const bool root = comm.rank() == 0;
    const int K = comm.size();
    Dataset tr, te, val;
    if (!load_training_data(o, comm, &tr, &te, &val)) return 2;
    auto model = build_model(o.model, input_of(o).shape, input_of(o).classes);
    model->init(o.seed);
    const std::string wl = tula::workload_name(o.model, data_name(o));

    const TrainConfig cfg = train_config(o, tr, o.val_split > 0 ? &val : nullptr, root);

    // Checkpoint and resume: every rank reads the checkpoint (like the data, it must be on a
    // file system all ranks see) and all agree on the verdict.
    TrainHooks hooks;
    hooks.config = run_config(o, cfg);
    Checkpoint ck;
    std::string ck_path;
    bool resume = false, branch = false;
    if (open_checkpoint(o, comm, &hooks, &ck, &ck_path, &resume, &branch) != 0) return 2;
    if (!hooks.checkpoint_path.empty()) install_stop_signals();
    watch_time_limit(o, root, model->num_params(), &hooks);

    // --metrics (rank 0), progress bar (rank 0, on a terminal)
    std::unique_ptr<MetricsLog> metrics;
    if (!open_metrics(o, comm, resume, &metrics)) return 2;
    auto metrics_failed = [&](const std::exception& e) {
        warn(std::string(e.what()) + "; no more metrics are logged");
        metrics.reset();
    };
    const RunShape shape = run_shape(comm);
    nlohmann::json header = run_header(o, shape, *model, tr, te);
    header["peak_lr"] = cfg.lr.peak();
    header["config_hash"] = config_hash(hooks.config);
    if (metrics) {
        try {
            nlohmann::json h = header;
            h["resumed"] = resume;
            h["resumed_at_step"] = resume ? ck.global_step : 0;
            metrics->write(h);
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
    if (resume) say(root && !o.quiet, std::string("tula-train: ") + (branch ? "branching" : "resuming") + " from " + ck_path + " at epoch " + std::to_string(ck.epoch) +
                                          ", step " + std::to_string(ck.step_in_epoch) + " of the epoch (" +
                                          std::to_string(ck.global_step) + " steps done)");

    const int64_t steps = train::epoch_steps(tr.count, o.batch);
    if (!o.quiet) say(root, run_summary(o, cfg, *model, tr, te, val, K, wl));
    measure_before_training(o, comm, *model, tr, te, resume);

    std::unique_ptr<StepEngine> engine;
#ifdef TULA_HAVE_CUDA
    std::unique_ptr<cuda::GpuContext> gpu;
    if (o.device == "cuda") engine = open_gpu_engine(o, comm, cfg, *model, &gpu);
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
            if (!o.quiet) say(root, epoch_line(o, r, steps));
        };
        if (o.local_steps > 0) {
            LocalSgdConfig lc = local_sgd_config(o, K);
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
        return finish_stopped(o, root, hooks, res.size());
    }
    end_training(o, comm, header, res, hooks);
    return 0;
}

}  // namespace app
}  // namespace train
}  // namespace tula
