// Builders of tula-train's configuration structs for the unit tests, so that a test states
// only the settings it is about.
#pragma once
#include <cstdint>

#include "optim/optim.hpp"
#include "train/train.hpp"

namespace tula {
namespace train {
namespace testing {

/// A schedule from rate `lr` at batch `base_batch`, for global batch `global_batch`, with
/// `warmup_epochs` of warmup, `steps_per_epoch` steps per epoch and `epochs` epochs; cosine
/// decay and linear scaling (LrSchedule's defaults) unless the test changes them.
inline LrSchedule schedule(double lr, int base_batch, int global_batch, double warmup_epochs, int64_t steps_per_epoch,
                           int epochs) {
    LrSchedule s;
    s.lr = lr;
    s.base_batch = base_batch;
    s.global_batch = global_batch;
    s.warmup_epochs = warmup_epochs;
    s.steps_per_epoch = steps_per_epoch;
    s.epochs = epochs;
    return s;
}

/// A training configuration: `epochs` epochs at global batch `global_batch` and rate `lr`
/// for that batch (no scaling), evaluation in batches of `eval_batch`.
inline TrainConfig train_config(int epochs, int global_batch, double lr, int eval_batch) {
    TrainConfig cfg;
    cfg.epochs = epochs;
    cfg.global_batch = global_batch;
    cfg.lr.lr = lr;
    cfg.lr.base_batch = global_batch;
    cfg.eval_batch = eval_batch;
    return cfg;
}

}  // namespace testing
}  // namespace train
}  // namespace tula
