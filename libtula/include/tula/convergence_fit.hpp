// libtula: the critical batch fitted from the run history -- each run's first epoch that
// reaches a target test accuracy, against its global batch, fitted to McCandlish et al.'s
// epochs-vs-batch trade-off. The planner's ConvergenceModel (models.hpp) takes the result.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tula/models.hpp"
#include "tula/records.hpp"
#include "tula/workload.hpp"

namespace tula {

/// One run's epochs to the target: the first epoch (1-based, whole) whose test accuracy
/// reached the target, at the run's global batch (examples per step over all ranks).
struct EpochsToTarget {
    int global_batch = 0;
    double epochs = 0;
    std::string optimizer;  ///< RunRecord::optimizer ("" = not recorded)
};

/// What selecting the runs of one workload for the fit left out, for messages.
struct EpochsSelection {
    std::vector<EpochsToTarget> points;  ///< usable runs, in the order given
    int limited = 0;     ///< trained on part of the data set (tula-train --limit-train)
    int diverged = 0;    ///< left out as diverged (see epochs_to_target_points)
    int short_of = 0;    ///< never reached the target in the epochs they trained
    int no_curve = 0;    ///< without a per-epoch test accuracy
};

/// The runs of workload `w` usable for the fit, with their epochs to `target` (test
/// accuracy, a fraction in (0, 1]). A run is used when it is of `w` (RunRecord::workload ==
/// w.name), trained on the full data set (RunRecord::train_examples 0 or >= w.train_examples),
/// has a per-epoch test accuracy with no non-finite value, did not diverge (its last epoch's
/// accuracy is at least AccuracyModel::kDivergedFraction of the best last-epoch accuracy among
/// the runs of its optimizer) and reached the target in some epoch. Pure; never throws.
EpochsSelection epochs_to_target_points(const std::vector<RunRecord>& runs, const Workload& w, double target);

/// E_min and B_crit of E(B) = E_min (1 + B / B_crit), the epochs needed to reach a given
/// accuracy at global batch B (McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of
/// Large-Batch Training", eq. 2.11, (E/E_min - 1)(S/S_min - 1) = 1 written for epochs; B_crit
/// = E_min / S_min in examples). Fitted by nonlinear least squares on relative residuals
/// (E(B_i) - E_i) / E_i with GSL's gsl_multifit_nlinear (trust region, Levenberg-Marquardt) in
/// (ln E_min, ln B_crit), started from the weighted linear fit of E = E_min + (E_min/B_crit) B
/// (the same model, linear in its two coefficients). The runs of one batch enter through their
/// sums of 1/E_i and 1/E_i^2 (their part of the cost is a quadratic in E(B)), so a fit costs
/// O(distinct batches) per iteration after one O(runs) pass.
///
/// Intervals: a percentile bootstrap over runs (Efron & Tibshirani 1993, "An Introduction to
/// the Bootstrap", ch. 13): `resamples` resamples of the runs with replacement, drawn from a
/// std::mt19937_64 seeded with `seed` (reproducible), each refitted; resamples with fewer than
/// 2 distinct batches are skipped. B_crit is kept within [kMinFactor x smallest batch,
/// kMaxFactor x largest batch]: beyond them the history shows no measurable batch penalty
/// (or only penalty), which the data cannot size.
struct CriticalBatchFit {
    static constexpr int kResamples = 200;
    static constexpr uint64_t kSeed = 20181214;  ///< the default bootstrap seed
    static constexpr double kLevel = 0.95;       ///< of the percentile intervals
    static constexpr double kMinFactor = 1e-3, kMaxFactor = 1e4;
    double e_min = 0;   ///< E_min, epochs (the epochs at B -> 0)
    double b_crit = 0;  ///< B_crit, examples
    /// kLevel percentile intervals of the bootstrap; equal to the estimate without resamples.
    double e_min_low = 0, e_min_high = 0, b_crit_low = 0, b_crit_high = 0;
    int runs = 0;        ///< runs fitted
    int batches = 0;     ///< distinct global batches among them (>= 2)
    int resamples = 0;   ///< bootstrap resamples that were fitted
    double rms_rel = 0;  ///< root-mean-square relative residual of the fit, a fraction
    /// E(B), epochs at global batch B (examples). Pure.
    double epochs(double B) const { return e_min * (1.0 + B / b_crit); }
};

/// Fits `points` (see CriticalBatchFit). Errors: tula::Error when the points cover fewer
/// than 2 distinct global batches, a point has a batch < 1 or epochs that are not a finite
/// number > 0, or GSL fails on the full sample (a failed resample is skipped).
CriticalBatchFit fit_critical_batch(const std::vector<EpochsToTarget>& points,
                                    int resamples = CriticalBatchFit::kResamples,
                                    uint64_t seed = CriticalBatchFit::kSeed);

/// The planner's convergence model for workload `w` from its run history and a target test
/// accuracy `target` (a fraction in (0, 1]; 0 = none). Without a target: `prior`. With one:
/// the usable runs (epochs_to_target_points) of one optimizer -- `optimizer` when not empty,
/// else the optimizer whose runs cover the most distinct batches (then the most runs; "" is
/// the runs that recorded none) -- at 2 or more global batches give fit_critical_batch's
/// B_crit (noise_scale, with the bootstrap interval) and E_min (ConvergenceModel::e_min, so
/// that epochs_for gives E(B) itself); at one batch B_0 the prior's B_noise stays and E_min =
/// median(E_i) / (1 + B_0 / B_noise); with none, `prior` unchanged. `note` (when given) gets
/// one line saying what was fitted or why not. Errors: tula::Error for a target outside
/// (0, 1] or a failed fit.
ConvergenceModel convergence_from_history(const std::vector<RunRecord>& runs, const Workload& w, double target,
                                          const ConvergenceModel& prior, const std::string& optimizer = "",
                                          std::string* note = nullptr);

/// The test accuracy `epochs` epochs reach at global batch `batch` in the run history of `w`:
/// the median, over the runs of `w` at that batch on the full data set with a per-epoch test
/// accuracy of at least `epochs` epochs (none non-finite), of their accuracy after `epochs`
/// epochs; runs below AccuracyModel::kDivergedFraction of the best of them are left out as
/// diverged. 0 when there is no such run. Pure.
double reference_accuracy(const std::vector<RunRecord>& runs, const Workload& w, int batch, int epochs);

/// The planner's convergence model from the run history (tula plan, the sbatch plugin):
/// with `target` > 0 (tula plan --target-accuracy), convergence_from_history, its note to
/// `warnings` unless B_crit was fitted. Without one, the target is what the requested
/// `epochs` reach at the reference batch `ref_batch` (reference_accuracy); when the history
/// fits B_crit to it (2 or more batches), B_noise is that B_crit with its bootstrap interval
/// and the epochs stay relative to `epochs` at `ref_batch` (e_min 0), so that the job's own
/// batch trains the requested epochs; otherwise `prior` (B_simple or tula.conf's). A fit
/// that fails (GSL) gives `prior` and a warning. `optimizer`: the runs the fit uses (as
/// convergence_from_history; "auto" counts as ""). Errors: tula::Error for a target outside
/// (0, 1] other than 0.
ConvergenceModel history_convergence(const std::vector<RunRecord>& runs, const Workload& w, double target,
                                     int ref_batch, int epochs, const ConvergenceModel& prior,
                                     std::vector<std::string>* warnings, const std::string& optimizer = "");

}  // namespace tula
