// tula-train: the largest eigenvalue of the Hessian of the training loss (the "sharpness")
// by power iteration on Hessian-vector products taken as central finite differences of
// gradients; a probe that evaluates it for a Model on a fixed batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "core/layers.hpp"
#include "core/model.hpp"

namespace tula {
namespace train {

/// A gradient oracle: writes dL/dw at parameters w[0..n) into g[0..n). It must be
/// deterministic (the same w gives the same g), since Hessian-vector products are taken
/// as differences of two of its values.
using GradientFn = std::function<void(const float* w, float* g)>;

/// Settings of top_hessian_eigenvalue.
struct PowerIterConfig {
    int max_iters = 20;     ///< power iterations (2 gradient evaluations each), >= 1
    double tol = 1e-3;      ///< stop when |lambda_k - lambda_{k-1}| <= tol * |lambda_k|
    /// Finite-difference step relative to the parameter norm: eps = eps_rel * max(|w|, 1)
    /// (the perturbation eps * v has norm eps, v being a unit vector).
    double eps_rel = 1e-3;
};

/// What top_hessian_eigenvalue found.
struct PowerIterResult {
    double eigenvalue = 0;  ///< the Rayleigh quotient v'Hv of the last iterate (loss units / parameter^2)
    int iterations = 0;     ///< power iterations run
    bool converged = false; ///< the relative change fell to tol before max_iters
};

/// The eigenvalue of largest magnitude of the Hessian H of the loss at w (near a minimum
/// of a network's loss that is the largest positive one, the "sharpness") by power
/// iteration (Golub & Van Loan, "Matrix Computations", 4th ed., §7.3.1):
///   u = H v_k,  lambda_k = v_k' u,  v_{k+1} = u / |u|,
/// with the Hessian-vector product by central finite differences of the gradient
/// (Pearlmutter 1994, "Fast exact multiplication by the Hessian", eq. 2; error O(eps^2)):
///   H v ~ (g(w + eps v) - g(w - eps v)) / (2 eps),  eps = cfg.eps_rel * max(|w|, 1).
/// w (n,) is read only (the perturbed points are separate buffers); `v` (n,) is the
/// start vector and on return holds the last iterate (unit norm), so that a later call
/// can warm-start from it; if it is empty, of the wrong size, or zero, a random unit
/// vector from `seed` is used. Costs 2 * iterations calls of `grad`.
/// Errors: std::invalid_argument for n = 0, max_iters < 1, tol < 0 or eps_rel <= 0.
PowerIterResult top_hessian_eigenvalue(const GradientFn& grad, const float* w, size_t n, std::vector<float>& v,
                                       const PowerIterConfig& cfg = PowerIterConfig(), uint64_t seed = 1);

/// The sharpness probe of training: the largest Hessian eigenvalue of the mean training
/// loss over a FIXED probe batch (the same examples every time, so that successive values
/// differ only because the weights moved), warm-started from the previous eigenvector.
/// The probe batch is sharded over comm's ranks (rank r takes the contiguous r-th share),
/// each gradient is the allreduced, size-weighted mean, so every rank gets the same value.
/// The loss is evaluated in training mode (BN with batch statistics: the function
/// training minimizes); the model's parameters, gradients and BN running statistics are
/// restored afterwards, so measuring does not change training.
class HessianProbe {
public:
    /// `probe` holds the probe batch's example indices into the training set.
    /// Errors: std::invalid_argument when it is empty.
    HessianProbe(std::vector<int> probe, const PowerIterConfig& cfg, uint64_t seed);
    /// Runs the power iteration at the model's current parameters on `train_set`.
    /// Collective: every rank must call it at the same step. Errors:
    /// std::invalid_argument when the probe batch has fewer examples than comm has ranks.
    PowerIterResult measure(Model& model, const Dataset& train_set, Comm& comm);
    /// The last value measured (0 before the first).
    double last() const { return last_; }

private:
    std::vector<int> probe_;
    PowerIterConfig cfg_;
    uint64_t seed_;
    std::vector<float> v_, w0_, g0_, s0_;
    SoftmaxCrossEntropy ce_;
    Tensor x_;
    std::vector<int> labels_;
    double last_ = 0;
};

}  // namespace train
}  // namespace tula
