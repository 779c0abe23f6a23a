// tula-train: gradient noise scale estimator. See noise_scale.hpp.
#include "optim/noise_scale.hpp"

#include <algorithm>
#include <cmath>

namespace tula {
namespace train {

NoiseScale::NoiseScale(double beta) : beta_(std::min(0.9999, std::max(0.0, std::isfinite(beta) ? beta : 0.9))) {}

bool NoiseScale::add(double bs, double g2s, double bb, double g2b) {
    if (!(bs > 0) || !(bb > bs) || !std::isfinite(bb) || !(g2s >= 0) || !(g2b >= 0) || !std::isfinite(g2s) ||
        !std::isfinite(g2b))
        return false;
    return add_estimates((bb * g2b - bs * g2s) / (bb - bs), (g2s - g2b) / (1.0 / bs - 1.0 / bb));
}

bool NoiseScale::add_estimates(double g2, double tr) {
    if (!std::isfinite(g2) || !std::isfinite(tr)) return false;
    if (n_ == 0) {
        g2_ = g2;
        tr_ = tr;
    } else {
        g2_ = beta_ * g2_ + (1.0 - beta_) * g2;
        tr_ = beta_ * tr_ + (1.0 - beta_) * tr;
    }
    ++n_;
    return true;
}

bool NoiseScale::ready() const { return n_ > 0 && g2_ > 0 && tr_ > 0; }

double NoiseScale::value() const { return ready() ? tr_ / g2_ : 0.0; }

}  // namespace train
}  // namespace tula
