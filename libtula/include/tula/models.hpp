// libtula: performance models fitted from profiles.
#pragma once
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tula/records.hpp"
#include "tula/workload.hpp"

namespace tula {

/// The node count whose profile serves `nodes` nodes in a map keyed by profiled node count
/// (ComputeModel::concurrent, synced, SyncedRatios::one_per_node): the largest key <= nodes; 0 when
/// nodes <= 1 or no key is that small. Pure.
template <class V>
int profiled_count(const std::map<int, V>& by_count, int nodes) {
    if (nodes <= 1) return 0;
    auto it = by_count.upper_bound(nodes);
    return it == by_count.begin() ? 0 : std::prev(it)->first;
}

/// Knots over the local batch: (local batch in examples, value) ascending in the local batch.
using BatchKnots = std::vector<std::pair<double, double>>;

/// The synchronized-step profile's knots divided by the modelled step of the shape they were
/// timed as (step_synced_ratios, ComputeModel::synced_ratios), kept per shape: nodes K x ranks
/// per node R. Dimensionless ratios; empty: no profile to use.
struct SyncedRatios {
    /// One rank per node: ranks K (= nodes, > 1) -> knots.
    std::map<int, BatchKnots> one_per_node;
    /// Several ranks per node: ranks per node R > 1 -> nodes K >= 1 -> knots.
    std::map<int, std::map<int, BatchKnots>> on_node;

    SyncedRatios() = default;
    /// One-rank-per-node ratios alone, keyed by rank count (implicit, so that such a map serves
    /// where SyncedRatios is asked for).
    SyncedRatios(std::map<int, BatchKnots> one) : one_per_node(std::move(one)) {}  // NOLINT(google-explicit-constructor)
    /// Whether there are no knots at all. Pure.
    bool empty() const { return one_per_node.empty() && on_node.empty(); }
    /// The knots that serve a step of `nodes` nodes of `ranks_per_node` ranks each: for R =
    /// ranks_per_node > 1, those of the same R and the largest profiled K <= nodes
    /// (on_node); otherwise, or when there are none, those of the largest profiled rank count
    /// <= nodes x R of one rank per node (one_per_node, profiled_count: none for 1 rank).
    /// nullptr when none serves. Sets *timed (when given) to the (nodes, ranks per node) the
    /// knots were timed as, (0, 0) when none. Pure.
    const BatchKnots* serving(int nodes, int ranks_per_node, std::pair<int, int>* timed = nullptr) const;
};

/// Compute time of one training iteration vs local batch b (examples per rank), seconds:
/// linear t(b) = t0 + t1 b (Scavenger, Tyagi & Sharma 2023), flat-then-linear
/// max(t_min, t0 + t1 b) (segmented regression, Hudson 1966) chosen by AIC, or, inside the
/// profiled range, piecewise-linear interpolation of the knots chosen by leave-one-out
/// cross-validation (Stone 1974); with a concurrency factor c_K(b) and a sync factor y_K(b)
/// for K ranks timed at once, and a start-up time s(b). The derivations, the rules that are
/// this project's own and the measurements behind them are in docs/models.md.
/// Errors of fit(): tula::Error for too few points or an invalid sample.
struct ComputeModel {
    /// At most this many interior knots enter the leave-one-out choice (see above).
    static constexpr int kLooKnots = 32;
    double t0 = 0;       ///< seconds per iteration
    double t1 = 0;       ///< seconds per example
    double t_min = 0;    ///< floor, seconds per iteration; 0 = linear form
    bool flat = false;   ///< true when the flat-then-linear form was chosen
    int min_batch = 0;   ///< smallest profiled local batch
    int max_batch = 0;   ///< largest profiled local batch
    double rmse = 0;     ///< root-mean-square residual of the chosen fit, seconds
    double aic_linear = 0;  ///< AIC of the linear form
    double aic_flat = 0;    ///< AIC of the flat-then-linear form (+inf when not considered)
    // Prediction interval of the linear part (ordinary least-squares theory, e.g. Montgomery,
    // Peck & Vining, "Introduction to Linear Regression Analysis", eq. 2.45):
    //   t(b) +- t_{1-a/2, dof} * s * sqrt(1 + x' (X'X)^-1 x),  x = (1, b)
    double sigma = 0;    ///< residual standard error s = sqrt(SSE / dof), seconds
    int dof = 0;         ///< residual degrees of freedom n - k (0: no interval, sigma used as is)
    double xtx_inv[3] = {0, 0, 0};  ///< (X'X)^-1 of the linear part: [0,0], [0,1], [1,1]
    /// (local batch, median seconds per iteration) of every profiled batch, ascending.
    std::vector<std::pair<int, double>> knots;
    bool interpolated = false;  ///< true when the interpolated form won inside the profiled range
    /// Leave-one-out mean relative error over the interior knots (at most kLooKnots of them),
    /// percent, of interpolation and of the parametric form (NaN with fewer than 3 distinct
    /// batches).
    double loo_interpolated = 0, loo_parametric = 0;
    /// Root mean square of the interpolation's leave-one-out relative errors (a fraction) and
    /// how many interior knots gave it (at most kLooKnots): the interpolated form's
    /// prediction interval.
    double loo_rel_rms = 0;
    int loo_points = 0;
    /// Concurrency knots: ranks K -> (local batch in examples, c_K(b)) ascending in the local
    /// batch (see above); empty without samples of several ranks at once.
    std::map<int, std::vector<std::pair<double, double>>> concurrent;
    /// The same from samples of several ranks sharing each node: ranks per node R -> ranks
    /// K R -> knots. Kept apart from `concurrent` (ranks on separate nodes) and not in
    /// `synced`: R ranks on one host contend for its cores and memory, which ranks on separate
    /// nodes do not.
    std::map<int, std::map<int, std::vector<std::pair<double, double>>>> concurrent_on_node;
    /// Synchronized-step knots of one rank per node: ranks K (= nodes) -> (local batch in
    /// examples, median synced seconds per iteration) ascending in the local batch; empty
    /// without such samples.
    std::map<int, std::vector<std::pair<double, double>>> synced;
    /// The same from samples of several ranks sharing each node: ranks per node R > 1 -> nodes
    /// K >= 1 (ranks / R) -> knots. Kept apart from `synced`: such a step has a within-node
    /// part of its allreduce and R ranks contending for one host, which the one-rank-per-node
    /// step of K R ranks has not.
    std::map<int, std::map<int, BatchKnots>> synced_on_node;
    /// Start-up knots: (local batch, median start-up seconds) ascending; empty when the
    /// profile has no measured start-up.
    std::vector<std::pair<int, double>> startup_knots;
    /// The Slurm jobs (ComputeSample::job_id, non-empty) whose samples are in the profile. A
    /// run of such a job measured its step before training (TULA_PROFILE, tula-jobs(7)), and
    /// that measurement, not the training, paid the start-up (steady_seconds).
    std::set<std::string> measured_jobs;
    /// Whether run `r` trained warm: its job (non-empty job_id) is one of measured_jobs, so no
    /// start-up belongs to its training (steady_seconds, Predictor::run).
    bool trained_warm(const RunRecord& r) const { return !r.job_id.empty() && measured_jobs.count(r.job_id) > 0; }

