// libtula: performance models fitted from profiles.
#pragma once
#include <vector>

#include "tula/db.hpp"

namespace tula {

/// Compute time of one training iteration vs local batch b (examples per rank):
///   t(b) = t0 + t1 * b        [seconds]
/// t0 is the per-iteration overhead (kernel launches, optimizer step), t1 the
/// per-example cost; fitted by ordinary least squares (Eigen, QR) over the samples.
/// The form follows Scavenger (Tyagi & Sharma 2023), tau = compute(b) + sync(K).
struct ComputeModel {
    double t0 = 0;       ///< seconds per iteration
    double t1 = 0;       ///< seconds per example
    int min_batch = 0;   ///< smallest profiled local batch
    int max_batch = 0;   ///< largest profiled local batch
    double rmse = 0;     ///< root-mean-square residual of the fit, seconds

    /// Least-squares fit. Errors: tula::Error when there are fewer than 2 distinct
    /// local batches, or a sample has a non-positive or non-finite time.
    static ComputeModel fit(const std::vector<ComputeSample>& samples);

    /// Predicted seconds per iteration at local batch `b` (> 0).
    double seconds_per_iter(double b) const { return t0 + t1 * b; }
};

/// Ring-allreduce alpha-beta model (Thakur, Rabenseifner & Gropp 2005, eq. for ring
/// reduce-scatter + allgather):
///   T(K, n) = 2 (K-1) alpha + 2 (K-1)/K * n * beta      [seconds], T(1, n) = 0
/// with n the message size in bytes. Fitted by non-negative least squares over the samples
/// (Eigen); both coefficients are clamped at 0.
struct AllreduceModel {
    double alpha = 0;    ///< latency per step, seconds
    double beta = 0;     ///< seconds per byte
    double rmse = 0;     ///< residual, seconds

    /// Errors: tula::Error when there are no samples with nodes >= 2, or fewer than 2
    /// distinct (nodes, bytes) points.
    static AllreduceModel fit(const std::vector<AllreduceSample>& samples);

    double seconds(int nodes, double bytes) const;
};

}  // namespace tula
