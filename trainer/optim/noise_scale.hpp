// tula-train: the gradient noise scale B_simple (McCandlish et al. 2018), a pure estimator
// fed with squared gradient norms measured at two batch sizes.
#pragma once
#include <cstdint>

#include <nlohmann/json_fwd.hpp>

namespace tula {
namespace train {

/// Estimates the "simple" gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et
/// al. 2018, "An Empirical Model of Large-Batch Training", eq. 2.8 and App. A.1), Sigma the
/// per-example gradient covariance and G the true gradient. Each observation is the squared
/// norm of a mean gradient over B_small examples, |G_small|^2, and over B_big > B_small
/// examples, |G_big|^2 (in data-parallel training: the rank's local gradient and the
/// allreduced one; with one rank: a micro-batch and the whole batch). Since
/// E|G_B|^2 = |G|^2 + tr(Sigma)/B, the unbiased estimates are (App. A.1)
///   |G|^2    ~ (B_big |G_big|^2 - B_small |G_small|^2) / (B_big - B_small),
///   tr(Sigma) ~ (|G_small|^2 - |G_big|^2) / (1/B_small - 1/B_big);
/// each is smoothed by an exponential moving average (weight `beta` on the past, the first
/// observation taken as is), and B_simple = EMA(tr Sigma) / EMA(|G|^2). The ratio is taken
/// of the averages, not averaged, because each single estimate is very noisy (App. A.1).
class NoiseScale {
public:
    /// 0 <= beta < 1. Errors: none (beta is clamped to [0, 0.9999]).
    explicit NoiseScale(double beta = 0.9);
    /// Feeds one observation: sizes in examples (0 < b_small < b_big), squared norms >= 0.
    /// Returns false (and ignores it) when the sizes or norms are invalid or non-finite.
    bool add(double b_small, double g2_small, double b_big, double g2_big);
    /// Feeds unbiased estimates of |G|^2 and tr(Sigma) made elsewhere (as App. A.1's, from
    /// two batch sizes), smoothed like add()'s. Returns false (and ignores them) when either
    /// is not finite.
    bool add_estimates(double g2, double trace);
    /// Whether value() has an estimate (some observation was taken and EMA(|G|^2) > 0).
    bool ready() const;
    /// B_simple in examples; 0 when not ready().
    double value() const;
    /// The smoothed estimates of |G|^2 and tr(Sigma) (0 before the first observation).
    double grad_norm2() const { return g2_; }
    double trace() const { return tr_; }
    /// Observations taken.
    int64_t count() const { return n_; }
    /// The estimator's state as named fields (beta, grad_norm2, trace, count), for checkpoints.
    nlohmann::json to_json() const;
    /// The state of to_json(). Errors: std::invalid_argument naming a missing or bad field.
    static NoiseScale from_json(const nlohmann::json& j);

private:
    double beta_;
    double g2_ = 0, tr_ = 0;
    int64_t n_ = 0;
};

}  // namespace train
}  // namespace tula
