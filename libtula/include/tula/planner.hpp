// libtula: the planner. Enumerates (nodes, global batch) candidates, predicts time and
// cost for each, finds the Pareto front and picks one by policy.
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
#include "tula/records.hpp"
#include "tula/step_fit.hpp"
#include "tula/stop.hpp"
#include "tula/workload.hpp"

namespace tula {

class FitCache;

/// How the planner picks from the Pareto front.
enum class Policy {
    Auto,  ///< knee point of the time/cost front (Kneedle, Satopaa et al. 2011)
    Time,  ///< smallest predicted time
    Cost,  ///< smallest predicted cost
    Deadline,  ///< cheapest whose predicted upper bound of time meets a deadline
    Budget,    ///< fastest whose predicted upper bound of cost stays within a budget
};

/// A policy with its argument, and how the epochs of a candidate are chosen.
struct PolicySpec {
    Policy policy = Policy::Auto;
    double deadline_seconds = 0;  ///< Deadline: wall-clock seconds of training allowed
    double budget = 0;            ///< Budget: currency units (same unit as price_per_node_hour)
    /// The global batch at which the requested epochs define the quality target (the batch
    /// script's --batch-size, else tula-train's default, kTrainerDefaultBatch); 0: the
    /// smallest global batch of the request. See PlanRequest::reference_batch.
    int reference_batch = 0;
    /// Every candidate trains the requested epochs instead of its epochs to target (sbatch
    /// --tula-epochs=fixed, tula plan --fixed-epochs); tula.conf's fixed_epochs also fixes them.
    bool fixed_epochs = false;
    /// The target test accuracy (fraction in (0, 1]; tula plan --target-accuracy): with a run
    /// history, each candidate's epochs to target come from B_crit and E_min fitted to the
    /// runs' first epochs reaching it (convergence_from_history); 0: the requested epochs at
    /// reference_batch define the target.
    double target_accuracy = 0;
    /// The optimizer the job trains with (the script's tula-train --optimizer or directive
    /// optimizer=, TrainCommand::optimizer): the B_crit fit uses the runs of this optimizer.
    /// "" or "auto": the optimizer whose runs cover the most batches (convergence_from_history).
    std::string optimizer;
};

/// Parses "auto" | "time" | "cost" | "deadline=HH:MM:SS" (also MM:SS, or D-HH:MM:SS) |
/// "budget=X" (X a finite number > 0). Errors: tula::Error naming the bad value and listing
/// the valid forms.
PolicySpec parse_policy_spec(const std::string& s);
const char* policy_name(Policy p);

/// One (partition, nodes, ranks per node, global batch) configuration and its predictions.
struct Candidate {
    /// Slurm partition (PartitionConf::name; "" for the implicit partition of a file
    /// without sections, where no partition is requested).
    std::string partition;
    int nodes = 0;
    int ranks_per_node = 1;       ///< training processes (Slurm tasks) per node
    int gpus_per_node = 0;        ///< GPUs of each node (0: a CPU partition)
    /// The job asks for whole nodes (sbatch --exclusive; PartitionConf::exclusive): its
    /// prediction assumes nodes no other job shares.
    bool exclusive = false;
    int global_batch = 0;         ///< examples per step over all ranks
    int local_batch = 0;          ///< examples per rank per step: global_batch / (nodes * ranks_per_node)
    /// The hardware class whose profiles predicted a partition without its own, scaled by the
    /// classes' published figures (PartitionTarget); "" when predicted from its own class.
    std::string scaled_from;
    bool own_profile = true;  ///< PartitionTarget::own_profile of its partition
    /// Bytes/s between the ranks of a node that the within-node part of the allreduce took
    /// (PartitionTarget::intra_node_bandwidth; 0: not modelled) and where it came from: "fit"
    /// (the class's within-node allreduce profile, IntraNodeModel), "tula.conf" (the
    /// partition's intra_node_bandwidth) or "none".
    double intra_node_bandwidth = 0;
    std::string intra_node_source = "none";
    /// Expected wait in Slurm's queue before the job starts, seconds (slurmctld's will-run
    /// estimate, apply_queue_starts); 0 when not asked. time_to_target includes it.
    double queue_wait_seconds = 0;
    /// The start in a backfill hole at the job's --time-min and the requeued rest
    /// (hole_time_to_result, apply_queue_starts); hole.used false: none, or not earlier. When
    /// used, time_to_target is hole.time_to_result.
    HoleStart hole;
    double iter_seconds = 0;      ///< time_factor x overlap(compute(local batch), allreduce), seconds; the
                                  ///< allreduce of the gradient bytes is hierarchical
                                  ///< (hierarchical_allreduce_seconds: within the node, then across nodes)
    /// Dimensionless factor on the modelled step (step_time_factor): on more than one rank,
    /// when the profile has one for the candidate's shape (SyncedRatios::serving: its own
    /// ranks per node first), the synchronized-step profile's ComputeModel::synced_factor_at
    /// (synced_profile true), times the run history's TimeCalibration residual once runs of
    /// its kind are in it; otherwise the TimeCalibration factor.
    double time_factor = 1.0;
    bool synced_profile = false;  ///< time_factor includes the synchronized-step profile's factor
    /// What the runs' step model of the partition's class added to the modelled step (seconds
    /// per step, StepPrediction::run_fit_seconds) and the finished runs behind it (0: none).
    double run_fit_seconds = 0;
    int run_fit_runs = 0;
    /// Where a step's time goes, seconds per step: compute (time_factor x compute(local batch),
    /// StepPrediction::compute_seconds scaled), the allreduce not hidden behind it
    /// (StepPrediction::exposed_comm_seconds), and what the job pays outside the steps
    /// (startup_seconds + evaluation_seconds) spread over the run's epochs x steps_per_epoch(D, B)
    /// steps. compute + exposed = iter_seconds.
    double compute_step_seconds = 0;
    double exposed_comm_step_seconds = 0;
    double overhead_step_seconds = 0;
    double epoch_seconds = 0;     ///< steps_per_epoch(D, global_batch) * iter_seconds, D =
                                  ///< PlanRequest::examples_per_epoch(), steps counted by the
                                  ///< workload's LastBatch (tula-train: floor), seconds
    double startup_seconds = 0;   ///< a fresh process's warm-up steps beyond steady ones, paid once per
                                  ///< run (ComputeModel::startup_seconds at the local batch; 0 unprofiled)
    /// The evaluations of the test set after each of the run's epochs, seconds: epochs x
    /// Predictor::evaluation_seconds(nodes, ranks_per_node). Not in total_seconds (runs record
    /// their training seconds without it); in job_seconds, so the cost, the time to result, the
    /// time limit and --time-min hold it.
    double evaluation_seconds = 0;
    /// Whole epochs the job trains: ceil(epochs_to_target) (at least 1), or the request's epochs
    /// when they are fixed (PlanRequest::fixed_epochs). The plan table hands them to the job
    /// (TULA_EPOCHS), and total_seconds, cost, the time limit and the policies all use them.
    int epochs = 0;
    double total_seconds = 0;     ///< epochs * epoch_seconds + startup_seconds (training only, no evaluation)
    /// The job's run, seconds: the training and the evaluations after its epochs,
    /// total_seconds + evaluation_seconds. node_hours, cost and time_to_target count it.
    double job_seconds() const { return total_seconds + evaluation_seconds; }
    /// job_seconds at the upper end of the training's interval: total_seconds_upper + evaluation_seconds.
    double job_seconds_upper() const { return total_seconds_upper + evaluation_seconds; }
    /// One epoch and the evaluation after it, seconds: epoch_seconds + evaluation_seconds / epochs
    /// (the least a part of a requeued job must hold, with the start-up; time_min_minutes).
    double epoch_with_evaluation_seconds() const {
        return epoch_seconds + (epochs > 0 ? evaluation_seconds / epochs : 0.0);
    }
    double node_hours = 0;        ///< nodes * job_seconds() / 3600
    double gpu_hours = 0;         ///< node_hours * gpus_per_node (0 on a CPU partition)
    double energy_kwh = 0;        ///< node_hours * watts_per_node / 1000, kWh (0: watts unknown)
    double cost = 0;              ///< node_hours * price_per_node_hour + gpu_hours * price_per_gpu_hour
    bool pareto = false;          ///< on the time/cost Pareto front
    double total_seconds_upper = 0;  ///< upper end of the 95 % prediction interval of total_seconds
    /// The S of --signal=USR1@S, seconds before the time limit (signal_seconds, tula/stop.hpp,
    /// of the upper step time and the workload's checkpoint); 0: not computed.
    int signal_seconds = 0;
    double cost_upper = 0;        ///< cost at job_seconds_upper()
    /// Epochs this global batch needs to reach what the request's epochs reach at its
    /// reference batch (PlanRequest::reference_batch): E(B) = E_ref (1 + B/B_noise) /
    /// (1 + B_ref/B_noise) (ConvergenceModel, McCandlish et al. 2018 eq. 2.11); with a target
    /// accuracy and E_min from the run history, E_min (1 + B/B_crit); fractional.
    double epochs_to_target = 0;
    /// epochs_to_target at the ends of B_noise's confidence interval (ConvergenceModel):
    /// low at noise_scale_high, high at noise_scale_low; both equal epochs_to_target when
    /// B_noise has no interval (tula.conf, a hardware file, fewer than 2 measured runs)
    double epochs_to_target_low = 0, epochs_to_target_high = 0;
    double time_to_target = 0;    ///< job_seconds(): the time of the epochs the job trains and their
                                  ///< evaluations, what the policies rank by, seconds
    double cost_to_target = 0;    ///< cost: of the epochs the job trains, what the policies rank by
    double expected_accuracy = 0; ///< test accuracy from the run history (AccuracyModel), NaN when none
    double memory_bytes = 0;      ///< predicted peak bytes per rank (MemoryModel), 0 when not modelled
};

/// Everything the planner needs. Build it with make_plan_request().
struct PlanRequest {
    Workload workload;
    /// Epochs that define the quality target: the test accuracy they reach at reference_batch.
    int epochs = 0;
    /// The global batch at which `epochs` define the target (the batch script's own batch);
    /// 0: the smallest of global_batches.
    int reference_batch = 0;
    /// Every candidate trains `epochs` (ranked under the accuracy bound) instead of its
    /// epochs to target.
    bool fixed_epochs = false;
    /// The examples of the job's epochs (the batch script's tula-train --limit-train,
    /// --limit-test and --val-split, TrainCommand::epoch_examples); zeros: the workload's sets.
    EpochExamples examples;
    /// The training examples per epoch the prediction uses: EpochExamples::trained (the
    /// limited training set less the validation split). Pure.
    int64_t examples_per_epoch() const { return examples.trained(workload); }
    int min_nodes = 1;
    int max_nodes = 1;
    std::vector<int> global_batches;
    double price_per_node_hour = 1.0;  ///< currency units per node-hour
    int gpus_per_node = 0;             ///< GPUs per node (tula.conf gpus_per_node)
    bool exclusive = false;            ///< whole nodes for the implicit partition (tula.conf exclusive)
    double price_per_gpu_hour = 0;     ///< currency units per GPU-hour, on top of the node price
    double watts_per_node = 0;         ///< watts of one busy node; 0: no energy figure
    /// tula::node_hour_price of the request's prices (currency units per node-hour).
    double node_hour_price() const { return tula::node_hour_price(price_per_node_hour, gpus_per_node, price_per_gpu_hour); }
    double time_margin = 0.25;    ///< fraction
    double time_overhead = 120;   ///< seconds
    Policy policy = Policy::Auto;
    double deadline_seconds = 0;  ///< Policy::Deadline
    double budget = 0;            ///< Policy::Budget
    double device_memory_bytes = 0;     ///< per-rank device memory, bytes; 0 = no limit
    std::optional<MemoryModel> memory;  ///< when set with device_memory_bytes, bounds the local batch
    OverlapModel overlap;               ///< Pollux gamma (default 1: no overlap)
    TimeCalibration calibration;        ///< factor on seconds per iteration from finished runs (default 1)
    std::map<std::string, StepFit> step_fits;  ///< the runs' step model per hardware class (none by default)
    ConvergenceModel convergence;
    AccuracyModel accuracy;
    /// Candidates whose expected accuracy (`accuracy`, when known) is more than this below
    /// the best candidate's are dropped (fraction; 1 = keep all).
    double max_accuracy_loss = 0.01;
    double interval_level = 0.95;       ///< of the prediction intervals
};

/// One partition as the planner plans it: its description and the models of its nodes.
/// make_site_plan enumerates nodes 1..conf.nodes (within the request's node range) with
/// conf.ranks_per_node ranks each.
struct PartitionTarget {
    PartitionConf conf;        ///< name, nodes (the most planned), ranks and GPUs per node, prices, watts
    ComputeModel compute;      ///< seconds per iteration of one rank at a local batch (of `scaled_from` when set)
    /// Across-node allreduce (one message of the gradient per node); nullopt: 1 node only.
    std::optional<AllreduceModel> allreduce;
    /// Where `allreduce` comes from when the class has no across-node sample of its own
    /// (ClassFit::allreduce_from, a published figure); "" for a fit of measured rows. The
    /// upper end of the step's interval takes the step's gradient exchange (within and across
    /// nodes) kScaledIntervalFactor times.
    std::string allreduce_from;
    /// Factor on the compute seconds of `compute` (1: the partition's own class);
    /// scaled_compute_factor when it was predicted from another class.
    double compute_factor = 1.0;
    /// Devices one rank of `compute` drives: a hardware file's node of gpus_per_node devices
    /// (its SimulatedModels time the node's batch), else 1 (a tula-train rank, one device).
    int devices_per_rank = 1;
    /// Factor on the upper end of the time interval beyond the model's own (1: none); a
    /// partition predicted from another class gets kScaledIntervalFactor.
    double upper_factor = 1.0;
    std::string scaled_from;   ///< the class whose profiles `compute` and `allreduce` are; "" its own
    /// False when the partition's class (named, conf.hardware_class) has no compute profile of
    /// its own: its step is another class's scaled (scaled_from) or the rows of unknown class.
    /// A job planned there measures its step (TULA_PROFILE, tula-jobs(7)).
    bool own_profile = true;
    /// Within-node bandwidth fitted from the partition's own class's within-node allreduce
    /// profile; nullopt: tula.conf's intra_node_bandwidth (conf) is the fallback.
    std::optional<IntraNodeModel> intra;
    /// Bytes/s between the ranks of one node: the fitted `intra`, else conf.intra_node_bandwidth
    /// (0: the within-node part of the allreduce is not modelled). Pure.
    double intra_node_bandwidth() const { return intra ? intra->bandwidth : conf.intra_node_bandwidth; }
    /// "fit", "tula.conf" or "none": where intra_node_bandwidth() comes from. Pure.
    const char* intra_node_source() const {
        return intra ? "fit" : conf.intra_node_bandwidth > 0 ? "tula.conf" : "none";
    }
    /// Memory of one rank and its model, when they differ from the request's (the partitions
    /// of a hardware file): bytes (0: PlanRequest::device_memory_bytes) and MemoryModel
    /// (nullopt: PlanRequest::memory).
    double device_memory_bytes = 0;
    std::optional<MemoryModel> memory;
    /// Non-empty: the partition cannot be predicted (no profile of its class and no figures to
    /// scale from); make_site_plan puts "NAME: left_out" in Plan::left_out and plans the others.
    std::string left_out;
};

/// The partitions of `cfg` (Config::site_partitions) as planner targets when the profiles carry
/// no hardware class: `compute` and `allreduce` are taken as the profiles of the first
/// partition's class (and of the implicit partition's). A partition of another class is
/// predicted from them scaled by the classes' published figures (scaled_compute_factor,
/// scaled_allreduce, upper_factor kScaledIntervalFactor, scaled_from set), or, when tula.conf
/// lacks the figures, gets `left_out` with the reason. Pure.
std::vector<PartitionTarget> site_targets(const Config& cfg, const ComputeModel& compute, const AllreduceModel* allreduce);

/// The models fitted to the profiles of one hardware class (fit_classes).
struct ClassFit {
    ComputeModel compute;                     ///< seconds per iteration of one rank
    std::optional<AllreduceModel> allreduce;  ///< across nodes; nullopt: no usable allreduce profile
    /// "" when `allreduce` is fitted to the class's rows; else where it comes from (tula.conf's
    /// figures, allreduce_from_figures), as the plan's warning words it.
    std::string allreduce_from;
    /// Within-node bandwidth from the class's samples of one node (IntraNodeModel); nullopt:
    /// none, or too few to fit (tula.conf's intra_node_bandwidth is used then).
    std::optional<IntraNodeModel> intra;
    /// true: fitted from rows of this class (or, for a database without classes, from all rows
    /// as the first partition's class); false: from the unknown-class rows, its fallback.
    bool own = true;
};

/// Fits the compute and allreduce models of every hardware class of `cfg`'s partitions from
/// the profile rows of one workload (`compute`) and all allreduce rows. A class's rows are
/// those recorded with its name; a class with no compute row of its own takes the rows of
/// unknown class "" (own = false), and likewise for allreduce. When no compute row has a
/// class (a database written before schema version 8), every row, allreduce rows included, is
/// the first partition's class's and the other classes have none (site_targets then scales
/// them from it), as before classes were recorded. The implicit partition (class "") takes every
/// row. A class with no rows, or whose compute fit fails, is absent from the result (its
/// compute fit's error is appended to `warnings`, when given, naming the class); a failed
/// allreduce fit leaves `allreduce` empty with a warning. The allreduce rows of one node
/// (nodes = 1, several ranks) are the within-node profile: `intra` is fitted from them
/// (IntraNodeModel::fit; a failed fit leaves it empty with a warning). A class none of whose
/// rows is an across-node sample takes its allreduce from tula.conf's figures
/// (allreduce_from_figures; `allreduce_from` and a warning say which), or none without them.
/// Keys: class names. Errors: none.
std::map<std::string, ClassFit> fit_classes(const Config& cfg, const std::vector<ComputeSample>& compute,
                                            const std::vector<AllreduceSample>& allreduce,
                                            std::vector<std::string>* warnings);

/// The partitions of `cfg` as planner targets from per-class models (fit_classes): a partition
/// whose class is in `fits` is planned from that class's models (its within-node bandwidth
/// too: PartitionTarget::intra); one whose class is not is
/// predicted from the first partition (in tula.conf's order) whose class has rows of its own,
/// scaled by the published figures as in the form above, or gets `left_out` with the reason
/// (no profiled class, or no figures for both). Pure.
std::vector<PartitionTarget> site_targets(const Config& cfg, const std::map<std::string, ClassFit>& fits);

/// The across-node allreduce of a class without an across-node sample of its own (partition
/// `to`, the class's first in tula.conf) from tula.conf's published figures: the allreduce
/// fitted to the rows of another class (`fits`, those with an empty allreduce_from, in the
/// order of `parts`) scaled by the link_bandwidth ratio (scaled_allreduce: beta x
/// from.link_bandwidth / to.link_bandwidth, its alpha kept), else the ring at `to`'s own figure,
/// alpha = 0 and beta = 1 / link_bandwidth seconds per byte (Thakur, Rabenseifner & Gropp 2005,
/// sec. 4.5; the bandwidth term only, as a hardware file without network.latency). nullopt
/// when `to` gives no link_bandwidth. `from` (when given) is set to the source in words.
/// docs/models.md, "An allreduce from the published figures". Pure; errors: none.
std::optional<AllreduceModel> allreduce_from_figures(const std::vector<PartitionConf>& parts,
                                                     const std::map<std::string, ClassFit>& fits,
                                                     const PartitionConf& to, std::string* from);

/// Why a partition is planned on one node only, and what to do: no allreduce profile across
/// nodes, no multi-node run of the workload and no link_bandwidth in tula.conf
/// (allreduce_from_figures). Ends a message that names what cannot be planned.
constexpr const char* kNoAllreduceProfile =
    "there is no allreduce profile; run `tula profile allreduce` or give the partition's link_bandwidth in tula.conf";

/// Widening of the time interval of a partition predicted from another class: its upper end
/// is multiplied by this (this project's rule: the published-figure ratio is a roofline bound,
/// Williams et al. 2009, not a measurement; a class's sustained fraction of its peak commonly
/// differs by tens of percent between generations).
constexpr double kScaledIntervalFactor = 1.5;

/// Factor by which compute seconds of class `from` become those of class `to`, from their
/// published figures (Roofline, Williams, Waterman & Patterson 2009, CACM 52(4)): the
/// attainable rate of a kernel lies between the compute-bound ratio P_from / P_to (peak
/// FLOP/s) and the memory-bound ratio M_from / M_to (memory bandwidth), so the factor is
/// their geometric mean, or the one ratio both classes give. Errors: tula::Error naming the
/// missing figure when neither peak_flops nor memory_bandwidth is given for both.
double scaled_compute_factor(const PartitionConf& from, const PartitionConf& to);

/// `a` with its bandwidth term for the link of `to` instead of `from`: beta x L_from / L_to
/// (link_bandwidth, bytes/s), alpha kept, per-node-count measurements dropped (they are of
/// `from`'s network). Unchanged when either link is not given. Pure.
AllreduceModel scaled_allreduce(const AllreduceModel& a, const PartitionConf& from, const PartitionConf& to);

/// The planner's answer.
struct Plan {
    /// All feasible candidates, sorted by (partition in site order, nodes, global_batch).
    std::vector<Candidate> candidates;
    /// Partitions that have no candidate, one line each: "NAME: why" (no profile of its class
    /// and no figures to scale from, nothing fits, ...).
    std::vector<std::string> left_out;
    size_t chosen = 0;                  ///< index into candidates
    std::string reason;                 ///< one line: why this candidate
    int time_limit_minutes = 0;         ///< ceil((total_upper*(1+margin) + overhead)/60), at least 1
    int max_local_batch = 0;            ///< largest local batch that fits device memory (0: no limit)
    double gamma = 1.0;                 ///< overlap exponent used
    double allreduce_bucket_bytes = 0;  ///< bytes per gradient bucket of the bucketed overlap (0: gamma's form)
    LastBatch last_batch = LastBatch::Drop;  ///< how the workload's epochs count steps (Workload::last_batch)
    TimeCalibration calibration;        ///< the factor applied to every iter_seconds, and its runs
    /// Feasible candidates left out because their expected accuracy (run history) is more
    /// than max_accuracy_loss below the best one's; 0 without run history.
    int accuracy_excluded = 0;
    double best_expected_accuracy = 0;  ///< the best candidate's expected accuracy (fraction), 0 when unknown
    /// Convergence model used for Candidate::epochs_to_target: B_noise (examples) and where it
    /// came from (measured in the run history, tula.conf, or the hardware file).
    ConvergenceModel convergence;
    int reference_batch = 0;            ///< B_ref of epochs_to_target (PlanRequest::reference_batch, resolved)
    bool fixed_epochs = false;          ///< every candidate trains the requested epochs (PlanRequest::fixed_epochs)
    /// Training examples per epoch the prediction used (PlanRequest::examples_per_epoch()).
    int64_t train_examples = 0;
    /// Finished runs of the workload (the newest kCheckedRuns) whose measured training time
    /// lies outside the prediction interval of the models refitted without them
    /// (check_runs, validate.hpp); set by plan_workload. They are in the refit all the same.
    std::vector<RunCheck> flagged_runs;
    const Candidate& choice() const { return candidates.at(chosen); }
};

/// Indices of the candidates on the Pareto front of (time_to_target, cost_to_target), both
/// minimized, sorted by increasing time_to_target. Non-finite candidates are left out. Pure.
std::vector<size_t> pareto_front(const std::vector<Candidate>& c);

/// Kneedle knee point (Satopaa, Albrecht, Irwin & Raghavan 2011, "Finding a 'Kneedle'
/// in a Haystack", sec. II): points (x_i, y_i) sorted by x, y decreasing; both normalized
/// to [0, 1]; the knee is the point of largest difference (1 - y_n) - ... measured from the
/// line joining the ends. Returns the index into `x`. No knee (fewer than 3 points, or none
/// strictly below that line, as on a straight or concave front): the point of least x y when
/// all values are positive (the time/cost trade of elasticity 1), else the one nearest the
/// origin after normalization; ties go to the largest x (the cheaper end of a time/cost
/// front). Errors: tula::Error when x and y differ in size or are empty.
size_t knee_point(const std::vector<double>& x, const std::vector<double>& y);

/// The implicit partition of `req` (name "", nodes req.max_nodes, 1 rank per node, req's GPUs,
/// exclusivity, prices and watts) with `compute` and `allreduce` (null: 1 node only): the one
/// target of a plan from a hardware file without partitions. Pure.
PartitionTarget implicit_target(const PlanRequest& req, const ComputeModel& compute, const AllreduceModel* allreduce);

/// Predicts every feasible candidate of every partition and picks one by policy. Each
/// target's candidates (PartitionTarget) are enumerated with its own models, prices and ranks
/// per node, then filtered, ranked and chosen together. A candidate is feasible when
/// global_batch % nodes == 0, nodes is in [min_nodes, max_nodes] and the target's nodes, the
/// local batch fits device memory and, when the run history gives an accuracy model and every
/// candidate trains the requested epochs (PlanRequest::fixed_epochs), its expected accuracy is
/// at most max_accuracy_loss below the best candidate's (Plan::accuracy_excluded counts the
/// others; when the epochs follow the batch, the convergence model's extra epochs already pay
/// for the batch's accuracy, so the bound would count that loss twice); allreduce is 0 for 1
/// node, and a target without an allreduce model has 1-node candidates only. req's price,
/// gpus_per_node and watts_per_node are not used (each target's are). A target without a
/// feasible candidate goes to Plan::left_out with its reason. Errors: tula::Error when a
/// target's nodes, ranks, prices or watts are not finite and >= 0, the request is unusable
/// (epochs, examples, node range, prices, no allreduce model for more than 1 node), no
/// candidate is feasible (the message names the memory bound when that excluded them; with
/// several targets, each one's reason), or no candidate meets the deadline / budget (the
/// message gives the fastest / cheapest).
Plan make_site_plan(const PlanRequest& req, const std::vector<PartitionTarget>& targets);

/// The Slurm time limit of a candidate, minutes: ceil(((max(total_seconds, total_seconds_upper)
/// + evaluation_seconds) x (1 + margin) + overhead + A) / 60), at least 1, and at most `max_time_minutes` when that
/// is > 0 (the partition's MaxTime). A = signal_seconds + kSlurmSignalResolution (tula/stop.hpp)
/// when the candidate has signal_seconds, else 0: the stop signal comes after the predicted
/// end. Pure.
int candidate_time_limit(const Candidate& c, double margin, double overhead, int max_time_minutes);

/// The --time-min of a candidate, minutes: time_min_minutes (tula/stop.hpp) of its start-up,
/// one epoch with the evaluation after it (Candidate::epoch_with_evaluation_seconds) and its
/// signal_seconds, for a time limit of `time_limit_minutes`. Pure.
int candidate_time_min(const Candidate& c, int time_limit_minutes);

/// slurmctld's start estimates for one candidate, seconds from now.
struct QueueStart {
    double wait_seconds = 0;       ///< a job at the candidate's time limit
    /// A job at its --time-min, and the longest time limit (seconds) that still starts then;
    /// hole_seconds 0: no hole (time_min off, or no earlier start).
    double hole_wait_seconds = 0;
    double hole_seconds = 0;
    double part_seconds = 0;  ///< the time limit of each part, the candidate's --time-min (0: hole_seconds)
};

/// Ranks `plan` again by time to result, from slurmctld's expected starts (one QueueStart per
/// candidate, seconds from now; non-finite or negative values count as 0): each candidate's
/// time_to_target becomes wait_seconds + total_seconds, or, with hole_seconds > 0,
/// Candidate::hole = hole_time_to_result(hole_wait, hole_seconds, wait, total_seconds,
/// startup_seconds, signal_seconds, part_seconds) and its time to result when that is used
/// (earlier). The Pareto front and the policy's choice are made again (deadline: wait +
/// total_seconds_upper, the full-limit start, against the deadline); the reason follows the
/// new choice (the same choice keeps its reason, noting the time to result when some wait is
/// > 0) and ends with the hole's line (hole_phrase) when the choice has one; the time limit
/// (candidate_time_limit, clamped to the chosen partition's MaxTime in `partitions`, matched
/// by name) too. `policy` gives the policy and its deadline or budget. Errors: tula::Error
/// when `starts` has the wrong size, or no candidate meets the deadline or budget any more.
void apply_queue_starts(Plan* plan, const std::vector<QueueStart>& starts, const PolicySpec& policy,
                       const std::string& workload, double margin, double overhead,
                       const std::vector<PartitionConf>& partitions);

/// One line for a used hole: "starts in a backfill hole of 10m00s in 0.0s and trains 8m20s in 1
/// part, then the rest (15m30s, 2 parts) starts in 50m00s: result in 1h05m instead of 1h10m"
/// (when the hole finishes it: "starts in a backfill hole of H in W and finishes in it in N
/// parts: result in X instead of Y"). Pure.
std::string hole_phrase(const HoleStart& h);

/// Builds the request from the site config, the workload's profile and the job's limits.
/// `epochs` <= 0 means config.default_epochs; `max_nodes` <= 0 means config.max_nodes,
/// otherwise min(max_nodes, config.max_nodes).
PlanRequest make_plan_request(const Config& cfg, const Workload& w, int epochs, int max_nodes,
                              Policy policy);

/// How many of the newest finished runs plan_workload checks against their prediction interval.
constexpr size_t kCheckedRuns = 8;

/// What a plan of one workload is computed from: its row, its compute samples, every allreduce
/// sample and its finished runs (as load_profiles reads them from the databases).
struct PlanData {
    Workload workload;
    std::vector<ComputeSample> compute;
    std::vector<AllreduceSample> allreduce;
    std::vector<RunRecord> runs;
    /// The exchange across nodes that the runs of the other workloads measured, per class
    /// (class_exchange; TimeModels::class_exchange); empty unless load_plan_data was asked.
    std::vector<ClassExchange> class_exchange;
    /// Where the planner takes the fits of the runs from (TimeModels::fit_cache); not owned,
    /// not read from the databases; nullptr: each is fitted.
    FitCache* fit_cache = nullptr;
    /// > 0: the workload has no compute profile; `compute` is made of its runs
    /// (profile_from_runs), this many of them usable.
    int profile_runs = 0;
};

/// Reads the PlanData of `workload` from `db_paths` (load_profiles; database warnings are
/// appended to `warnings`). A workload without compute samples but with runs is profiled by
/// its runs (profile_from_runs), with a warning that says so; a class of its runs without an
/// across-node allreduce profile gets the exchange its multi-node runs measured as `allreduce`
/// samples (allreduce_from_runs), with a warning per class. Errors: tula::NoProfileError for
/// a workload no database profiles and whose runs cannot stand in ("run tula profile
/// compute"), when every database in `db_paths` that exists was read and one holds something;
/// tula::Error with the same message when a database was skipped (its warning says why) or none
/// holds anything.
/// With `class_exchange_runs`, also the runs of every other workload, as `class_exchange`
/// (Corrections::class_runs); else that is empty.
PlanData load_plan_data(const std::vector<std::string>& db_paths, const std::string& workload,
                        std::vector<std::string>* warnings, bool class_exchange_runs = false);

/// The planner, pure: fits the time models (fit_profile_models, fit_run_models), the accuracy
/// and convergence models from `data`, and plans once for each node count of `counts` (0: the
/// free choice over 1..max_nodes; K > 0: exactly K nodes, as plan_workload's fixed_nodes).
/// The newest kCheckedRuns runs are checked (check_runs) and the flagged ones listed in every
/// plan. Errors: as plan_workload.
std::vector<Plan> plan_node_counts(const Config& cfg, const PlanData& data, int epochs, int max_nodes,
                                   const std::vector<int>& counts, const PolicySpec& policy,
                                   std::vector<std::string>* warnings, const EpochExamples& examples = {});

/// The whole planning path from databases: load_plan_data, then plan_node_counts.
/// `fixed_nodes` > 0 restricts the plan to exactly that node count (used in the job, where
/// the node count is known); when the plan over every node count chooses that node count, the
/// restricted plan chooses the same candidate (the job trains with the global batch sbatch
/// announced), else the knee of that node count's candidates. Errors: tula::Error for an unknown workload ("run tula
/// profile"), too few profile points, or no feasible candidate; database warnings are
/// appended to `warnings`.
/// Besides the profiles it reads the run history of `workload` from every database
/// (tula-train's finished runs) to fit the overlap exponent gamma and the accuracy model, and
/// takes B_noise of the convergence model from the runs' measured noise scale when there is
/// one (ConvergenceModel::from_runs), else from cfg.noise_scale; that is the prior of
/// history_convergence, which fits B_crit to the runs' first epochs reaching the target
/// (policy.target_accuracy, else what the requested epochs reach at the reference batch)
/// when the history has such runs at 2 or more global batches.
/// `examples`: the examples of the job's epochs (the batch script's tula-train --limit-train,
/// --limit-test and --val-split, TrainCommand::epoch_examples; PlanRequest::examples); zeros:
/// the workload's whole sets.
Plan plan_workload(const Config& cfg, const std::vector<std::string>& db_paths,
                   const std::string& workload, int epochs, int max_nodes, int fixed_nodes,
                   Policy policy, std::vector<std::string>* warnings, const EpochExamples& examples = {});
/// The same with a policy argument (deadline, budget).
Plan plan_workload(const Config& cfg, const std::vector<std::string>& db_paths,
                   const std::string& workload, int epochs, int max_nodes, int fixed_nodes,
                   const PolicySpec& policy, std::vector<std::string>* warnings, const EpochExamples& examples = {});
/// The run `run` (as read from a profile database) checked against the prediction interval
/// of the models fitted from the profiles and the other runs in `db_paths` (check_runs, with
/// the hardware classes of `cfg`'s partitions). nullopt when it cannot be checked: no profile
/// of its workload, too few compute samples, a multi-node run without an allreduce profile, or
/// a run the models cannot predict. Never throws for a bad database (its reason goes to
/// `warnings`).
std::optional<RunCheck> check_recorded_run(const Config& cfg, const std::vector<std::string>& db_paths,
                                           const RunRecord& run, std::vector<std::string>* warnings);

}  // namespace tula