    /// Fit. O(n log n) time for n samples (about 30 ms for 20,000 distinct batches on the
    /// development machine, O(n) memory).
    /// Errors: tula::Error when the one-rank samples have fewer than 2 distinct local
    /// batches, or any sample has a local batch < 1 or a non-positive or non-finite time.
    static ComputeModel fit(const std::vector<ComputeSample>& samples);
    /// Sets `concurrent` (and `synced`) from samples with ranks > 1 and one rank per node, and
    /// `concurrent_on_node` (and `synced_on_node`, from samples whose ranks are a multiple of
    /// their ranks per node) from those with several ranks per node, the concurrency knots
    /// against this model's seconds_per_iter; fit() calls it. Errors: tula::Error for a sample
    /// with a local batch < 1 or a non-positive or non-finite time (a non-positive or
    /// non-finite synced time counts as not measured).
    void fit_concurrent(const std::vector<ComputeSample>& together);

    /// Predicted seconds per iteration at local batch `b` (> 0): the interpolated form inside
    /// the profiled range when it was chosen, else the parametric one (see above).
    double seconds_per_iter(double b) const;
    /// Predicted seconds per iteration of one of `nodes` ranks (one per node) stepping at
    /// once at local batch `b`: seconds_per_iter(b) x concurrency_factor(nodes, b).
    double seconds_per_iter(double b, int nodes) const { return seconds_per_iter(b) * concurrency_factor(nodes, b); }
    /// c_K(b) (see above), dimensionless; 1 for nodes <= 1 or without concurrent samples. Pure.
    double concurrency_factor(int nodes, double b) const;
    /// The concurrency factor of `nodes` nodes of `ranks_per_node` ranks each at local batch
    /// `b`: with R = ranks_per_node > 1 and samples of R ranks per node, their knots of the
    /// largest profiled rank count <= nodes x R (concurrent_on_node); otherwise
    /// concurrency_factor(nodes x R, b). Dimensionless. Pure.
    double concurrency_at(int nodes, int ranks_per_node, double b) const;
    /// The ratio knots behind the sync factor, computed once for many candidates, per shape
    /// (SyncedRatios): the knots of `synced` (K nodes, 1 rank each) and `synced_on_node` (K
    /// nodes, R ranks each), each synced time divided by modelled(K, R, b_j), the caller's
    /// predicted seconds of a step of that shape at local batch b_j; knots where modelled is
    /// not > 0 are left out (so are shapes left without knots). Pure (modelled must be).
    SyncedRatios synced_ratios(const std::function<double(int nodes, int ranks_per_node, double b)>& modelled) const;
    /// synced_ratios of the one-rank-per-node knots alone: modelled(K, b_j) (the knots of several
    /// ranks per node are left out). Pure (modelled must be).
    SyncedRatios synced_ratios(const std::function<double(int, double)>& modelled) const;
    /// y of a step of `nodes` nodes of `ranks_per_node` ranks each at local batch `b` from
    /// synced_ratios' result: curve_at of the knots SyncedRatios::serving picks (the same R and
    /// the largest profiled K <= nodes, else one rank per node and the largest rank count <=
    /// nodes x R), clamped to [TimeCalibration::kMin, kMax]; 1 when none serves (one rank in
    /// all, or no such profile). Dimensionless. Pure.
    static double synced_factor_at(const SyncedRatios& ratios, int nodes, int ranks_per_node, double b);
    /// synced_factor_at with one rank per node. Pure.
    static double synced_factor_at(const SyncedRatios& ratios, int nodes, double b) {
        return synced_factor_at(ratios, nodes, 1, b);
    }
    /// s(b), seconds a training run at local batch `b` spends once on start-up (see above);
    /// 0 without measured start-up. Pure.
    double startup_seconds(double b) const;

    /// The parametric form alone (linear or flat-then-linear), seconds per iteration.
    double parametric(double b) const {
        const double lin = t0 + t1 * b;
        return flat && t_min > lin ? t_min : lin;
    }

