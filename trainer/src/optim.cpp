// tula-train: SGD and the learning-rate schedule. See optim.hpp.
#include "optim.hpp"

#include <algorithm>
#include <cmath>

namespace tula {
namespace train {

double LrSchedule::at(int64_t t) const {
    const double pk = peak();
    const int64_t total = std::max<int64_t>(1, steps_per_epoch * static_cast<int64_t>(epochs));
    // no warmup when there is nothing to warm up to (peak <= lr)
    const int64_t warm = pk <= lr ? 0 : std::min<int64_t>(total - 1, std::max<int64_t>(0, std::llround(warmup_epochs * steps_per_epoch)));
    if (t < warm) return lr + (pk - lr) * static_cast<double>(t) / static_cast<double>(warm);
    if (!cosine) return pk;
    const double frac = static_cast<double>(t - warm) / static_cast<double>(total - warm);
    return pk * 0.5 * (1.0 + std::cos(3.141592653589793 * std::min(1.0, std::max(0.0, frac))));
}

Sgd::Sgd(Model& model, double momentum, double weight_decay)
    : m_(model), momentum_(static_cast<float>(momentum)), wd_(static_cast<float>(weight_decay)),
      v_(model.num_params(), 0.0f) {
    for (const auto& s : model.segments()) decay_.push_back(s.decay ? 1 : 0);
}

void Sgd::step(double lr_) {
    const float lr = static_cast<float>(lr_);
    float* w = m_.params();
    const float* g = m_.grads();
    float* v = v_.data();
    const auto& segs = m_.segments();
    for (size_t k = 0; k < segs.size(); ++k) {
        const size_t o = segs[k].offset, n = segs[k].size;
        const float wd = decay_[k] ? wd_ : 0.0f;
        const float mom = momentum_;
        float* wp = w + o;
        const float* gp = g + o;
        float* vp = v + o;
        for (size_t i = 0; i < n; ++i) {
            const float d = gp[i] + wd * wp[i];
            vp[i] = mom * vp[i] + d;
            wp[i] -= lr * vp[i];
        }
    }
}

}  // namespace train
}  // namespace tula
