// tula-train: SGD and the learning-rate schedule. See optim.hpp.
#include "optim/optim.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <nlohmann/json.hpp>

namespace tula {
namespace train {

double LrSchedule::decay(double f) const {
    f = std::min(1.0, std::max(0.0, std::isfinite(f) ? f : 1.0));
    if (decay_fraction > 0) return std::min(1.0, (1.0 - f) / std::min(1.0, decay_fraction));
    if (!cosine) return 1.0;
    return 0.5 * (1.0 + std::cos(3.141592653589793 * f));
}

double LrSchedule::tail(int64_t t, int64_t start, int64_t total) const {
    if (decay_steps > 0)
        return std::min(1.0, std::max<double>(0.0, static_cast<double>(total - t)) / static_cast<double>(decay_steps));
    return decay(static_cast<double>(t - start) / static_cast<double>(total - start));
}

double LrSchedule::at(int64_t t) const {
    const double pk = peak();
    const int64_t total = std::max<int64_t>(1, steps_per_epoch * static_cast<int64_t>(epochs));
    // no warmup when there is nothing to warm up to (peak <= lr)
    const double lr = warm_start();
    const int64_t warm = pk <= lr ? 0 : std::min<int64_t>(total - 1, std::max<int64_t>(0, std::llround(warmup_epochs * steps_per_epoch)));
    if (t < warm) return lr + (pk - lr) * static_cast<double>(t) / static_cast<double>(warm);
    return pk * tail(t, warm, total);
}

double LrSchedule::at_adaptive(int64_t t, int64_t warm_end) const {
    const double pk = peak();
    const int64_t total = std::max<int64_t>(1, steps_per_epoch * static_cast<int64_t>(epochs));
    const int64_t cap = std::min<int64_t>(total - 1, std::max<int64_t>(0, std::llround(warmup_epochs * steps_per_epoch)));
    const bool from_set = warmup_from >= 0;
    if (cap == 0 || (from_set && pk <= warmup_from)) {
        LrSchedule s = *this;
        s.warmup_epochs = 0;
        return s.at(t);
    }
    const double c = static_cast<double>(cap);
    if (warm_end < 0)
        return from_set ? warmup_from + (pk - warmup_from) * std::min(1.0, static_cast<double>(t) / c)
                        : pk * std::min(1.0, static_cast<double>(t + 1) / c);
    const int64_t we = std::min(warm_end, total - 1);
    return pk * tail(t, we, total);
}

double LrSchedule::at_progress(double p, int B) const {
    const double pk = scaled_lr(scaling, lr, base_batch, B, noise_scale, max_lr);
    p = std::min(1.0, std::max(0.0, std::isfinite(p) ? p : 0.0));
    const double w = epochs > 0 ? std::min(1.0, std::max(0.0, warmup_epochs / epochs)) : 0.0;
    const double lr = warm_start();
    if (pk > lr && w > 0 && p < w) return lr + (pk - lr) * p / w;
    return pk * decay(w < 1 ? (p - std::min(p, w)) / (1.0 - w) : 1.0);
}
}  // namespace train
}  // namespace tula