    /// Half-width of the two-sided prediction interval of one new measurement at local
    /// batch `b`, seconds, at confidence `level` in (0, 1) (Student-t quantile from GSL,
    /// gsl_cdf_tdist_Pinv). 0 when the fit had no residual degrees of freedom. With the
    /// interpolated form: t_{(1+level)/2, k} x loo_rel_rms x seconds_per_iter(b), k =
    /// loo_points (the leave-one-out errors are out-of-sample prediction errors, relative
    /// because timing noise scales with the time).
    double interval(double b, double level = 0.95) const;
    /// The interpolated form's half-width as a fraction of the prediction,
    /// t_{(1+level)/2, loo_points} x loo_rel_rms; 0 for the fitted curve or without points.
    double relative_interval(double level = 0.95) const;

    /// "linear" or "flat-then-linear": the parametric form (interpolated says whether the
    /// knots replace it inside the profiled range).
    const char* form() const { return flat ? "flat-then-linear" : "linear"; }
};

/// One level's allreduce bus bandwidth as nccl-tests' all_reduce_perf reports it: (message bytes,
/// busbw bytes/s) points, ascending in bytes, every value > 0. busbw = algbw x 2 (n-1)/n with
/// algbw = bytes / seconds over n ranks (nccl-tests, doc/PERFORMANCE.md, "Bus bandwidth").
using BusBandwidthTable = std::vector<std::pair<double, double>>;

/// Seconds of one allreduce of `bytes` bytes among `ranks` ranks read from `table`:
///   t = 2 (n-1)/n x S / busbw(S)
/// with busbw interpolated linearly in log S between the table's sizes; above the largest size
/// the largest's busbw (bandwidth bound); below the smallest the smallest's seconds (latency
/// bound: a smaller message is not modelled as faster). 0 when ranks <= 1, bytes <= 0 or the
/// table is empty. Pure. docs/models.md, "Allreduce from nccl-tests tables".
double bus_bandwidth_seconds(const BusBandwidthTable& table, int ranks, double bytes);

/// Allreduce alpha-beta model of `nodes` ranks reducing a message of n bytes, in one of two
/// algorithms (Thakur, Rabenseifner & Gropp 2005, "Optimization of collective communication
/// operations in MPICH", IJHPCA 19(1), sec. 4.5):
///   ring (reduce-scatter + allgather):   T(K, n) = 2 (K-1) alpha + 2 (K-1)/K n beta
///   Rabenseifner (recursive halving +    T(K, n) = 2 ceil(log2 K) alpha + 2 (K-1)/K n beta
///     doubling; the tree/hierarchical variant whose latency term grows as log K, the one
///     MPI libraries switch to for many nodes)
/// [seconds], T(1, n) = 0. Both are fitted by non-negative least squares (Eigen) over the
/// samples; the one with the smaller residual is kept when the samples cover >= 3 node
/// counts (with 2 node counts both features are proportional and ring is kept).
///
/// The fitted model extrapolates to node counts that were not profiled, held at or above the
/// measured seconds (below) of the most nodes profiled under that count: an allreduce over more
/// nodes sends no less and takes no fewer steps, so a formula that one line fits over several
/// node counts and message sizes must not make it faster than measured. A node count that
/// was profiled at 2 or more message sizes is predicted from its own measurements instead
/// (as nccl-tests' tables are read): the median seconds per message size, interpolated
/// linearly in bytes between them, held at the smallest size's value below it (latency
/// bound) and continued with the last two sizes' slope above the largest (bandwidth bound).
/// One alpha and beta for all node counts cannot follow a cluster whose cost per step
/// changes with the node count (e.g. ranks oversubscribing a host's cores, or nodes beyond
/// one switch), and the measured node counts are the ones a small cluster's jobs run on.
struct AllreduceModel {
    enum class Algorithm { Ring, Rabenseifner };
    double alpha = 0;    ///< latency per step, seconds
    double beta = 0;     ///< seconds per byte
    double rmse = 0;     ///< residual, seconds
    int samples = 0;     ///< the samples fit() used (nodes >= 2, one rank per node); 0 when not fitted
    Algorithm algorithm = Algorithm::Ring;
    /// How a fit from fewer points than the formula has parameters was closed (one (nodes,
    /// bytes) point: the bandwidth term alone); empty for a full fit. Plans print it.
    std::string note;
    /// Node count -> its (bytes, median seconds) points, ascending in bytes; only node counts
    /// measured at >= 2 message sizes. Empty for a model built from alpha and beta alone.
    std::map<int, std::vector<std::pair<double, double>>> measured;
    /// Across nodes (a hardware file's network.bus_bandwidth.inter_node): nccl-tests run over
    /// K nodes x devices_per_node ranks, the whole two-level allreduce. When given, a node count
    /// without measurements costs bus_bandwidth_seconds(bus_bandwidth, K x devices_per_node, n)
    /// less the within-node part the compute model already holds (intra_bus_bandwidth's
    /// seconds for devices_per_node ranks, or intra_node_allreduce_seconds at intra_bandwidth),
    /// at least 0. Empty: the alpha-beta formula.
    BusBandwidthTable bus_bandwidth;
    BusBandwidthTable intra_bus_bandwidth;  ///< within one node of devices_per_node ranks; may be empty
    int devices_per_node = 1;               ///< ranks per node of bus_bandwidth's runs (the node's GPUs)
    double intra_bandwidth = 0;             ///< bytes/s of the within-node ring when intra_bus_bandwidth is empty

    /// Uses the samples of nodes >= 2 and one rank per node; the within-node samples (nodes = 1,
    /// IntraNodeModel) and any of several ranks per node are left out.
    /// With a single distinct (nodes K, bytes n) point (one message size measured on one node
    /// count) the median t of its samples is all bandwidth term: alpha = 0, beta = t / (2 (K-1)/K
    /// n) (all latency term, beta = 0, when n = 0), and `note` says so.
    /// Errors: tula::Error when there are no such samples, or a sample is negative / non-finite.
    static AllreduceModel fit(const std::vector<AllreduceSample>& samples);
    /// Whether `samples` hold one that fit() uses (nodes >= 2, one rank per node). Pure.
    static bool has_inter_node(const std::vector<AllreduceSample>& samples);

