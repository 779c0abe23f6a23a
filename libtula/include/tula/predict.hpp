// libtula: the one prediction of a job's training time. The planner's candidates, `tula
// predict`, `tula validate` (leave-one-out) and the check of finished runs all call it, so the
// accuracy Tula reports measures the code that plans jobs. Pure: no SQLite, no Slurm.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tula/class_exchange.hpp"
#include "tula/conf.hpp"
#include "tula/models.hpp"
#include "tula/planner.hpp"
#include "tula/records.hpp"
#include "tula/step_fit.hpp"
#include "tula/workload.hpp"

namespace tula {

class FitCache;

/// The corrections on the modelled step (docs/models.md, "Corrections"), each switchable for
/// the ablation of `tula validate --without`. Off means the fitted models are used without it:
///  - concurrency: ComputeModel::concurrency_at, the slowdown of ranks profiled at once (1);
///  - synced_step: the synchronized-step profile's factor (step_synced_ratios; none);
///  - run_fit: StepFit, the step model fitted to the finished runs of the class (none);
///  - calibration: TimeCalibration from finished runs, a factor by shape interpolated over the
///    local batch (1);
///  - class_scaling: per-hardware-class models and partitions predicted from another class by
///    published figures (every run and partition takes the pooled models, factor 1);
///  - class_runs: the exchange across nodes that the runs of the class's other workloads
///    measured, borrowed by the runs' StepFit (TimeModels::class_exchange; each fit its own).
struct Corrections {
    bool concurrency = true;
    bool synced_step = true;
    bool run_fit = true;
    /// Off by default: it raised the leave-one-out error of the recorded runs on both sets
    /// measured (docs/models.md, Corrections).
    bool calibration = false;
    bool class_scaling = true;
    /// Off by default: on bench/bench-traces --new-workload it lowered the V100 median and
    /// raised the RTX 2080 Ti one (docs/models.md, "Runs of other workloads on the class").
    bool class_runs = false;
    /// The defaults with the corrections of the comma list `with` switched on and those of
    /// `without` switched off (names: concurrency, synced-step, run-fit, calibration, class-scaling,
    /// class-runs;
    /// "" or "none": none). Errors: tula::Error naming a bad name, or one in both lists.
    static Corrections select(const std::string& with, const std::string& without);
    /// select("", list).
    static Corrections without(const std::string& list) { return select("", list); }
};

/// The time models of one workload fitted to its profiles and finished runs
/// (fit_time_models): per hardware class and pooled, with the overlap exponent and the time
/// calibration of the runs.
struct TimeModels {
    Workload workload;
    ComputeModel compute;                     ///< pooled over classes: seconds per iteration of one rank
    std::optional<AllreduceModel> allreduce;  ///< pooled, across nodes; nullopt: none (1 node only)
    std::string allreduce_error;              ///< why the allreduce fit failed ("" when it did not)
    std::map<std::string, ClassFit> classes;  ///< per hardware class (fit_classes)
    std::vector<PartitionTarget> targets;     ///< the Config's partitions (site_targets)
    OverlapModel overlap;                     ///< Pollux gamma of the multi-node runs (1 without)
    TimeCalibration calibration;              ///< factor of the runs on the modelled step (1 without)
    std::map<std::string, StepFit> step_fits; ///< the runs' step model per hardware class ("": none given)
    /// The exchange across nodes that other workloads' runs measured per class (class_exchange),
    /// borrowed by step_fits (borrowed_exchange_observations); not read from the profiles: the
    /// caller sets it (PlanData::class_exchange). Empty: each workload's fit is its own.
    std::vector<ClassExchange> class_exchange;
    Corrections corrections;
    /// Where fit_run_models takes the overlap and the StepFits from (FitCache); not owned;
    /// nullptr: each is fitted (OverlapModel::fit, StepFit::fit). Either way the fits are the same.
    FitCache* fit_cache = nullptr;
    /// The models that predict a run of hardware class `cls` ("" unknown): that class's
    /// fit when it has one, else the pooled models, with the class's within-node bandwidth
    /// (its fit, else tula.conf's intra_node_bandwidth of a partition of the class); its
    /// conf.hardware_class is `cls` ("" with class scaling off), whose StepFit it takes.
    PartitionTarget run_target(const std::string& cls) const;
};

/// Fits the run-independent part of TimeModels: compute and allreduce models pooled and per
/// hardware class of `cfg`'s partitions, and the partitions as targets. `allreduce` holds
/// every allreduce row (those of one node are the within-node profile). The corrections
/// switched off are stripped from the models. Warnings (failed class or allreduce fits) are
/// appended to `warnings` when given. Errors: tula::Error when the pooled compute model cannot
/// be fitted (ComputeModel::fit).
TimeModels fit_profile_models(const Config& cfg, const Workload& w, const std::vector<ComputeSample>& compute,
                              const std::vector<AllreduceSample>& allreduce, const Corrections& corrections,
                              std::vector<std::string>* warnings);

/// `m` with the overlap exponent (OverlapModel::fit on the multi-node runs), the time
/// calibration (TimeCalibration::fit on every usable run, oldest first) and the step model of
/// the runs (StepFit::fit per hardware class, "" for all when class scaling is off) fitted to
/// `runs`, each run's modelled step taken with its class's models (TimeModels::run_target).
/// Runs of other workloads are ignored; the exchange they measured enters each class's StepFit
/// through m.class_exchange (borrowed_exchange_observations, at the median local batch of the
/// workload's runs at each R) when the correction class_runs is on and there is an across-node
/// allreduce model. A failed overlap fit leaves gamma = 1 with a warning.
/// The overlap and the StepFits come from m.fit_cache when it is set (the same fits, refitted
/// only for observations not fitted before). Errors: none.
TimeModels fit_run_models(TimeModels m, const std::vector<RunRecord>& runs, std::vector<std::string>* warnings);

/// fit_run_models(fit_profile_models(...), runs, ...), the runs' fits through `fit_cache` when
/// given (TimeModels::fit_cache, kept in the result). Errors: as fit_profile_models.
TimeModels fit_time_models(const Config& cfg, const Workload& w, const std::vector<ComputeSample>& compute,
                           const std::vector<AllreduceSample>& allreduce, const std::vector<RunRecord>& runs,
                           const Corrections& corrections, std::vector<std::string>* warnings,
                           FitCache* fit_cache = nullptr);

/// A workload with finished runs but no compute profile, profiled by its runs
/// (docs/models.md, "A workload planned from its runs").
struct ProfileFromRuns {
    Workload workload;  ///< the known record, else from the runs: name, model, dataset and the
                        ///< largest train_examples; params 0 (the exchange is the runs' StepFit)
    std::vector<ComputeSample> compute;  ///< one per run at (nodes, ranks_per_node) below
    int runs = 0;            ///< usable runs of the workload
    int nodes = 0;           ///< K0: the fewest nodes any run had
    int ranks_per_node = 0;  ///< R0: the fewest ranks per node of the runs on K0 nodes
};

/// The compute samples of `name` made of its usable runs (usable_run) on K0 nodes x R0 ranks
/// per node: each gives local batch b = global_batch / (K0 R0) and seconds per iteration =
/// measured_seconds / (steps_per_epoch x epochs), as a sample of one rank alone of the run's
/// hardware class (its start-up left in: it is not known apart). The runs elsewhere teach the
/// step only through fit_run_models' StepFit. `known` is the workload's record when a database
/// has one. Errors: tula::NoProfileError (with what to run) when the workload has no usable run, its
/// runs record no examples per epoch (and `known` is empty), or those on K0 x R0 are at fewer
/// than 2 local batch sizes.
ProfileFromRuns profile_from_runs(const std::string& name, const std::optional<Workload>& known,
                                  const std::vector<RunRecord>& runs);

/// One step predicted: tau = factor x overlap(f x compute(b) x concurrency, allreduce), seconds
/// (OverlapModel::combine: Pollux's gamma, or the buckets hidden behind the backward pass).
struct StepPrediction {
    double compute_seconds = 0;  ///< f x compute(b) x concurrency(K, R, b), seconds
    double comm_seconds = 0;     ///< hierarchical allreduce of the gradient, seconds
    double time_factor = 1;      ///< step_time_factor (synchronized-step profile x calibration)
    double run_fit_seconds = 0;  ///< what the runs' StepFit added to the modelled step, seconds
    int run_fit_runs = 0;        ///< the runs behind that fit (0: none)
    bool synced_profile = false; ///< time_factor includes the synchronized-step profile
    double seconds = 0;          ///< StepFit::seconds of time_factor x overlap(compute, comm), seconds
    double exposed_comm_seconds = 0;  ///< seconds - time_factor x compute (and the runs' StepFit compute part): communication not hidden
    double lower = 0, upper = 0; ///< the prediction interval of `seconds` (upper x upper_factor)
    double startup_seconds = 0;  ///< f x ComputeModel::startup_seconds(b): once per run, seconds
    bool has_interval = false;   ///< the compute model gives an interval (residual dof or LOO)
};

/// A run (or candidate) predicted: E epochs of S steps plus the start-up, S = the workload's
/// steps_per_epoch(D, B) (floor(D / B) or ceil(D / B), by its LastBatch).
struct RunPrediction {
    StepPrediction step;
    double steps_per_epoch = 0;  ///< S, steps
    double seconds = 0;          ///< E x S x step.seconds + startup, seconds
    double lower = 0;            ///< E x S x step.lower + startup
    double upper = 0;            ///< E x S x step.upper + upper_factor x startup
};

/// A job predicted on K nodes: its training run, the evaluations after its epochs and what the
/// job costs, each computed once (Predictor::job) for the planner's candidates, `tula predict`
/// and the run checks. Runs record their training seconds without the evaluation, so `run` is
/// what a run's measured_seconds is compared with, and the job's seconds, node-hours and cost
/// hold both.
struct JobPrediction {
    RunPrediction run;              ///< training: E x S steps + start-up, seconds
    int nodes = 1;                  ///< K
    int epochs = 0;                 ///< E
    double evaluation_seconds = 0;  ///< E x Predictor::evaluation_seconds(K, R), seconds
    double seconds = 0;             ///< run.seconds + evaluation_seconds: the job, seconds
    double upper = 0;               ///< run.upper + evaluation_seconds, seconds
    double node_hours = 0;          ///< K x seconds / 3600, node-hours
    double gpu_hours = 0;           ///< node_hours x gpus_per_node (0 on a CPU partition)
    double energy_kwh = 0;          ///< node_hours x watts_per_node / 1000, kWh (0: watts unknown)
    double cost = 0;                ///< node_hours x PartitionConf::node_hour_price()
    double cost_upper = 0;          ///< K x upper / 3600 x node_hour_price()
    /// What the job pays outside its steps (start-up and evaluation) spread over its E x S
    /// steps, seconds per step (0 without steps).
    double overhead_step_seconds() const {
        const double steps = epochs * run.steps_per_epoch;
        return steps > 0 ? (run.step.startup_seconds + evaluation_seconds) / steps : 0.0;
    }
};

/// The prediction of steps and runs on one partition (its target and the time models), with
/// the Student-t quantiles of the compute interval computed once. Scavenger (Tyagi & Sharma
/// 2023) eq. 1-2, the overlap of Pollux (Qiao et al. 2021, eq. 5) and the hierarchical
/// allreduce (docs/models.md).
class Predictor {
public:
    /// `level`: of the prediction intervals, in (0, 1). Errors: none.
    /// The runs' step model is the target class's (find_step_fit on models.step_fits).
    Predictor(const TimeModels& models, const PartitionTarget& target, double level = 0.95)
        : Predictor(target, models.workload, models.overlap, models.calibration, level) {
        set_step_fit(find_step_fit(models.step_fits, target.conf.hardware_class));
    }
    /// The same from the parts: `w` gives the gradient bytes (4 x params) and the examples.
    Predictor(const PartitionTarget& target, const Workload& w, const OverlapModel& overlap,
              const TimeCalibration& calibration, double level = 0.95);
    /// The step model of the runs on this target's class (nullptr: none, the modelled step).
    void set_step_fit(const StepFit* fit) { fit_ = fit ? *fit : StepFit{}; }
    /// The hierarchical allreduce of one step's gradient on K nodes of R ranks, whole and in
    /// the overlap's buckets (bucketed_allreduce; 0 seconds on 1 rank).
    GradientAllreduce gradient_allreduce(int nodes, int ranks_per_node) const;
    /// One step of K nodes x R ranks at local batch b (examples per rank), with the allreduce
    /// given (gradient_allreduce(K, R), which the planner computes once per K).
    StepPrediction step(int nodes, int ranks_per_node, double local_batch, const GradientAllreduce& comm) const;
    StepPrediction step(int nodes, int ranks_per_node, double local_batch) const {
        return step(nodes, ranks_per_node, local_batch, gradient_allreduce(nodes, ranks_per_node));
    }
    /// E epochs of steps_per_epoch(D, B) steps at global batch B on K nodes x R ranks (B / (K R)
    /// examples per rank), D = examples_per_epoch. Errors: tula::Error when B < K R or D < B.
    RunPrediction run(int nodes, int ranks_per_node, int global_batch, int epochs, double examples_per_epoch) const;
    /// run() for a recorded run: its nodes, ranks, epochs and examples per epoch (the
    /// workload's unless it trained on fewer), at its mean local batch B / (K R); without a
    /// start-up when its job measured its own step first (ComputeModel::measured_jobs).
    RunPrediction run(const RunRecord& r) const;
    /// The job of run(K, R, B, E, D): that training, E evaluations on K x R ranks, and the
    /// job's node-hours and cost on this partition. Errors: those of run().
    JobPrediction job(int nodes, int ranks_per_node, int global_batch, int epochs, double examples_per_epoch) const;
    /// The job of a recorded run (run(r)), with its evaluations. Errors: none.
    JobPrediction job(const RunRecord& r) const;
    /// The job of `step` (at K nodes) for E epochs of S steps, with the evaluation of one
    /// epoch given (evaluation_seconds(K, R), which the planner computes once per K). Pure.
    JobPrediction job(const StepPrediction& step, int nodes, double steps_per_epoch, int epochs,
                      double evaluation_per_epoch) const;
    /// Seconds of the evaluation that follows each epoch, on K nodes x R ranks of d =
    /// devices_per_rank devices, for each evaluated set of T examples (the test set, then the
    /// validation split; set_evaluated_examples): each device runs the forward pass over its
    /// shard of at most ceil(T / (K R d)) examples, so a rank over n = d ceil(T / (K R d)), in
    /// batches of b = min(d eval_batch, n, the compute model's largest profiled local batch
    /// when it has one), and a forward pass takes the share 1 - backward_fraction of a training
    /// step at that batch (Kaplan et al. 2020, sec. 2.1: 2N of the 6N FLOPs per example;
    /// docs/models.md, "Evaluation of the test set"):
    ///   sum over the sets of ceil(n / b) x (1 - backward_fraction) x f x compute(b) x concurrency(K, R, b).
    /// 0 without examples to evaluate. Not part of RunPrediction::seconds: runs record their
    /// training seconds without it. Errors: none.
    double evaluation_seconds(int nodes, int ranks_per_node) const;
    /// The examples evaluated after each epoch: `test` of the test set and `validation` held
    /// out of the training set (EpochExamples::tested and held_out); negative counts as 0. By
    /// default the workload's test set and no validation split.
    void set_evaluated_examples(int64_t test, int64_t validation) {
        test_examples_ = static_cast<double>(std::max<int64_t>(0, test));
        validation_examples_ = static_cast<double>(std::max<int64_t>(0, validation));
    }
    /// Steps in one epoch of D examples at global batch B, by the workload's LastBatch
    /// (tula::steps_per_epoch). Errors: none.
    double steps_per_epoch(double examples_per_epoch, double global_batch) const {
        return tula::steps_per_epoch(examples_per_epoch, global_batch, last_batch_);
    }
    const PartitionTarget& target() const { return target_; }
    const SyncedRatios& synced() const { return synced_; }
    /// The level of the prediction intervals, in (0, 1).
    double level() const { return level_; }

private:
    RunPrediction assemble(const StepPrediction& step, double steps_per_epoch, int epochs) const;
    /// The job of the training run `r` (E epochs) on K nodes with `evaluation_per_epoch` seconds
    /// after each epoch: node-hours, GPU-hours, energy and cost on this partition.
    JobPrediction job_of(const RunPrediction& r, int nodes, int epochs, double evaluation_per_epoch) const;
    PartitionTarget target_;
    OverlapModel overlap_;
    TimeCalibration calibration_;
    StepFit fit_;  // runs == 0: none
    double z_ = 0; // standard normal quantile of the interval level
    SyncedRatios synced_;
    double grad_bytes_ = 0;
    double examples_ = 0;  // the workload's training examples per epoch
    double test_examples_ = 0;        // test examples evaluated after each epoch
    double validation_examples_ = 0;  // validation examples evaluated after each epoch
    double evaluation_pass_seconds(double examples, int K, int R) const;  // one set's evaluation
    int eval_batch_ = kTrainerEvalBatch;  // the workload's examples per rank in one evaluation pass
    LastBatch last_batch_ = LastBatch::Drop;  // the workload's: how its epochs count steps
    double level_ = 0.95;
    double sigma_q_ = 0;  // Student-t quantile x residual standard error (parametric form)
    double rel_q_ = 0;    // Student-t quantile x RMS leave-one-out error (interpolated form)
    double fixed_seconds_ = 0;  // compute.t0: the part of a step that is not per example (no backward pass in it)
};

}  // namespace tula