namespace tula {
namespace train {

double scaled_lr(LrScaling rule, double lr0, int base_batch, int global_batch, double noise_scale, double max_lr) {
    const double r = static_cast<double>(global_batch) / static_cast<double>(base_batch);
    double p = lr0 * r;
    if (rule == LrScaling::Sqrt) {
        p = lr0 * std::sqrt(r);
    } else if (rule == LrScaling::Noise || rule == LrScaling::NoiseSqrt || rule == LrScaling::NoiseFirst) {
        double ratio = 1.0;  // no estimate yet: the limit Bn -> 0
        if (noise_scale > 0 && std::isfinite(noise_scale)) {
            const double b = global_batch, b0 = base_batch;
            ratio = r / (1.0 + b / noise_scale) * (1.0 + b0 / noise_scale);
        }
        p = lr0 * (rule == LrScaling::NoiseSqrt ? std::sqrt(ratio) : ratio);
    }
    return max_lr > 0 && p > max_lr ? max_lr : p;
}

NormWarmup::NormWarmup(double threshold, double beta, int64_t min_steps, int64_t cap_steps, int window)
    : threshold_(threshold), beta_(beta), min_steps_(std::max<int64_t>(0, min_steps)),
      cap_steps_(std::max<int64_t>(0, cap_steps)), window_(std::min(kMaxWindow, std::max(1, window))) {
    if (min_steps_ > cap_steps_) min_steps_ = cap_steps_;
    if (cap_steps_ == 0) {
        active_ = false;
        end_ = 0;
    }
}

nlohmann::json NormWarmup::to_json() const {
    return {{"threshold", threshold_}, {"beta", beta_},   {"min_steps", min_steps_},
            {"cap_steps", cap_steps_}, {"window", window_}, {"step", t_},
            {"end_step", end_},        {"values", n_},      {"ema", ema_},
            {"change", change_},       {"history", std::vector<double>(hist_, hist_ + kMaxWindow + 1)},
            {"have", have_},           {"active", active_}};
}

NormWarmup NormWarmup::from_json(const nlohmann::json& j) {
    try {
        NormWarmup w(j.at("threshold").get<double>(), j.at("beta").get<double>(), j.at("min_steps").get<int64_t>(),
                     j.at("cap_steps").get<int64_t>(), j.at("window").get<int>());
        w.t_ = j.at("step").get<int64_t>();
        w.end_ = j.at("end_step").get<int64_t>();
        w.n_ = j.at("values").get<int64_t>();
        w.ema_ = j.at("ema").get<double>();
        w.change_ = j.at("change").get<double>();
        const std::vector<double> h = j.at("history").get<std::vector<double>>();
        if (h.size() != static_cast<size_t>(kMaxWindow + 1)) throw std::invalid_argument("warmup state: history size");
        std::copy(h.begin(), h.end(), w.hist_);
        w.have_ = j.at("have").get<bool>();
        w.active_ = j.at("active").get<bool>();
        return w;
    } catch (const nlohmann::json::exception& e) {
        throw std::invalid_argument(std::string("warmup state: ") + e.what());
    }
}

bool NormWarmup::update(double g2) {
    if (!active_) return false;
    const int64_t t = t_++;
    if (std::isfinite(g2) && g2 >= 0) {
        ema_ = have_ ? beta_ * ema_ + (1.0 - beta_) * g2 : g2;
        have_ = true;
        hist_[n_ % (kMaxWindow + 1)] = ema_;
        if (n_ >= window_) {
            const double old = hist_[(n_ - window_) % (kMaxWindow + 1)];
            change_ = old > 0 ? std::fabs(ema_ - old) / old : 0.0;
        }
        ++n_;
    }
    const int64_t next = t + 1;
    // still warming while the norm changes over the window (or too early to tell), never past the cap
    const bool changing = n_ <= window_ || change_ > threshold_;
    if (next >= cap_steps_ || (next >= min_steps_ && !changing)) {
        active_ = false;
        end_ = next;
    }
    return active_;
}

OptimKind parse_optim_kind(const std::string& s) {
    if (s == "sgd") return OptimKind::Sgd;
    if (s == "ags") return OptimKind::Ags;
    if (s == "lars") return OptimKind::Lars;
    if (s == "lamb") return OptimKind::Lamb;
    throw std::invalid_argument("unknown optimizer '" + s + "'; valid: sgd, ags, lars, lamb");
}

const char* optim_kind_name(OptimKind k) {
    switch (k) {
        case OptimKind::Sgd: return "sgd";
        case OptimKind::Ags: return "ags";
        case OptimKind::Lars: return "lars";
        case OptimKind::Lamb: return "lamb";
    }
    return "sgd";
}

double ags_factor(double wn, double gn, double eta, double lambda, double s_min, double s_max) {
    if (!(wn > 0)) return 1.0;  // no scale to trust: excluded, as LARS and LAMB
    const double den = gn + lambda * wn;
    double s;
    if (den > 0) s = eta * wn / den;
    else s = s_max;
    if (!std::isfinite(s)) s = s_max;
    return std::min(s_max, std::max(s_min, s));
}

double lars_factor(double wn, double gn, double eta, double beta) {
    if (!(wn > 0) || !(gn > 0)) return 1.0;
    return eta * wn / (gn + beta * wn);
}

namespace {
double norm2(const float* x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return std::sqrt(s);
}
}  // namespace

Optimizer::Optimizer(const std::vector<ParamSegment>& segments, size_t num_params, const OptimConfig& cfg)
    : segs_(segments), cfg_(cfg), v_(num_params, 0.0f), factors_(segments.size(), 1.0) {
    auto bad = [](const std::string& m) { throw std::invalid_argument(m); };
    if (!(cfg.momentum >= 0 && cfg.momentum < 1)) bad("momentum must be in [0, 1)");
    if (!(cfg.weight_decay >= 0) || !std::isfinite(cfg.weight_decay)) bad("weight decay must be >= 0");
    if (!(cfg.eta_trust > 0) || !std::isfinite(cfg.eta_trust)) bad("--eta-trust must be > 0");
    if (!(cfg.s_min > 0) || !std::isfinite(cfg.s_min)) bad("--s-min must be > 0");
    if (!(cfg.s_max >= cfg.s_min) || !std::isfinite(cfg.s_max)) bad("--s-max must be >= --s-min");
    if (!(cfg.ags_lambda >= 0) || !std::isfinite(cfg.ags_lambda)) bad("--ags-lambda must be >= 0");
    if (!(cfg.beta2 >= 0 && cfg.beta2 < 1)) bad("LAMB beta2 must be in [0, 1)");
    if (!(cfg.eps > 0)) bad("LAMB epsilon must be > 0");
    for (const auto& s : segs_)
        if (s.offset + s.size > num_params) bad("parameter segment '" + s.name + "' lies outside the buffer");
    if (cfg.kind == OptimKind::Lamb) m2_.assign(num_params, 0.0f);
}

void Optimizer::set_state(const std::vector<float>& m1, const std::vector<float>& m2, int64_t t) {
    if (m1.size() != v_.size() || m2.size() != m2_.size())
        throw std::invalid_argument("optimizer state of " + std::to_string(m1.size()) + "+" + std::to_string(m2.size()) +
                                    " values does not fit this optimizer's " + std::to_string(v_.size()) + "+" +
                                    std::to_string(m2_.size()));
    v_ = m1;
    m2_ = m2;
    t_ = t;
}

void Optimizer::step(float* w, const float* g, double lr_) {
    ++t_;
    const float lr = static_cast<float>(lr_);
    const float mom = static_cast<float>(cfg_.momentum);
    for (size_t k = 0; k < segs_.size(); ++k) {
        const size_t o = segs_[k].offset, n = segs_[k].size;
        const float wd = segs_[k].decay ? static_cast<float>(cfg_.weight_decay) : 0.0f;
        float* wp = w + o;
        const float* gp = g + o;
        float* vp = v_.data() + o;
        if (cfg_.kind == OptimKind::Lamb) {
            const double b1 = cfg_.momentum, b2 = cfg_.beta2;
            const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1, static_cast<double>(t_))));
            const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2, static_cast<double>(t_))));
            const float eps = static_cast<float>(cfg_.eps);
            float* sp = m2_.data() + o;
            double un = 0;
            for (size_t i = 0; i < n; ++i) {
                vp[i] = static_cast<float>(b1) * vp[i] + static_cast<float>(1.0 - b1) * gp[i];
                sp[i] = static_cast<float>(b2) * sp[i] + static_cast<float>(1.0 - b2) * gp[i] * gp[i];
                const double u = (vp[i] * c1) / (std::sqrt(sp[i] * c2) + eps) + wd * wp[i];
                un += u * u;
            }
            un = std::sqrt(un);
            const double wn = norm2(wp, n);
            const double r = (segs_[k].decay && wn > 0 && un > 0) ? wn / un : 1.0;
            factors_[k] = r;
            const float step = static_cast<float>(lr_ * r);
            for (size_t i = 0; i < n; ++i) {
                const float u = (vp[i] * c1) / (std::sqrt(sp[i] * c2) + eps) + wd * wp[i];
                wp[i] -= step * u;
            }
            continue;
        }
        double f = 1.0;
        if (!segs_[k].decay) {
            // excluded from trust scaling (biases, batch norm): the plain rate
        } else if (cfg_.kind == OptimKind::Ags)
            f = ags_factor(norm2(wp, n), norm2(gp, n), cfg_.eta_trust, cfg_.ags_lambda, cfg_.s_min, cfg_.s_max);
        else if (cfg_.kind == OptimKind::Lars)
            f = lars_factor(norm2(wp, n), norm2(gp, n), cfg_.eta_trust, wd);
        factors_[k] = f;
        const float s = static_cast<float>(f);
        for (size_t i = 0; i < n; ++i) {
            const float d = gp[i] + wd * wp[i];
            vp[i] = mom * vp[i] + s * d;
            wp[i] -= lr * vp[i];
        }
    }
}

}  // namespace train
}  // namespace tula