    /// Predicted seconds of one allreduce of `bytes` bytes over `nodes` ranks: from the
    /// node count's own measurements when there are (see above), else from bus_bandwidth when
    /// given, else modelled_seconds(), at least the measurements of the most nodes measured
    /// below `nodes`.
    double seconds(int nodes, double bytes) const;
    /// The alpha-beta formula of `algorithm` (above), seconds; 0 for nodes <= 1.
    double modelled_seconds(int nodes, double bytes) const;
    /// The node counts predicted from their own measurements, comma-separated ("2,4"); "" when none.
    std::string measured_nodes() const;
    /// "ring" or "rabenseifner".
    const char* algorithm_name() const { return algorithm == Algorithm::Ring ? "ring" : "rabenseifner"; }
};

/// Within-node bandwidth fitted from allreduce samples of R ranks on one node (nodes = 1,
/// ranks_per_node = R >= 2; `tula profile allreduce --ranks-per-node R`). The ring allreduce of
/// n bytes among p ranks costs 2 (p-1) alpha + 2 (p-1)/p n beta (Thakur, Rabenseifner & Gropp
/// 2005, "Optimization of collective communication operations in MPICH", IJHPCA 19(1), sec.
/// 4.5); with x = 2 (R-1)/R n [bytes] the samples are fitted by ordinary least squares (closed
/// form of the two-parameter line) to
///   seconds = a + x / bandwidth
/// so a [seconds] takes the latency terms of the sizes measured and bandwidth [bytes/s] = 1 /
/// slope is what intra_node_allreduce_seconds takes.
struct IntraNodeModel {
    double bandwidth = 0;  ///< bytes/s between the ranks of one node (> 0)
    double latency = 0;    ///< a above, seconds (may be slightly negative: not constrained)
    double rmse = 0;       ///< root-mean-square residual, seconds
    int samples = 0;       ///< samples fitted
    int sizes = 0;         ///< distinct message sizes among them
    std::vector<int> ranks;  ///< the distinct ranks per node profiled, ascending

    /// Fits the samples with nodes = 1 and ranks_per_node >= 2 (the others are left out).
    /// Errors: tula::Error when a used sample has bytes < 1 or a negative / non-finite time,
    /// when they have fewer than 2 distinct message sizes (none at all: "no within-node
    /// allreduce profile"), or when the fitted slope is not > 0 (the time does not grow with
    /// the message: no bandwidth to fit).
    static IntraNodeModel fit(const std::vector<AllreduceSample>& samples);
    /// Whether `samples` hold a within-node one (nodes = 1, ranks_per_node >= 2). Pure.
    static bool has_samples(const std::vector<AllreduceSample>& samples);
};

/// Within-node part of a two-level (hierarchical) allreduce of n = `bytes` bytes among the
/// r = `ranks` ranks of one node: a ring reduce-scatter before and an all-gather after the
/// across-node allreduce, together 2 (r-1)/r n / bw seconds (`bandwidth` bw in bytes/s;
/// Thakur, Rabenseifner & Gropp 2005, sec. 4.5, bandwidth term of the ring). 0 when r <= 1 or
/// bw <= 0 (not modelled). The across-node part is AllreduceModel::seconds(K, n): after the
/// reduce-scatter each of a node's r ranks carries n/r bytes across, together n bytes through
/// the node's link. Pure.
double intra_node_allreduce_seconds(int ranks, double bytes, double bandwidth);

/// Seconds of one hierarchical allreduce of `bytes` bytes on `nodes` nodes of
/// `ranks_per_node` ranks: intra_node_allreduce_seconds(ranks_per_node, bytes,
/// intra_bandwidth) + across->seconds(nodes, bytes) (0 across for 1 node or a null
/// `across`). Pure.
double hierarchical_allreduce_seconds(const AllreduceModel* across, int nodes, int ranks_per_node, double bytes,
                                      double intra_bandwidth);

/// The gradient allreduce of one step as data-parallel trainers issue it: in buckets of
/// `bucket_bytes`, each reduced as soon as the backward pass has computed its gradients
/// (PyTorch DistributedDataParallel, Li et al. 2020, "PyTorch Distributed", PVLDB 13(12),
/// sec. 3.2.3; its default bucket is 25 MiB). n gradient bytes give k = floor(n / S) full
/// buckets of S bytes and a last one of n - k S bytes (none when it is 0). Seconds; built by
/// bucketed_allreduce.
struct GradientAllreduce {
    double seconds = 0;         ///< the whole gradient in one allreduce, seconds (the gamma form's T_comm)
    int full_buckets = 0;       ///< k above (0: the gradient is one bucket, `last_seconds`)
    double bucket_fraction = 0; ///< S / n, the share of the gradient in one full bucket
    double bucket_seconds = 0;  ///< allreduce of one full bucket, seconds
    double last_seconds = 0;    ///< allreduce of the last bucket, seconds (0: no last bucket)

