// libtula: the step model fitted to the finished runs of one workload on one hardware class
// (StepFit). The profiles give the modelled step of a placement; the runs measured at some
// placements correct it, and the correction carries over to the placements not measured.
// Pure: no SQLite, no Slurm. Derivation: docs/models.md, "The step fitted to the runs".
#pragma once
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
};

/// The step model of the runs (docs/models.md, "The step fitted to the runs"): the modelled step
/// m(K, R, b), whose compute part is c(R, b), plus the runs' evidence
///   tau(K, R, b) = m + c theta_R + psi(K) u phi_R,   psi(K) = 2 (K - 1) / K,
///   theta_R = theta_0 + theta'_R,  phi_R = phi_0 + phi'_R,
/// psi being the ring allreduce's bandwidth term relative to 2 nodes (Thakur et al. 2005; 0 on
/// one node, 1 on two, below 2 on any count) and u the runs' median c (seconds). theta is the
/// share of compute the model missed, growing with the local batch, and phi the exchange it
/// missed, the same at every local batch; pooled (theta_0, phi_0) and per ranks per node
/// (theta'_R, phi'_R). The coefficients are the posterior mean of a Gaussian linear model
/// (ridge regression: prior sd kPriorPooled, kPriorPerRanks, kPriorExchangePooled and
/// kPriorExchangePerRanks), each run weighted by 1 / s^2 so that its residual counts relative to
/// its step: a few runs that disagree move the step little, many that agree move it nearly all
/// the way. With no run the step is the modelled one; each run
/// moves its own placement and, through the pooled and per-R terms, its neighbours (other local
/// batches, node counts and ranks per node).
struct StepFit {
    static constexpr double kPriorPooled = 0.1;    ///< prior sd of theta_0 (units of c)
    static constexpr double kPriorPerRanks = 0.1;  ///< prior sd of theta'_R (units of c)
    static constexpr double kPriorExchangePerRanks = 0.5;  ///< prior sd of phi'_R (units of u)
    static constexpr double kPriorExchangePooled = 0.05;  ///< prior sd of phi_0
    static constexpr double kNoisePrior = 0.10;    ///< prior relative sd of a run's step
    static constexpr double kNoisePriorWeight = 2; ///< pseudo-runs behind kNoisePrior
    static constexpr double kFloor = 0.25;         ///< tau is at least kFloor x m
    /// relative sd of tau added per doubling of the node count beyond the runs' largest
    /// (max_nodes): the form's own error where no run was measured; the least `extrapolation`
    /// takes, and its value where the runs cannot check it (one node count)
    static constexpr double kExtrapolation = 0.1;

    int runs = 0;               ///< runs fitted (0: no fit; tau = m)
    double theta0 = 0, phi0 = 0;
    double scale_seconds = 0;   ///< u, seconds
    std::map<int, std::pair<double, double>> per_ranks;  ///< R -> (theta'_R, phi'_R)
    /// Posterior covariance of the coefficients in the order theta_0, phi_0, then (theta'_R,
    /// phi'_R) by ascending R; (2 + 2 |per_ranks|)^2 values, row-major.
    std::vector<double> covariance;
    double sigma = kNoisePrior;  ///< relative sd of a run's step about tau (residuals and prior)
    int max_nodes = 0;           ///< the largest node count of the runs fitted
    /// relative sd of tau per doubling of the node count beyond max_nodes: at least
    /// kExtrapolation, more where the runs on fewer nodes miss those on max_nodes by more
    /// than their fit's own sd (extrapolation_from)
    double extrapolation = kExtrapolation;

    /// Fits the model to `obs` (those with s, m, c > 0 and finite; the others are skipped),
    /// with `extrapolation` from extrapolation_from. No usable observation: runs = 0.
    /// Errors: none.
    static StepFit fit(const std::vector<StepObservation>& obs);
    /// The coefficients, covariance and sigma of fit(), with `extrapolation` at kExtrapolation.
    /// Errors: none.
    static StepFit fit_coefficients(const std::vector<StepObservation>& obs);
    /// The extrapolation term the runs show (docs/models.md, "The step fitted to the runs"):
    /// the usable runs on fewer than `max_nodes` nodes are fitted alone and predict those on
    /// `max_nodes`; with r the relative error of each and sigma' that fit's noise, the term is
    /// sqrt(max(0, mean(r^2) - sigma'^2)) / log2(max_nodes / K'), K' the left-out fit's largest
    /// node count, and at least kExtrapolation. kExtrapolation when the runs have one node count.
    /// Errors: none.
    static double extrapolation_from(const std::vector<StepObservation>& obs, int max_nodes);
    /// c theta_R + psi(K) u phi_R: seconds to add to the modelled step m; 0 without a fit.
    /// Ranks per node never run take the pooled terms. Pure.
    double correction(int nodes, int ranks_per_node, double compute_seconds) const;
    /// c theta_R: the part of correction() that is compute; seconds. Pure.
    double compute_correction(int ranks_per_node, double compute_seconds) const;
    /// tau = max(kFloor m, m + correction). Pure.
    double seconds(int nodes, int ranks_per_node, double model_seconds, double compute_seconds) const;
    /// The standard deviation of tau's prediction of a new run at (K, R): x' Sigma x for the
    /// coefficients (x = the feature row: c and psi(K) u), plus (sigma tau)^2 for the run
    /// itself, plus (extrapolation log2(K / max_nodes) tau)^2 when K > max_nodes,
    /// square-rooted; seconds. Pure.
    double sd(int nodes, int ranks_per_node, double tau, double compute_seconds) const;
    /// sd() with `per_doubling` in place of `extrapolation` (0: the fit's own sd). Pure.
    double sd(int nodes, int ranks_per_node, double tau, double compute_seconds, double per_doubling) const;
};

/// The fit of hardware class `cls` in `fits` (per class, "" for runs of no class): that
/// class's, else the class-less runs', else nullptr. Pure.
inline const StepFit* find_step_fit(const std::map<std::string, StepFit>& fits, const std::string& cls) {
    auto it = fits.find(cls);
    if (it == fits.end()) it = fits.find(std::string());
    return it == fits.end() || it->second.runs == 0 ? nullptr : &it->second;
}

}  // namespace tula
