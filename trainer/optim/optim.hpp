// tula-train: the optimizers (SGD with momentum, AGS, LARS, LAMB), the learning-rate scaling
// rules and schedules, and the gradient-norm warmup.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/model.hpp"

namespace tula {
namespace train {

/// How the base rate follows the global batch B (B0 = base_batch, lr0 = lr):
///  Linear: lr0 * B / B0 (Goyal et al. 2017, §2.1);
///  Sqrt:   lr0 * sqrt(B / B0) (Krizhevsky 2014, "One weird trick", §4; Hoffer et al. 2017);
///  Noise:  lr0 * (B/B0) / (1 + B/Bn) * (1 + B0/Bn), Bn = the gradient noise scale B_simple
///          (McCandlish et al. 2018; the rule is this project's AGS definition, tula-train(1), OPTIMIZERS):
///          equal to lr0 at B = B0, linear for B << Bn, saturating at lr0 * (Bn + B0)/B0 for
///          B >> Bn. Before the first estimate of Bn (Bn <= 0) it is lr0: the rule's limit for
///          Bn -> 0, the most cautious value it can take (a large batch is not run at the
///          linear rate before anything is known of its noise).
///  NoiseSqrt: lr0 * sqrt(r), r = (B/B0) / (1 + B/Bn) * (1 + B0/Bn) the ratio of Noise: the
///          square root of McCandlish et al.'s rate ratio (their optimal SGD rate is
///          eps_max / (1 + Bn/B); r is its ratio between B and B0). A square root for updates
///          normalised per tensor, as the square-root rule derived for adaptive methods
///          (Malladi et al. 2022, "On the SDEs and scaling rules for adaptive gradient
///          algorithms"). lr0 before the first estimate, as Noise.
///  NoiseFirst: Noise with Bn held at its first estimate for the rest of the run
///          (LrSchedule::observe_noise_scale). B_simple grows 10-100x during training, and
///          under Noise the rate follows it up to lr0 (Bn + B0)/B0; held, the rate ratio
///          stays the one of the first estimate.
enum class LrScaling { Linear, Sqrt, Noise, NoiseSqrt, NoiseFirst };

/// Scaled peak rate for batch B as LrScaling describes; capped at max_lr when max_lr > 0.
/// noise_scale (examples) is used by the Noise rules only. Errors: none (B, B0 > 0 assumed).
double scaled_lr(LrScaling rule, double lr0, int base_batch, int global_batch, double noise_scale, double max_lr);

/// Learning rate per optimizer step.
///  peak = lr * B / B0: the linear scaling rule (Goyal et al. 2017, §2.1; or another
///         LrScaling rule), lr being the
///         rate tuned for the global batch B0 = base_batch; capped at max_lr when
///         max_lr > 0 (the rule breaks down for large B: Goyal et al. §5.1 report it up to
///         8k for ResNet-50; for LeNet-5 on Fashion-MNIST peaks above about 0.4 diverge);
///  warmup: over the first W = warmup_epochs * steps_per_epoch steps the rate rises
///         linearly from lr to peak (Goyal et al. 2017, §2.2, "gradual warmup"); when
///         peak <= lr there is nothing to warm up and the rate is peak from the start;
///  then cosine decay to 0 over the remaining steps (Loshchilov & Hutter 2017, SGDR eq. 5
///         with a single cycle and eta_min = 0):
///         lr(t) = peak * (1 + cos(pi * (t - W) / (T - W))) / 2,  T = epochs * steps_per_epoch;
///  or constant peak (schedule "constant");
///  or warmup-stable-decay (schedule "wsd"; Hu et al. 2024, "MiniCPM", §4.1; Hägele et al.
///         2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations",
///         §3): the peak until the last decay_fraction d of the post-warmup steps, then linear
///         to 0: lr(t) = peak * min(1, (1 - f) / d), f = (t - W) / (T - W).
struct LrSchedule {
    double lr = 0.05;          ///< base rate for base_batch
    int base_batch = 64;       ///< B0, examples
    double max_lr = 0;         ///< cap on the scaled peak; 0 = none
    int global_batch = 64;     ///< B, examples per step over all ranks
    double warmup_epochs = 0;  ///< epochs (fractional allowed)
    bool cosine = true;        ///< cosine decay after warmup, else constant
    /// > 0: warmup-stable-decay, the fraction of the post-warmup steps (0, 1] over which the
    /// rate falls linearly to 0 after holding the peak; takes precedence over `cosine`.
    double decay_fraction = 0;
    /// > 0: warmup-stable-decay whose decay is the run's last decay_steps steps instead of a
    /// fraction: lr(t) = peak * min(1, (T - t) / decay_steps). The stable phase then does not
    /// depend on T, so runs of several lengths share it, and a decay can branch off a
    /// checkpoint of a constant-rate run (Hägele et al. 2024, §3). Takes precedence over
    /// decay_fraction and `cosine` in at() and at_adaptive(); at_progress() ignores it.
    int64_t decay_steps = 0;
    /// The multiplier of the peak at fraction f in [0, 1] of the post-warmup steps: cosine,
    /// constant or warmup-stable-decay as configured (see above). Pure.
    double decay(double f) const;
    /// The multiplier of the peak at step t of a run whose post-warmup phase spans steps
    /// [start, total): min(1, (total - t) / decay_steps) when decay_steps > 0, else
    /// decay((t - start) / (total - start)). Pure.
    double tail(int64_t t, int64_t start, int64_t total) const;
    int64_t steps_per_epoch = 1;
    int epochs = 1;