    /// Seconds of the allreduce not hidden behind a backward pass of W = `backward_seconds`
    /// (>= 0): gradients are produced evenly over W, so full bucket j is ready at W j S / n
    /// and the last at W; the buckets are reduced one after another in that order. The
    /// full buckets end at F = max(W S/n + k tau, W k S/n + tau) (the latest of
    /// r_j + (k - j + 1) tau over j, linear in j), the last one at max(F, W) + tau_last, and
    /// what is exposed is that end less W, at least 0 (docs/models.md, "Bucketed allreduce").
    /// W = 0: the sum of the buckets' allreduces. Pure.
    double exposed_seconds(double backward_seconds) const;
};

/// The gradient of `bytes` bytes reduced on `nodes` nodes of `ranks_per_node` ranks
/// (hierarchical_allreduce_seconds of each bucket and of the whole) in buckets of
/// `bucket_bytes` (0 or >= bytes: one bucket, the whole gradient). Pure.
GradientAllreduce bucketed_allreduce(const AllreduceModel* across, int nodes, int ranks_per_node, double bytes,
                                     double intra_bandwidth, double bucket_bytes);

/// One measured iteration with its two modelled parts, the data of the overlap fit.
struct IterationSample {
    double compute_seconds = 0;   ///< T_comp, model prediction at the run's local batch
    double comm_seconds = 0;      ///< T_comm, model prediction at the run's node count
    double measured_seconds = 0;  ///< measured seconds per iteration
    int nodes = 1;                ///< the run's node count
    int ranks_per_node = 1;       ///< the run's ranks on each node
    double local_batch = 0;       ///< examples per rank per iteration; 0: not known
};

/// Overlap of computation and communication as in Pollux (Qiao et al., OSDI 2021, eq. 9):
///   T_iter = (T_comp^gamma + T_comm^gamma)^(1/gamma),  gamma in [1, 10]
/// gamma = 1 is no overlap (the sum), large gamma approaches max(T_comp, T_comm). Fitted by
/// nonlinear least squares on relative residuals (T_iter(gamma) - T)/T with GSL
/// gsl_multifit_nlinear (trust region, Levenberg-Marquardt), gamma = 1 + 9 / (1 + e^-u) so the
/// bound holds. Default (no samples with T_comm > 0): gamma = 1.
///
/// With bucket_bytes > 0 the bucketed form replaces gamma (a hardware file's trainer, which
/// reduces its gradient in buckets during the backward pass):
///   T_iter = T_comp + GradientAllreduce::exposed_seconds(backward_fraction x T_comp,batch)
/// where T_comp,batch is T_comp less the compute model's fixed part t0 (the optimizer and the
/// launches, which hide nothing; below a floor t_min, t_min - t0) and backward_fraction = 2/3: the
/// backward pass computes two products per weight for the forward's one (Kaplan et al. 2020,
/// "Scaling laws for neural language models", sec. 2.1: 2N forward, 4N backward FLOPs).
struct OverlapModel {
    double gamma = 1.0;
    int samples = 0;        ///< samples used in the fit (0: the default)
    double rmse_rel = 0;    ///< root-mean-square relative residual of the fit
    double bucket_bytes = 0;             ///< bytes per gradient bucket; 0: the gamma form
    double backward_fraction = 2.0 / 3;  ///< share of the batch-dependent compute in the backward pass

