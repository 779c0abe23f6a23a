// libtula: the step model fitted to the finished runs of one workload on one hardware class
// (StepFit). The profiles give the modelled step of a placement; the runs measured at some
// placements correct it, and the correction carries over to the placements not measured.
// Pure: no SQLite, no Slurm. Derivation: docs/models.md, "The step fitted to the runs".
#pragma once
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace tula {

/// One finished run as evidence about the step: its placement, its measured seconds per step
/// and what the profiles' model predicts there.
struct StepObservation {
    int nodes = 1;                ///< K
    int ranks_per_node = 1;       ///< R
    double local_batch = 0;       ///< b, examples per rank per step (for the record; not fitted)
    double measured_seconds = 0;  ///< s: the run's steady seconds / its steps, seconds
    double model_seconds = 0;     ///< m: the modelled step at (K, R, b), seconds
    double compute_seconds = 0;   ///< c: the modelled step's compute part at (R, b), seconds
    /// Evidence of another workload on the class (borrowed_exchange_observations): s - m is the
    /// exchange it says this workload's model missed at (K, R); it informs phi only (c is 0),
    /// with relative sd kBorrowedNoise, and is never left out, counted in `runs`, `max_nodes`,
    /// u or sigma.
    bool borrowed = false;
};

/// The step model of the runs (docs/models.md, "The step fitted to the runs"): the modelled step
/// m(K, R, b), whose compute part is c(R, b), plus the runs' evidence
///   tau(K, R, b) = m + c theta + psi(K, R) u phi,
///   theta = theta_0 + theta'_R [+ theta''_{R,b}],  phi = phi_0 + phi'_R,
/// psi being the bandwidth term of a ring allreduce over the K R ranks relative to 2 nodes of R
/// (psi() below; 0 on one node, 1 on two) and u the runs' median c (seconds). theta is the
/// share of compute the model missed and phi the exchange it missed (in units of u): pooled
/// (theta_0, phi_0), per ranks per node (theta'_R, phi'_R) and, in the per-batch form, a compute
/// share per ranks per node and local batch (theta''_{R,b}), which carries a run's step at
/// (R, b) to the other node counts at (R, b). The coefficients are the posterior mean of a
/// Gaussian linear model (ridge regression: prior sd kPriorPooled, kPriorExchangePooled,
/// kPriorPerRanks, kPriorExchangePerRanks and kPriorPerBatch), each run weighted by 1 / s^2 so
/// that its residual counts relative to its step: a few runs that disagree move the step little,
/// many that agree move it nearly all the way. With no run the step is the modelled one; each run
/// moves its own placement and, through the pooled and per-R terms, its neighbours (other local
/// batches, node counts and ranks per node). The runs choose the form by leaving their
/// placements out: the per-batch form, unless its squared errors exceed those of the form without
/// it by more than one standard error of their mean paired difference; one placement: without.
/// Borrowed observations (another workload's exchange on the class) enter the phi columns only,
/// at their own noise kBorrowedNoise, as a prior from the class that the workload's runs outweigh.
struct StepFit {
    static constexpr double kPriorPooled = 0.1;    ///< prior sd of theta_0 (units of c)
    static constexpr double kPriorPerRanks = 0.1;  ///< prior sd of theta'_R (units of c)
    static constexpr double kPriorExchangePerRanks = 0.5;  ///< prior sd of phi'_R (units of u)
    static constexpr double kPriorExchangePooled = 0.05;  ///< prior sd of phi_0
    static constexpr double kPriorPerBatch = 0.1;  ///< prior sd of theta''_{R,b} (units of c)
    static constexpr int kFolds = 20;              ///< most folds of placements left out
    static constexpr double kNoisePrior = 0.10;    ///< prior relative sd of a run's step
    static constexpr double kNoisePriorWeight = 2; ///< pseudo-runs behind kNoisePrior
    static constexpr double kFloor = 0.25;         ///< tau is at least kFloor x m
    /// relative sd of tau added per doubling of the node count beyond the runs' largest
    /// (max_nodes): the form's own error where no run was measured; the least `extrapolation`
    /// takes, and its value where the runs cannot check it (one node count)
    static constexpr double kExtrapolation = 0.1;
    /// relative sd of a borrowed observation's step: how far the exchange per gradient byte of
    /// one workload misses another's on the same class
    static constexpr double kBorrowedNoise = 0.3;

    /// (R, b): ranks per node and local batch (examples, batch_key) of the per-batch terms.
    using BatchKey = std::pair<int, double>;

    int runs = 0;               ///< runs of the workload fitted (0: no fit; tau = m)
    int borrowed = 0;           ///< borrowed observations fitted (other workloads' exchange)
    double theta0 = 0, phi0 = 0;
    double scale_seconds = 0;   ///< u, seconds
    std::map<int, std::pair<double, double>> per_ranks;  ///< R -> (theta'_R, phi'_R)
    /// (R, b) -> theta''_{R,b}; empty unless the per-batch form was chosen.
    std::map<BatchKey, double> per_batch;
    /// Posterior covariance of the coefficients in the order theta_0, phi_0, then (theta'_R,
    /// phi'_R) by ascending R, then theta''_{R,b} by ascending (R, b);
    /// (2 + 2 |per_ranks| + |per_batch|)^2 values, row-major.
    std::vector<double> covariance;
    double sigma = kNoisePrior;  ///< relative sd of a run's step about tau (residuals and prior)
    int max_nodes = 0;           ///< the largest node count of the runs fitted
    /// relative sd of tau per doubling of the node count beyond max_nodes: at least
    /// kExtrapolation, more where the runs on fewer nodes miss those on max_nodes by more
    /// than their fit's own sd (extrapolation_from)
    double extrapolation = kExtrapolation;
    /// Root mean squared relative error of the runs' steps, each predicted by the form without
    /// per-batch terms (left_out_error) and with them (left_out_error_per_batch) fitted with its
    /// placement left out: the distinct placements (K, R, b), ascending, in min(count, kFolds)
    /// folds, placement j in fold j mod folds, at the full fit's sigma. NaN: the forms were not
    /// compared (one placement).
    double left_out_error = std::numeric_limits<double>::quiet_NaN();
    double left_out_error_per_batch = std::numeric_limits<double>::quiet_NaN();

    /// Fits the model to `obs` (those with s, m, c > 0 and finite and b finite, a borrowed one
    /// with s, m > 0 and c = 0; the others are skipped), with `extrapolation` from
    /// extrapolation_from. No usable observation of the workload's own: runs = 0.
    /// Errors: none.
    static StepFit fit(const std::vector<StepObservation>& obs);
    /// The form, coefficients, covariance and sigma of fit(), with `extrapolation` at
    /// kExtrapolation. Errors: none.
    static StepFit fit_coefficients(const std::vector<StepObservation>& obs);
    /// The extrapolation term the runs show (docs/models.md, "The step fitted to the runs"):
    /// the usable runs on fewer than `max_nodes` nodes are fitted alone and predict those on
    /// `max_nodes`; with r the relative error of each and sigma' that fit's noise, the term is
    /// sqrt(max(0, mean(r^2) - sigma'^2)) / log2(max_nodes / K'), K' the left-out fit's largest
    /// node count, and at least kExtrapolation. kExtrapolation when the runs have one node count.
    /// Errors: none.
    static double extrapolation_from(const std::vector<StepObservation>& obs, int max_nodes);
    /// psi(K, R) = [(N - 1) / N] / [(N2 - 1) / N2], N = K R, N2 = 2 R, for K >= 2; 0 for K <= 1:
    /// the bytes each node sends in a ring allreduce over all N ranks, 2 (N - 1) / N of the
    /// message (Thakur, Rabenseifner & Gropp 2005, sec. 4.5; nccl-tests' bus bandwidth,
    /// busbw = algbw x 2 (n - 1) / n, doc/PERFORMANCE.md), relative to the same R on 2 nodes.
    /// psi(K, 1) = 2 (K - 1) / K: below 2 on any count; with R ranks per node below
    /// 2R / (2R - 1). Pure.
    static double psi(int nodes, int ranks_per_node = 1) {
        if (nodes <= 1) return 0.0;
        const double n = static_cast<double>(nodes) * (ranks_per_node < 1 ? 1 : ranks_per_node);
        const double n2 = 2.0 * (ranks_per_node < 1 ? 1 : ranks_per_node);
        return ((n - 1) / n) / ((n2 - 1) / n2);
    }
    /// The local batch b (examples) as a per-batch key: rounded to 1e-3 examples. Pure.
    static double batch_key(double local_batch);
    /// "per-batch" when per_batch holds terms, else "per-ranks". Pure.
    const char* form() const { return per_batch.empty() ? "per-ranks" : "per-batch"; }
    /// (theta, phi) at (R, b): the pooled terms plus those of R and of (R, b) that were fitted;
    /// ranks per node never run take the pooled terms. Pure.
    std::pair<double, double> terms(int ranks_per_node, double local_batch) const;
    /// c theta + psi(K, R) u phi: seconds to add to the modelled step m at (K, R, b); 0 without a
    /// fit. Pure.
    double correction(int nodes, int ranks_per_node, double local_batch, double compute_seconds) const;
    /// c theta: the part of correction() that is compute; seconds. Pure.
    double compute_correction(int ranks_per_node, double local_batch, double compute_seconds) const;
    /// tau = max(kFloor m, c (1 + theta), m + correction): at least the compute part with its
    /// share theta (an exchange the runs missed does not make a step shorter than its compute). Pure.
    double seconds(int nodes, int ranks_per_node, double local_batch, double model_seconds,
                   double compute_seconds) const;
    /// The standard deviation of tau's prediction of a new run at (K, R, b): x' Sigma x for the
    /// coefficients (x = the feature row: c for each theta and psi(K, R) u for each phi that
    /// applies), plus (s tau)^2 for the run itself, s = sigma or, where larger, the chosen form's
    /// left-out error, plus (extrapolation log2(K / max_nodes) tau)^2 when K > max_nodes,
    /// square-rooted; seconds. Pure.
    double sd(int nodes, int ranks_per_node, double local_batch, double tau, double compute_seconds) const;
    /// seconds(), compute_correction() and sd() at tau = seconds(), from one lookup of the terms.
    struct Prediction {
        double seconds = 0;             ///< tau, seconds
        double compute_correction = 0;  ///< c theta, seconds
        double sd = 0;                  ///< sd() at tau, seconds
    };
    /// The three at (K, R, b) for the modelled step m and its compute part c (seconds). Pure.
    Prediction predict(int nodes, int ranks_per_node, double local_batch, double model_seconds,
                       double compute_seconds) const;
};

/// The fit of hardware class `cls` in `fits` (per class, "" for runs of no class): that
/// class's, else the class-less runs', else nullptr. Pure.
inline const StepFit* find_step_fit(const std::map<std::string, StepFit>& fits, const std::string& cls) {
    auto it = fits.find(cls);
    if (it == fits.end()) it = fits.find(std::string());
    return it == fits.end() || it->second.runs == 0 ? nullptr : &it->second;
}

}  // namespace tula
