// tula-train: Local SGD with adaptive batch sizes (Lau et al. 2024, "Communication-efficient
// adaptive batch size strategies for distributed local gradient methods"): H local steps
// per rank between parameter-averaging rounds, and the norm test or the inner-product
// test, on gradient variances combined over the ranks, deciding when the batch grows.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "core/model.hpp"
#include "optim/noise_scale.hpp"
#include "train/train.hpp"

namespace tula {
namespace train {

/// Which test decides the batch growth.
///  None:  the batch stays fixed (plain Local SGD).
///  Norm:  the norm test (Byrd et al. 2012, "Sample size selection in optimization methods
///         for machine learning", eq. 3.9; used for local methods by Lau et al. 2024, §3):
///         keep b while tr(Var_i grad f_i) / b <= eta^2 |g|^2, else
///         b <- ceil(tr(Var_i grad f_i) / (eta^2 |g|^2)).
///  Inner: the inner-product test (Bollapragada, Byrd & Nocedal 2018, "Adaptive sampling
///         strategies for stochastic optimization", eq. 3.8; Lau et al. 2024, §3):
///         keep b while Var_i(grad f_i . g) / b <= theta^2 |g|^4, else
///         b <- ceil(Var_i(grad f_i . g) / (theta^2 |g|^4)).
/// g is the mean gradient over all ranks' examples, Var_i the variance over examples, b the
/// local batch of one rank (the global batch is K b).
enum class BatchTest { None, Norm, Inner };

/// Parses "none", "norm", "inner". Errors: std::invalid_argument naming the valid ones.
BatchTest parse_batch_test(const std::string& s);

/// The sums one rank contributes to the batch tests; every field is a sum over ranks
/// after combine_batch_sums / BatchVariance::finish. Built from M micro-batches of sizes
/// m_i with mean gradients h_i (vectors of num_params):
struct BatchSums {
    std::vector<double> weighted_sum;  ///< sum_i m_i h_i, (num_params,)
    double examples = 0;               ///< sum_i m_i (the rank's local batch b_r)
    double micro = 0;                  ///< M, micro-batches
    double sq_within = 0;              ///< sum_i m_i |h_i|^2
    /// b_r |gbar_r|^2 of the rank's own mean gradient gbar_r = weighted_sum / b_r (summed
    /// over ranks once combined); set by BatchVariance::sums().
    double sq_rank_means = 0;
    double ranks = 0;                  ///< ranks whose sums these are (1 per rank; set by sums())
};

/// Sums of several ranks combined (what the allreduce computes): elementwise sums of every
/// field. Errors: std::invalid_argument when the vectors differ in size.
BatchSums combine_batch_sums(const std::vector<BatchSums>& parts);

/// What the batch tests need, over the examples of all ranks.
struct BatchStatistics {
    double trace = 0;     ///< tr(Var_i grad f_i), the per-example gradient variance summed over parameters
    /// The same variance from the spread of the micro-batches around their own rank's mean
    /// only: sum_r [sum_{i in r} m_i |h_i|^2 - b_r |gbar_r|^2] / (M_total - R), R ranks (the
    /// within-group term of the law of total variance; each group's mean costs one degree of
    /// freedom). In Local SGD the ranks' parameters drift apart between averaging rounds, so
    /// the between-rank term of `trace` also holds that drift, which is not gradient noise;
    /// this one does not. Equals `trace` on one rank. 0 when M_total <= R or the rank sums are
    /// not set (ranks = 0).
    double trace_within = 0;
    double grad_norm2 = 0;  ///< |g|^2 of the mean gradient g
    double ip_var = 0;    ///< Var_i(grad f_i . g) (inner-product test; 0 unless asked for)
    double examples = 0;  ///< N, examples over all ranks
};

/// The per-example variance from micro-batch means (each micro-batch mean of m examples
/// has covariance Sigma / m, so m |h_i - g|^2 estimates tr(Sigma)), pooled over all
/// micro-batches of all ranks with the law of total variance:
///   sum_i m_i |h_i - g|^2 = sum_r [ sum_{i in r} m_i |h_i|^2 - b_r |gbar_r|^2 ]   (within ranks)
///                           + sum_r b_r |gbar_r|^2 - N |g|^2                          (between ranks)
///   tr(Sigma) ~ that / (M_total - 1)  (unbiased for equal micro-batch sizes).
/// The within and between terms telescope to sum_all m_i |h_i|^2 - N |g|^2, so the ranks
/// need to add up only weighted_sum, examples, micro and sq_within. 0 when M_total < 2
/// (clamped at 0 against rounding). trace_within from sq_rank_means and ranks (see
/// BatchStatistics). `s` is already combined over ranks.
BatchStatistics batch_statistics(const BatchSums& s);

/// The local batch after the test: ceil(need), need as in BatchTest, between min_batch and
/// max_batch and, when max_growth > 1, at most floor(max_growth * b) (that factor per
/// averaging round; 0: no such cap). The batch follows the estimate down as well as up (to
/// min_batch, the run's starting batch in train_local_sgd): with statistics from a few
/// micro-batches a batch that could only grow followed the running maximum of noisy
/// estimates. b itself when the statistic is not finite or |g| = 0, or the test is None.
/// eta / theta > 0. The growth cap and the way down are this project's additions to Lau et
/// al. 2024 (the cap off by default): the rate follows the batch (linear scaling), so a cap
/// bounds how fast it rises.
int next_local_batch(BatchTest test, int b, const BatchStatistics& st, double eta, double theta, int max_batch,
                     double max_growth = 0, int min_batch = 1);

/// Exponential moving average of BatchStatistics over averaging rounds: trace, trace_within,
/// grad_norm2 and ip_var each as E_k = beta E_{k-1} + (1 - beta) x_k (E_1 = x_1); examples
/// the last round's. The batch tests then act on a variance of many micro-batches, not on
/// one round's M - 1 degrees of freedom. beta in [0, 1) (clamped). Errors: none.
class BatchStatisticsEma {
public:
    explicit BatchStatisticsEma(double beta);
    /// Takes round k's statistics; returns the averages so far. Non-finite values are ignored.
    const BatchStatistics& add(const BatchStatistics& st);
    const BatchStatistics& value() const { return ema_; }

private:
    double beta_;
    BatchStatistics ema_;
    bool have_ = false;
};

/// Feeds one round's unbiased noise-scale estimates to `ns` (McCandlish et al. 2018, App.
/// A.1): tr(Sigma) ~ st.trace_within (micro-batches against their rank's mean, two batch
/// sizes within each rank), |G|^2 ~ st.grad_norm2 - st.trace_within / st.examples (since
/// E|g_N|^2 = |G|^2 + tr(Sigma) / N for the mean g_N of N = st.examples examples). The raw
/// |g_N|^2 is biased upward, so tr / |g_N|^2 was biased below B_simple. Returns false (and
/// feeds nothing) when there is no within-rank variance (trace_within <= 0) or no examples.
bool add_local_noise(NoiseScale& ns, const BatchStatistics& st);

/// Collects one rank's micro-batch gradients h_i (mean gradients, (num_params,)) and turns
/// them into BatchStatistics over all ranks. Keeps the h_i only when the inner-product test
/// needs them (M x num_params floats).
class BatchVariance {
public:
    BatchVariance(size_t num_params, bool keep_micro);
    /// Starts a new measurement.
    void clear();
    /// Adds micro-batch mean gradient h (num_params,) of m > 0 examples.
    void add(const float* h, int m);
    /// This rank's sums so far, with sq_rank_means and ranks (1) set as for the allreduce.
    BatchSums sums() const;
    /// Allreduces sums() over comm (one vector and one scalar allreduce; with Inner one more
    /// scalar allreduce for the inner products with the global mean gradient) and returns the
    /// statistics, identical on every rank. Collective.
    BatchStatistics finish(Comm& comm, bool inner);

private:
    BatchSums s_;
    bool keep_;
    std::vector<std::vector<float>> h_;
    std::vector<int> m_;
    std::vector<float> buf_;
};

/// Settings of Local SGD.
struct LocalSgdConfig {
    int local_steps = 1;          ///< H >= 1: local steps per averaging round
    BatchTest test = BatchTest::Norm;
    double eta = 0.5;             ///< norm-test eta (Lau et al. use 0.1-0.5)
    double theta = 0.5;           ///< inner-product-test theta
    int micro_batches = 4;        ///< M >= 2 micro-batches per local batch for the variance
    /// EMA weight of the batch test's statistics over rounds (BatchStatisticsEma); 0: each
    /// round's own.
    double test_beta = 0.9;
    int max_local_batch = 0;      ///< cap on the local batch; 0: the training set / K
    double max_growth = 0;        ///< largest factor the batch may grow by per round (0: unlimited)
    /// Share of memory the growing batch may take (memory_local_batch_cap); 0: no memory cap.
    double memory_fraction = 0.75;
    int local_ranks = 1;          ///< ranks of this job on this host, sharing its memory
    /// Called once, on rank 0, when the memory cap first stops a growth: the global batch it
    /// stops at (examples) and the bytes the kernel reported available (MemAvailable).
    std::function<void(int global_batch, double available_bytes)> on_memory_cap;
};

/// The largest local batch (examples per rank) whose training buffers fit in memory, from
/// what the run has measured: the process held rss_base bytes before its first step and
/// holds rss_now bytes with buffers for local batch b, so one example costs about
/// (rss_now - rss_base) / b bytes (an over-estimate: what does not grow with b counts too).
/// The budget is fraction * (rss_now + available / local_ranks) bytes: this rank's share of
/// what the kernel reports available (MemAvailable) plus what it holds already. Returns
/// floor((budget - rss_base) / per_example), never below b; INT_MAX (no cap) when a figure
/// is not finite or not positive, or nothing grew with the batch (rss_now <= rss_base).
/// Byte figures in bytes. This project's guard (Lau et al. 2024 have a fixed cap): the norm
/// test grows fmnist-cnn's batch to 20,000-40,000 examples, about 2 MB each on the CPU path.
int memory_local_batch_cap(double rss_base, double rss_now, int b, double available, int local_ranks,
                           double fraction);

/// This process's resident set in bytes (/proc/self/statm); NaN when it cannot be read.
double resident_bytes();

/// What the memory limit of a control group leaves, bytes: cgroup v2's memory.max -
/// memory.current, v1's memory.limit_in_bytes - memory.usage_in_bytes (a Slurm job under
/// task/cgroup gets its --mem there), the smaller where both are set. `proc_self_cgroup` is
/// the text of /proc/self/cgroup ("0::/path" for v2, "N:memory:/path" for v1); `root` is where
/// the cgroup file systems are mounted (v2 at root or root/unified, v1 at root/memory). A
/// group path that does not exist under its mount (a container that shows its own group as
/// the mount's root, without a cgroup namespace) is looked up with its leading components
/// dropped, down to the mount itself. NaN when no limit is set or none can be read.
double cgroup_memory_left(const std::string& proc_self_cgroup, const std::string& root = "/sys/fs/cgroup");

/// The memory this process may still allocate, bytes: the kernel's MemAvailable
/// (/proc/meminfo), or less when its control group has a memory limit (cgroup v2
/// memory.max - memory.current, v1 memory.limit_in_bytes - memory.usage_in_bytes: a Slurm
/// job's --mem under task/cgroup); NaN when neither can be read.
double available_memory_bytes();

/// Trains like train() (same TrainConfig: rate, optimizer, epochs, seed, evaluation) with
/// Local SGD: each rank r takes its own slice of every global batch (the first K b
/// examples not yet used in the epoch's permutation, rank r the r-th b of them) and runs
/// the update on its local gradient without communication; after every H local steps (and
/// at the end of each epoch) the ranks average their parameters and batch-norm running
/// statistics (one allreduce each; the optimizer's momentum stays local). At the last local
/// step of each round the rank's batch is run as M micro-batches, their gradients feed
/// BatchVariance, and next_local_batch gives the local batch of the following rounds; the
/// decision is made from allreduced values and then max-reduced, so all ranks agree. The
/// rate of a step is the schedule's rule for the current global batch K b (LrSchedule::
/// at_progress) at the fraction of the run's examples seen so far. EpochResult::batch is
/// the global batch at the epoch's end, noise_scale the last tr(Sigma)/|g|^2 of the test,
/// grad_norm the mean over steps and ranks of the LOCAL gradient's norm. The batch test acts
/// on BatchStatisticsEma(test_beta) of the rounds' statistics, and the batch may fall back
/// to the starting one. The noise scale reported and used as the schedule's B_noise for
/// LrScaling::Noise (B_simple = tr(Sigma)/|G|^2, McCandlish et al. 2018) is a NoiseScale
/// (cfg.noise_beta) fed by add_local_noise: unbiased estimates, smoothed; it takes
/// BatchStatistics::trace_within, not the pooled trace of the batch test: on 2 ranks the
/// pooled one (with the drift between the ranks' parameters) gave 180-1,820 examples against
/// 22-490 on 1 rank (lenet5, epochs 2-4, measured with tr / |g|^2 before add_local_noise), the
/// noise-scale rule raised AGS's rate to 0.59-1.22, and all 6 runs from global batch 1024 and
/// 4096 fell to chance. The per-step two-batch estimate (noise_every) is not taken here.
/// cfg.global_batch is the starting global batch (a multiple of K). Errors: TrainError as
/// train(), and for H < 1 or M < 2.
std::vector<EpochResult> train_local_sgd(Model& model, const Dataset& train_set, const Dataset& test_set,
                                         const TrainConfig& cfg, const LocalSgdConfig& lcfg, Comm& comm,
                                         const std::function<void(const EpochResult&)>& on_epoch);

}  // namespace train
}  // namespace tula