    /// Errors: tula::Error when a sample is negative or non-finite, or GSL fails.
    static OverlapModel fit(const std::vector<IterationSample>& samples);
    /// Seconds per iteration from the two parts (both >= 0), the gamma form.
    double combine(double compute_seconds, double comm_seconds) const;
    /// Seconds per iteration: the bucketed form when bucket_bytes > 0, with
    /// `batch_compute_seconds` (taken in [0, compute_seconds]) the compute beyond the model's
    /// fixed part; else combine(compute_seconds, comm.seconds). Pure.
    double combine(double compute_seconds, double batch_compute_seconds, const GradientAllreduce& comm) const;
};

/// Online calibration of the predicted time per iteration from finished runs (the "online"
/// part of Tula: each finished run corrects the next prediction). The profiles are taken in
/// a few timed steps on one node; a job's steady state can differ (caches, load, data path).
/// factor = median over the newest kNewest samples of measured / predicted seconds per
/// iteration, predicted = overlap.combine(compute, comm); clamped to [kMin, kMax]. This
/// project's own rule (no paper); no samples: factor 1. Single-node and multi-node runs
/// differ in what the profiles miss (a multi-node step adds the data path and the
/// communication's interference with computation), so the same median is also taken over
/// each group's newest kNewest samples, and shape_factor(K, R) uses K's group when it has at least
/// kGroupMin samples, else the pooled factor.
///
/// What the profiles miss in a multi-node step can also depend on the local batch b (ranks
/// that share a host's caches and memory bandwidth slow each other more, the larger their
/// working set; communication weighs less, the more compute there is per step). So the
/// multi-node group also gets a ratio curve over b: the median ratio at each local batch of its
/// newest kNewest samples (the knots), interpolated linearly in log b between them and held at
/// the end knots' values outside (never beyond the measured ratios). It replaces the group's
/// median when its samples cover at least 2 local batches and leave-one-out prediction of the
/// samples' ratios (each from the others, squared error of log ratio; Stone 1974) is no worse
/// with the curve than with the median; with 2 samples the two agree by construction and the
/// curve is used. Single-node runs get no curve: such a run is what the compute profile
/// measured, at the same local batch, so what remains is a steady-state offset (the median).
/// factor_at(K, R, b) applies it.
///
/// "Single" and "multi" count ranks: a run of one rank is single, any other (several nodes, or
/// several ranks on one node) multi. A candidate's "node count" below is its shape (K nodes, R
/// ranks per node): runs of 2 nodes with 2 ranks each calibrate the 2 x 2 candidate, not the
/// 2 x 1 one.
///
/// A multi-node candidate on K nodes uses, before all of that, the runs on exactly K nodes
/// when there is at least one (the newest kNewest of them: their median, or their curve over
/// b by the same leave-one-out rule): they ran as many ranks on the same kind of hosts and
/// network, which runs on other node counts did not (docs/models.md, "Time calibration", has
/// the measurement that motivated it). This project's rule.
///
/// Where the synchronized-step profile covers a run's shape (SyncedRatios::serving: its own
/// nodes x ranks per node first), the run's prediction already carried the sync factor y(b)
/// (ComputeModel::synced_factor_at), so its ratio is taken against that: measured / (modelled
/// x y(b)), the residual of what the profile of that shape did not foresee (the host's speed
/// since the profile, a job's steady state). step_time_factor multiplies y_K(b) by it. Calibrating the residual keeps the
/// profile's dependence on the local batch: a 2-node run at local batch 64 says little about
/// the synchronization overhead at local batch 32, which the profile measured.
struct TimeCalibration {
    static constexpr size_t kNewest = 5;
    static constexpr int kGroupMin = 2;
    static constexpr double kMin = 0.25, kMax = 4.0;
    double factor = 1.0;  ///< pooled: all runs, multiplies the predicted seconds per iteration
    int runs = 0;         ///< samples used
    double factor_single = 1.0, factor_multi = 1.0;  ///< the same over 1-node / multi-node runs
    int runs_single = 0, runs_multi = 0;             ///< samples used for each
    /// The multi-node ratio curve over the local batch, (local batch in examples, ratio)
    /// ascending in local batch; empty when the multi-node median serves (see above).
    std::vector<std::pair<double, double>> curve_multi;
    /// The runs on one node count K > 1 (see above): their median ratio, how many, and their
    /// curve over the local batch (empty: the median serves).
    struct NodeGroup {
        double factor = 1.0;
        int runs = 0;
        std::vector<std::pair<double, double>> curve;
    };
    /// A run's or candidate's shape: (nodes, ranks per node).
    using Shape = std::pair<int, int>;
    /// Shape with more than one rank -> the group of its runs; only shapes with at least one run.
    std::map<Shape, NodeGroup> by_nodes;
    /// The group of the runs of exactly `nodes` nodes with `ranks_per_node` ranks each (more than
    /// one rank in all), or nullptr when there is none. Pure.
    const NodeGroup* node_group(int nodes, int ranks_per_node = 1) const {
        const auto it = nodes * ranks_per_node > 1 ? by_nodes.find({nodes, ranks_per_node}) : by_nodes.end();
        return it == by_nodes.end() ? nullptr : &it->second;
    }
    /// Whether a candidate of that shape uses runs of its own kind (runs of exactly that
    /// shape, or >= kGroupMin runs of its kind: one rank or several) rather than the pooled
    /// factor. Pure.
    bool own_kind(int nodes, int ranks_per_node = 1) const {
        return node_group(nodes, ranks_per_node) ||
               (nodes * ranks_per_node <= 1 ? runs_single : runs_multi) >= kGroupMin;
    }
    /// Whether the factor for that shape comes from runs of exactly that shape. Pure.
    bool own_nodes(int nodes, int ranks_per_node = 1) const { return node_group(nodes, ranks_per_node) != nullptr; }
    /// The factor for a candidate of that shape (see above): its shape's median, its kind's,
    /// or the pooled one. Pure.
    double shape_factor(int nodes, int ranks_per_node) const {
        if (const NodeGroup* g = node_group(nodes, ranks_per_node)) return g->factor;
        return own_kind(nodes, ranks_per_node) ? (nodes * ranks_per_node <= 1 ? factor_single : factor_multi) : factor;
    }
    /// The factor for a candidate of `nodes` nodes with `ranks_per_node` ranks each, at local
    /// batch `local_batch` (examples): the ratio curve at local_batch when by_local_batch (its
    /// shape's curve, else the multi-rank one), else shape_factor(nodes, ranks_per_node). Pure.
    double factor_at(int nodes, int ranks_per_node, double local_batch) const;
    /// Whether the factor of that shape comes from a ratio curve. Pure.
    bool by_local_batch(int nodes, int ranks_per_node = 1) const {
        if (const NodeGroup* g = node_group(nodes, ranks_per_node)) return !g->curve.empty();
        return nodes * ranks_per_node > 1 && own_kind(nodes, ranks_per_node) && !curve_multi.empty();
    }
    /// How many runs the factor of that shape came from. Pure.
    int runs_for(int nodes, int ranks_per_node = 1) const {
        if (const NodeGroup* g = node_group(nodes, ranks_per_node)) return g->runs;
        return own_kind(nodes, ranks_per_node) ? (nodes * ranks_per_node <= 1 ? runs_single : runs_multi) : runs;
    }
    /// `samples` oldest first (the newest kNewest are used); samples with a non-finite or
    /// non-positive measured or predicted time are skipped. `synced_ratios`
    /// (step_synced_ratios, per shape; empty: none) turns the ratio of a sample whose shape
    /// (nodes, ranks_per_node) it serves into the residual over the sync factor (see above).
    /// Errors: none.
    static TimeCalibration fit(const std::vector<IterationSample>& samples, const OverlapModel& overlap,
                               const SyncedRatios& synced_ratios = {});
    /// The curve through `knots` ((local batch, ratio), ascending, non-empty) at local batch b:
    /// linear in log b between knots, the end knots' ratios outside. Pure.
    static double curve_at(const std::vector<std::pair<double, double>>& knots, double b);
};

/// ComputeModel::synced_ratios against the planner's modelled step of each profiled shape (K
/// nodes of R ranks each) at local batch b, as enumerate_partition models a candidate's step:
///   overlap.combine(compute.seconds_per_iter(b) x compute.concurrency_at(K, R, b),
///                   hierarchical_allreduce_seconds(allreduce, K, R, grad_bytes, intra_bandwidth))
/// (grad_bytes: bytes allreduced per step, 4 x params for float32; intra_bandwidth: bytes/s
/// between a node's ranks, 0: the within-node part not modelled, as
/// PartitionTarget::intra_node_bandwidth). Shapes of more than one node need `allreduce` (left
/// out without it: no multi-node prediction to correct); a 1-node shape of R > 1 ranks has only
/// the within-node part and is kept without it. Pure.
SyncedRatios step_synced_ratios(const ComputeModel& compute, const AllreduceModel* allreduce, const OverlapModel& overlap,
                                double grad_bytes, double intra_bandwidth = 0);

/// The factor on the modelled seconds of a step of `nodes` nodes with `ranks_per_node` ranks
/// each (K R ranks in all) at local batch `b` as the planner applies it
/// (Candidate::time_factor). When `synced_ratios` (step_synced_ratios, per shape) has knots
/// that serve the shape (SyncedRatios::serving: the same R and the largest profiled K <=
/// nodes, else one rank per node and the largest rank count <= K R): the synchronized-step
/// profile's ComputeModel::synced_factor_at(K, R, b), times calibration.factor_at(K, R, b)
/// once `calibration` has runs of its own kind (own_kind; fitted with the same synced_ratios,
/// so it is the residual over the profile), clamped to [TimeCalibration::kMin, kMax].
/// Otherwise calibration.factor_at(K, R, b). Sets *from_synced (when given) to whether the
/// profile entered. Dimensionless. Pure.
double step_time_factor(const TimeCalibration& calibration, const SyncedRatios& synced_ratios, int nodes,
                        int ranks_per_node, double b, bool* from_synced = nullptr);
/// step_time_factor with one rank per node. Pure.
inline double step_time_factor(const TimeCalibration& calibration, const SyncedRatios& synced_ratios, int nodes,
                               double b, bool* from_synced = nullptr) {
    return step_time_factor(calibration, synced_ratios, nodes, 1, b, from_synced);
}

/// A finished run the time models can predict and learn from: at least one node, one example
/// per rank, one epoch and a finite positive training time. The one definition (fitting,
/// validation and the run check use it). Pure.
bool usable_run(const RunRecord& run);

/// A finished run's measured training seconds without the start-up the compute model
/// predicts at its local batch (ComputeModel::startup_seconds), not below half the measured
/// time (a start-up model that explains more of a run than that is not trusted for it); the
/// whole measured time for a run of a job that measured its own step before training
/// (ComputeModel::measured_jobs), whose training started warm. Seconds. Errors: none.
double steady_seconds(const RunRecord& r, const ComputeModel& compute);

/// The modelled parts and the measured seconds per iteration of finished runs, in the
/// order given: with K = nodes, R = ranks per node, b = global_batch / (K R):
/// compute(b, K R ranks at once), hierarchical_allreduce_seconds(allreduce, K, R, 4 x params
/// bytes, intra_bandwidth) (0 on one node without `intra_bandwidth`, or without `allreduce`),
/// steady_seconds / (floor(train_examples / B) x epochs). Runs the models cannot predict (no
/// nodes, fewer examples than ranks, no epochs, no time, several nodes without `allreduce`)
/// are skipped. Errors: none.
std::vector<IterationSample> iteration_samples(const std::vector<const RunRecord*>& runs, const Workload& w,
                                               const ComputeModel& compute, const AllreduceModel* allreduce,
                                               double intra_bandwidth = 0);

/// Peak device memory of one rank vs local batch b: M(b) = M_static + M_act * b [bytes].
/// Without measured samples (the profile database has no place for them) it is computed
/// from the workload: M_static = 4 bytes x params x 4 (weights, gradients, momentum,
/// allreduce buffer, float32); M_act = 2 x 4 bytes x Workload::activation_floats (forward
/// activations kept for backward, plus their gradients), which tula-train writes.
struct MemoryModel {
    double static_bytes = 0;   ///< bytes
    double per_example_bytes = 0;  ///< bytes per example of local batch