    LrScaling scaling = LrScaling::Linear;  ///< how the peak follows B (see LrScaling)
    /// Rate at the first warmup step, from which the warmup ramps to the peak; < 0: lr
    /// (Goyal et al.'s gradual warmup from the small-batch rate). Wherever the schedule
    /// descriptions below say "from lr" they mean from this rate.
    double warmup_from = -1;
    /// The warmup's starting rate: warmup_from when >= 0, else lr.
    double warm_start() const { return warmup_from >= 0 ? warmup_from : lr; }
    double noise_scale = 0;    ///< B_noise for the LrScaling::Noise rules, examples; <= 0: not yet known
    /// A new estimate of B_noise (examples): becomes noise_scale, except under
    /// LrScaling::NoiseFirst once noise_scale is known (> 0 and finite), which holds that
    /// first one. An estimate <= 0 (the smoothed trace can be negative) stands for "not
    /// known", so the rate is lr until a positive one comes (scaled_lr). Changes noise_scale only.
    void observe_noise_scale(double bn) {
        if (scaling == LrScaling::NoiseFirst && noise_scale > 0 && std::isfinite(noise_scale)) return;
        noise_scale = bn;
    }

    /// scaled_lr(scaling, lr, B0, B, noise_scale, max_lr): lr * B / B0 by default.
    double peak() const { return scaled_lr(scaling, lr, base_batch, global_batch, noise_scale, max_lr); }
    /// Rate for step t = 0, 1, ... (t counted over the whole run).
    double at(int64_t t) const;
    /// Rate for step t with a warmup of data-driven length (NormWarmup): while warm_end < 0
    /// (warmup on) the rate rises linearly towards peak() at the slope of a W-step warmup,
    /// W = warmup_epochs * steps_per_epoch (the cap): from warmup_from when it is set
    /// (>= 0), warmup_from + (peak - warmup_from) min(1, t / W); else from near zero,
    /// peak * min(1, (t + 1) / W) (the first step at peak / W); from step warm_end >= 0 on
    /// it is peak() with cosine decay (or constant) over the remaining T - warm_end steps.
    /// With W = 0, or peak() <= warmup_from when that is set, it is at(t) without warmup.
    double at_adaptive(int64_t t, int64_t warm_end) const;
    /// Rate at progress p in [0, 1] (the fraction of the run's examples seen) for global
    /// batch B = global_batch, for runs whose batch changes (Local SGD with adaptive batch):
    /// peak_B = scaled_lr(scaling, lr, base_batch, B, noise_scale, max_lr); with
    /// w = warmup_epochs / epochs, lr + (peak_B - lr) p / w while p < w (when peak_B > lr),
    /// then peak_B (1 + cos(pi (p - w) / (1 - w))) / 2 (cosine) or peak_B (constant).
    double at_progress(double p, int global_batch) const;
};

/// Warmup driven by the gradient norm (AGS, tula-train(1), OPTIMIZERS): an exponential moving average
/// E_t = beta * E_{t-1} + (1 - beta) * |g_t|^2 of the squared norm of the global gradient
/// (E_0 = |g_0|^2) is kept; warmup lasts while the relative change over the last `window`
/// steps, |E_t - E_{t-window}| / E_{t-window}, exceeds `threshold`, and in any case until
/// step `window` (before it the change over a window cannot be measured) and for at least
/// min_steps steps; at most cap_steps steps. Once over it never restarts. A change measured
/// over a window, not from one step to the next: an EMA with beta = 0.9 moves by at most a
/// tenth of a step's jump, so a per-step test ends the warmup while |g|^2 still grows.
class NormWarmup {
public:
    /// Largest window (steps) the state holds; larger ones are taken as this.
    static constexpr int kMaxWindow = 64;
    /// threshold > 0 (relative change per window), 0 <= beta < 1, 0 <= min_steps <= cap_steps,
    /// window in [1, kMaxWindow] steps (clamped). Errors: none.
    NormWarmup(double threshold, double beta, int64_t min_steps, int64_t cap_steps, int window = 10);
    /// Feeds the squared gradient norm of step t (0, 1, ... in order). Returns whether
    /// step t+1 is still in warmup. Non-finite or negative values are ignored.
    bool update(double grad_norm2);
    /// Whether warmup is still on.
    bool active() const { return active_; }
    /// Step at which warmup ended (the first step run at the full rate); -1 while active.
    int64_t end_step() const { return end_; }
    /// The rule's state as named fields (its settings, step, EMA, ring of the window), for
    /// checkpoints.
    nlohmann::json to_json() const;
    /// The state of to_json(). Errors: std::invalid_argument naming a missing or bad field.
    static NormWarmup from_json(const nlohmann::json& j);

private:
    double threshold_, beta_;
    int64_t min_steps_, cap_steps_;
    int window_;
    int64_t t_ = 0, end_ = -1, n_ = 0;  // n_: EMA values taken
    double ema_ = 0, change_ = 0;
    double hist_[kMaxWindow + 1] = {};  // E of the last window + 1 values, a ring indexed by n_
    bool have_ = false, active_ = true;
};

/// Which update rule Optimizer applies.
enum class OptimKind { Sgd, Ags, Lars, Lamb };

/// Parses "sgd", "ags", "lars", "lamb". Errors: std::invalid_argument naming the valid ones.
OptimKind parse_optim_kind(const std::string& s);
/// The name parse_optim_kind accepts for k.
const char* optim_kind_name(OptimKind k);

/// Hyper-parameters of Optimizer (dimensionless unless noted).
struct OptimConfig {
    OptimKind kind = OptimKind::Sgd;
    double momentum = 0.9;      ///< SGD / AGS / LARS momentum; LAMB beta1
    double weight_decay = 5e-4; ///< L2 coefficient (decay segments only); LARS beta; LAMB decoupled decay
    double eta_trust = 0.02;    ///< AGS / LARS trust coefficient
    double s_min = 0.01;        ///< AGS lower bound of s_p (> 0)
    double s_max = 10.0;        ///< AGS upper bound of s_p (>= s_min)
    double ags_lambda = 0.0;    ///< AGS lambda in the denominator (>= 0)
    double beta2 = 0.999;       ///< LAMB second-moment decay
    double eps = 1e-6;          ///< LAMB epsilon
};

/// The per-tensor AGS factor s = clip(eta * |w| / (|g| + lambda * |w|), s_min, s_max)
/// (this project's AGS definition, tula-train(1), OPTIMIZERS), |.| the Euclidean norm of the tensor.
/// A tensor with |w| = 0 has no scale to trust: it is excluded from the scaling and gets 1,
/// as LARS (lars_factor) and LAMB do. When the denominator is 0 with |w| > 0 (zero gradient,
/// lambda = 0) the ratio is taken as +infinity (clipped to s_max).
double ags_factor(double w_norm, double g_norm, double eta, double lambda, double s_min, double s_max);

/// The LARS local rate lambda_l = eta * |w| / (|g| + beta * |w|) (You et al. 2017, eq. in
/// §3 "LARS"); 1 when |w| = 0 or |g| = 0 (as common implementations do), so a tensor with no
/// scale information falls back to the plain rate.
double lars_factor(double w_norm, double g_norm, double eta, double beta);

/// The optimizers of tula-train over fused (num_params,) float32 buffers laid out in
/// segments (one per parameter tensor; see ParamSegment). `w` the parameters, `g` the
/// gradient (already averaged over ranks), `lr` the rate of this step.
///  Sgd:  d = g + wd*w (decay segments), v = mu*v + d, w -= lr*v (torch.optim.SGD, dampening 0, no Nesterov; Sutskever et al. 2013).
/// Trust scaling (Ags, Lars, Lamb) applies to the segments with weight decay only: the
/// others (biases, batch-norm scales and shifts) get factor 1, the plain rate, as common
/// implementations of LARS and LAMB (You et al. 2017 and 2020) exclude them from layer
/// adaptation; so does any segment with |w_p| = 0.
///  Ags:  s_p = ags_factor(|w_p|, |g_p|, eta, lambda, s_min, s_max) per segment p from the
///        raw gradient, then v = mu*v + s_p*(g + wd*w), w -= lr*v: SGD-momentum with the
///        bounded per-tensor factor (tula-train(1), OPTIMIZERS; 0 < s_min <= s_p <= s_max is the bound
///        the convergence lemma of the Tula paper assumes).
///  Lars: lambda_p = lars_factor(|w_p|, |g_p|, eta, beta = the segment's wd), v = mu*v + lambda_p*(g + wd*w),
///        w -= lr*v (You et al. 2017, Algorithm 1, with the rate outside the momentum as in
///        PyTorch; the same for constant lr).
///  Lamb: m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g^2, m^ = m/(1-b1^t), v^ = v/(1-b2^t),
///        u = m^/(sqrt(v^)+eps) + wd*w (decay segments), r_p = |w_p|/|u_p| (1 when either is
///        0), w -= lr*r_p*u (You et al. 2020, Algorithm 2, phi = identity).
/// Errors: std::invalid_argument from the constructor for out-of-range hyper-parameters
/// (s_min <= 0, s_min > s_max, negative eta / lambda / weight decay, momentum or beta2
/// outside [0, 1)).
class Optimizer {
public:
    Optimizer(const std::vector<ParamSegment>& segments, size_t num_params, const OptimConfig& cfg);
    /// One update of w[0..num_params) from g with rate lr.
    void step(float* w, const float* g, double lr);
    const OptimConfig& config() const { return cfg_; }
    /// The factor applied to each segment in the last step (AGS s_p, LARS lambda_p, LAMB
    /// r_p; 1 for SGD), one per segment.
    const std::vector<double>& last_factors() const { return factors_; }
    /// First-moment / momentum buffer, (num_params,).
    const std::vector<float>& velocity() const { return v_; }
    /// The whole state for a checkpoint: first moment / momentum (num_params,), LAMB's
    /// second moment (num_params, or empty for the other rules) and the step count.
    void get_state(std::vector<float>& m1, std::vector<float>& m2, int64_t& t) const { m1 = v_; m2 = m2_; t = t_; }
    /// Restores get_state()'s values. Errors: std::invalid_argument when the sizes differ
    /// from this optimizer's (another model or update rule).
    void set_state(const std::vector<float>& m1, const std::vector<float>& m2, int64_t t);

private:
    std::vector<ParamSegment> segs_;
    OptimConfig cfg_;
    std::vector<float> v_, m2_;
    std::vector<double> factors_;
    int64_t t_ = 0;
};

}  // namespace train
}  // namespace tula
