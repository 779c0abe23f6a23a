// tula-train: MetricsLog and ProgressBar. See metrics.hpp.
#include "train/metrics.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace tula {
namespace train {

namespace {
double mono_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// JSON has no NaN / infinity: null for them (a diverged step still gets its line).
nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }
}  // namespace

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
    f_ = std::fopen(path.c_str(), append ? "a" : "w");
    if (!f_) throw std::runtime_error("cannot open the metrics file " + path + " (" + std::strerror(errno) + ")");
}

MetricsLog::~MetricsLog() {
    if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& obj) {
    const std::string line = obj.dump() + "\n";
    if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
        throw std::runtime_error("cannot write the metrics file " + path_ + " (" + std::strerror(errno) + ")");
}

void MetricsLog::step(const StepRecord& r) {
    write({{"type", "step"}, {"step", r.step}, {"epoch", r.epoch}, {"step_in_epoch", r.step_in_epoch},
           {"loss", num(r.loss)}, {"lr", num(r.lr)}, {"grad_norm", num(r.grad_norm)}, {"seconds", num(r.seconds)},
           {"images_per_second", num(r.images_per_second)}, {"gather_seconds", num(r.gather_seconds)},
           {"examples", r.examples},
           {"trust_min", r.trust_max > 0 ? num(r.trust_min) : nlohmann::json(nullptr)},
           {"trust_max", r.trust_max > 0 ? num(r.trust_max) : nlohmann::json(nullptr)}});
}

void MetricsLog::epoch(const EpochResult& r) {
    nlohmann::json o = {{"type", "epoch"}, {"epoch", r.epoch}, {"train_loss", num(r.train_loss)},
                        {"train_accuracy", num(r.train_accuracy)}, {"test_loss", num(r.test_loss)},
                        {"test_accuracy", num(r.test_accuracy)}, {"seconds", num(r.seconds)},
                        {"images_per_second", num(r.images_per_second)}, {"noise_scale", r.noise_scale > 0 ? num(r.noise_scale) : nlohmann::json(nullptr)},
                        {"lr", num(r.lr)}, {"warmup_end", r.warmup_end}, {"eval_seconds", num(r.eval_seconds)}};
    if (r.val_accuracy >= 0) {
        o["val_loss"] = num(r.val_loss);
        o["val_accuracy"] = num(r.val_accuracy);
    }
    write(o);
}

ProgressBar::ProgressBar(bool enabled, int epochs) : on_(enabled && isatty(STDERR_FILENO)), epochs_(epochs) {}

void ProgressBar::step(const StepRecord& r) {
    if (!on_) return;
    if (r.epoch != epoch_) {
        epoch_ = r.epoch;
        epoch_secs_ = 0;
        epoch_steps_ = 0;
    }
    epoch_secs_ += r.seconds;
    ++epoch_steps_;
    const double now = mono_seconds();
    const bool last = r.step_in_epoch + 1 >= r.steps_per_epoch;
    if (!last && now - last_draw_ < 0.2) return;
    last_draw_ = now;
    const double per = epoch_secs_ / static_cast<double>(epoch_steps_);
    const double ips = per > 0 ? r.images_per_second * r.seconds / per : 0;  // images per step / mean step time
    const int64_t left = r.steps_per_epoch - r.step_in_epoch - 1;
    const int eta = static_cast<int>(std::lround(per * static_cast<double>(left)));
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(kWidth * (r.step_in_epoch + 1) / std::max<int64_t>(1, r.steps_per_epoch));
    std::string bar(static_cast<size_t>(fill), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r\033[Kepoch %d/%d [%s] %lld/%lld  %.0f images/s  ETA %d:%02d", r.epoch, epochs_, bar.c_str(),
                 static_cast<long long>(r.step_in_epoch + 1), static_cast<long long>(r.steps_per_epoch), ips, eta / 60,
                 eta % 60);
    std::fflush(stderr);
    drawn_ = true;
}

void ProgressBar::clear() {
    if (!on_ || !drawn_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
}

}  // namespace train
}  // namespace tula