    /// From the workload. Errors: tula::Error when the model's activation size is unknown
    /// (then memory is not modelled; callers treat that as "no limit").
    static MemoryModel from_workload(const Workload& w);
    /// Least-squares fit of (local batch, peak bytes) pairs (Eigen, both coefficients >= 0).
    /// Errors: tula::Error with fewer than 2 distinct batches or a non-finite / negative value.
    static MemoryModel fit(const std::vector<std::pair<int, double>>& samples);
    double bytes(double b) const { return static_bytes + per_example_bytes * b; }
    /// Largest local batch with bytes(b) <= device_bytes; 0 when not even b = 1 fits.
    /// device_bytes <= 0 means no limit (INT_MAX).
    int max_local_batch(double device_bytes) const;
};

/// Median of `v` (any unit; the mean of the two middle values for an even count); NaN when
/// `v` is empty. NaN elements are not allowed (their order is undefined). Pure.
double median(std::vector<double> v);

/// Convergence vs global batch B from the gradient noise scale (McCandlish, Kaplan, Amodei
/// et al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.11:
/// (S/S_min - 1)(E/E_min - 1) = 1, with B_noise = E_min/S_min):
///   E(B) = E_min (1 + B / B_noise)      examples (or epochs) to reach a given loss.
///
/// B_noise comes from the run history when tula-train measured it (from_runs), else from
/// tula.conf's noise_scale. The measured value is B_simple = tr(Sigma)/|G|^2 (eq. 2.9), used
/// as B_noise = tr(H Sigma)/(G^T H G) (eq. 2.8) without correction: the two are equal when the
/// Hessian H is a multiple of the identity, the paper finds B_simple a good approximation of
/// the critical batch (sec. 2.3, 3), and a correction would need tr(H Sigma), which nothing
/// here measures. B_simple is not rescaled by the run's batch: it is a property of the
/// gradient distribution at a point of training, independent of the batch in theory (the
/// estimator, App. A.1, is unbiased for any pair of batch sizes). It grows as the loss falls,
/// so a short run's value is lower than a long run's, which makes the model predict a larger
/// epoch penalty for large batches (the conservative side).
struct ConvergenceModel {
    /// Default noise scale when nothing is known, examples. The value is an assumption of
    /// this project (order of magnitude of small image-classification tasks); tula.conf
    /// key noise_scale overrides it.
    static constexpr double kDefaultNoiseScale = 1024.0;
    /// How many of the newest runs with a measured noise scale from_runs takes the median of.
    static constexpr size_t kNoiseRuns = 5;
    double noise_scale = kDefaultNoiseScale;  ///< B_noise, examples
    /// Runs whose measured noise scale gave noise_scale; 0: it came from `source`.
    int measured_runs = 0;
    /// Distribution-free confidence interval of the median B_noise from the order statistics
    /// of the n measured values: [smallest, largest] covers the median with probability
    /// confidence = 1 - 2 (1/2)^n (Conover, "Practical Nonparametric Statistics", 3rd ed.,
    /// sec. 3.2; 0.9375 for n = 5). Equal to noise_scale, confidence 0, without 2 values.
    double noise_scale_low = kDefaultNoiseScale, noise_scale_high = kDefaultNoiseScale;
    double confidence = 0;
    /// Where noise_scale came from when measured_runs is 0: "tula.conf" (its noise_scale
    /// key or the built-in default), "hardware file" (tula plan --hardware) or "fit" (B_crit
    /// fitted to the runs' epochs to a target accuracy, convergence_from_history).
    const char* source = "tula.conf";
    /// The target test accuracy (fraction) the epochs count to; 0: the requested epochs at the
    /// reference batch define the target (epochs_for is then relative).
    double target_accuracy = 0;
    /// E_min, epochs to target_accuracy at B -> 0 (convergence_from_history); 0: not known,
    /// epochs_for scales the requested epochs instead.
    double e_min = 0;
    double e_min_low = 0, e_min_high = 0;  ///< its bootstrap interval (equal to e_min without one)
    int fit_runs = 0;     ///< runs that gave e_min (and B_crit when fit_batches >= 2)
    int fit_batches = 0;  ///< their distinct global batches
    std::string fit_optimizer;  ///< their optimizer (RunRecord::optimizer; "" = not recorded)

