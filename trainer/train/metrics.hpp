// tula-train: the --metrics JSON-lines log and the in-epoch progress bar.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "train/train.hpp"

namespace tula {
namespace train {

/// A JSON-lines file (one JSON object per line, flushed after each line so that readers
/// such as `tail -f` or a killed run see every finished line). The schema is in
/// tula-train(1), METRICS FILE: objects with "type" "run" (once per start), "step" and
/// "epoch", a file of the job contract (tula-jobs(7)) that `tula db record` reads. Write it
/// on rank 0 only.
class MetricsLog {
public:
    /// Opens `path` for writing (truncating), or for appending when `append` (a resumed
    /// run continues the file). Errors: std::runtime_error naming the file and the reason.
    MetricsLog(const std::string& path, bool append);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;

    /// Writes one object as a line and flushes. Errors: std::runtime_error when the write
    /// fails (disk full).
    void write(const nlohmann::json& obj);
    /// {"type":"step", "step", "epoch", "step_in_epoch", "loss", "lr", "grad_norm",
    ///  "seconds", "images_per_second", "gather_seconds", "examples", "trust_min",
    ///  "trust_max"} (examples: the step's global batch; trust_min/trust_max: the update's
    ///  per-tensor factor range, null when the engine does not report it).
    void step(const StepRecord& r);
    /// {"type":"epoch", "epoch", "train_loss", "train_accuracy", "test_loss",
    ///  "test_accuracy", "seconds", "images_per_second", "noise_scale" (null when not measured),
    ///  "lr", "warmup_end"},
    ///  and "val_loss", "val_accuracy" when the run has a validation set (val_accuracy >= 0).
    void epoch(const EpochResult& r);

private:
    std::string path_;
    std::FILE* f_ = nullptr;
};

/// The progress bar within an epoch on stderr, redrawn in place ("\r"), at most about 5
/// times per second: epoch, bar, step/steps, images/s (mean over the epoch so far) and
/// the ETA of the epoch (remaining steps x mean step seconds). Active only when stderr is
/// a terminal (isatty) and `enabled`.
class ProgressBar {
public:
    /// `epochs`: the run's epoch count (for "epoch e/E").
    ProgressBar(bool enabled, int epochs);
    /// Updates the bar after step r.
    void step(const StepRecord& r);
    /// Erases the bar (before the epoch's progress line is printed).
    void clear();

private:
    bool on_;
    int epochs_;
    int epoch_ = 0;
    double epoch_secs_ = 0;
    int64_t epoch_steps_ = 0;
    double last_draw_ = 0;
    bool drawn_ = false;
};

}  // namespace train
}  // namespace tula
