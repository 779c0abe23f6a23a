// Builders of tula-train's configuration structs for the unit tests, so that a test states
// only the settings it is about.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/rng.hpp"
#include "data/data.hpp"
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

/// `count` 28x28 one-channel images with labels in [0, 4): label k is brighter in quadrant
/// k (pixels about `bright` there, `dark` elsewhere, plus Gaussian noise of `spread`), so
/// a network can learn it. `classes` is what the data set declares (labels stay below 4).
inline Dataset quadrant_images(int count, uint64_t seed, int classes = 10, double bright = 180, double dark = 60,
                               double spread = 40) {
    Dataset d;
    d.count = count;
    d.rows = d.cols = 28;
    d.classes = classes;
    d.images.resize(static_cast<size_t>(count) * 784);
    d.labels.resize(count);
    Rng rng(seed);
    for (int i = 0; i < count; ++i) {
        const int label = static_cast<int>(rng.below(4));
        d.labels[i] = static_cast<uint8_t>(label);
        for (int r = 0; r < 28; ++r)
            for (int c = 0; c < 28; ++c) {
                const int q = (r >= 14 ? 2 : 0) + (c >= 14 ? 1 : 0);
                const double base = q == label ? bright : dark;
                d.images[static_cast<size_t>(i) * 784 + r * 28 + c] =
                    static_cast<uint8_t>(std::min(255.0, std::max(0.0, base + spread * rng.normal())));
            }
    }
    return d;
}

/// `count` 28x28 one-channel images of uniformly random pixels with random labels in
/// [0, 10), drawn from `seed`: no signal, for checks of the arithmetic of a step.
inline Dataset random_images(int count, uint64_t seed) {
    Dataset d;
    d.count = count;
    d.rows = d.cols = 28;
    d.images.resize(static_cast<size_t>(count) * 784);
    d.labels.resize(count);
    Rng rng(seed);
    for (auto& p : d.images) p = static_cast<uint8_t>(rng.below(256));
    for (auto& l : d.labels) l = static_cast<uint8_t>(rng.below(10));
    return d;
}

/// The indices 0 .. d.count - 1 of every example of `d`, in order: one batch of all of it.
inline std::vector<int> all_indices(const Dataset& d) {
    std::vector<int> idx(static_cast<size_t>(std::max(0, d.count)));
    for (int i = 0; i < d.count; ++i) idx[static_cast<size_t>(i)] = i;
    return idx;
}

}  // namespace testing
}  // namespace train
}  // namespace tula
