// tula-train: gradient noise scale estimator. See noise_scale.hpp.
#include "optim/noise_scale.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <nlohmann/json.hpp>

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

nlohmann::json NoiseScale::to_json() const {
    return {{"beta", beta_}, {"grad_norm2", g2_}, {"trace", tr_}, {"count", n_}};
}

NoiseScale NoiseScale::from_json(const nlohmann::json& j) {
    try {
        NoiseScale s(j.at("beta").get<double>());
        s.beta_ = j.at("beta").get<double>();
        s.g2_ = j.at("grad_norm2").get<double>();
        s.tr_ = j.at("trace").get<double>();
        s.n_ = j.at("count").get<int64_t>();
        if (s.n_ < 0) throw std::invalid_argument("count < 0");
        return s;
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(std::string("noise-scale state: ") + e.what());
    }
}

}  // namespace train
}  // namespace tula