    /// B_noise from the run history: the median of RunRecord::noise_scale over the newest
    /// (by `created`) kNoiseRuns runs that have a finite value > 0 (runs without one, NaN,
    /// infinite or non-positive values are ignored); `fallback` (examples, tula.conf's
    /// noise_scale) with measured_runs = 0 when no run has one. Never throws.
    static ConvergenceModel from_runs(const std::vector<RunRecord>& runs, double fallback);

    /// Epochs needed at global batch `B` to reach what `epochs_ref` epochs reach at
    /// global batch `B_ref`: epochs_ref (1 + B/B_noise) / (1 + B_ref/B_noise); with e_min > 0,
    /// E_min (1 + B/B_noise), the epochs to target_accuracy (epochs_ref and B_ref unused).
    double epochs_for(double B, double epochs_ref, double B_ref) const { return epochs_with(noise_scale, B, epochs_ref, B_ref); }
    /// epochs_for at another B_noise (examples, > 0; the interval's ends). Pure.
    double epochs_with(double noise_scale, double B, double epochs_ref, double B_ref) const {
        return e_min > 0 ? e_min * (1.0 + B / (noise_scale > 0 ? noise_scale : kDefaultNoiseScale))
                         : epochs_at(noise_scale, B, epochs_ref, B_ref);
    }
    /// epochs_for at a given B_noise (examples, > 0): the interval's ends use the interval's ends.
    static double epochs_at(double noise_scale, double B, double epochs_ref, double B_ref);

    /// "measured in N runs" or `source`, for messages.
    std::string origin() const;
};

/// Test accuracy vs global batch from the run history: acc(B) = a + c log2(B), least squares
/// (Eigen) over finished runs with a test accuracy in (0, 1]; with runs at a single batch
/// size the mean accuracy is used for every B. Runs below kDivergedFraction of the best
/// run's accuracy count as diverged (an optimizer failure, e.g. plain SGD at a too-high
/// rate, not an effect of the batch) and are left out. at() does not extrapolate: B is
/// clamped to the history's batch range. Empty history: known() is false.
struct AccuracyModel {
    /// Runs below this fraction of the best run's test accuracy are left out as diverged.
    static constexpr double kDivergedFraction = 0.5;
    double a = 0, c = 0;
    int runs = 0;        ///< runs fitted
    int diverged = 0;    ///< runs left out as diverged
    int min_batch = 0;   ///< smallest global batch of the fitted runs (0: not set)
    int max_batch = 0;   ///< largest global batch of the fitted runs
    bool known() const { return runs > 0; }
    static AccuracyModel fit(const std::vector<RunRecord>& runs);
    /// fit() over the runs comparable with a job of `epochs` epochs (>= 1) on `examples`
    /// training examples per epoch: runs on as many examples per epoch
    /// (RunRecord::examples_per_epoch(workload_examples)), each with its test accuracy after
    /// `epochs` epochs (its per-epoch curve; its final accuracy when it trained exactly that
    /// many and has no curve). Runs that trained fewer epochs are left out. Never throws.
    static AccuracyModel fit(const std::vector<RunRecord>& runs, int epochs, int64_t examples, int64_t workload_examples);
    /// Expected accuracy (fraction, clamped to [0, 1]); NaN when !known().
    double at(double B) const;
};

}  // namespace tula
