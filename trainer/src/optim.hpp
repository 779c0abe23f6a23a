// tula-train: SGD with momentum and weight decay, and the learning-rate schedule.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model.hpp"

namespace tula {
namespace train {

/// Learning rate per optimizer step.
///  peak = lr * B / B0: the linear scaling rule (Goyal et al. 2017, §2.1), lr being the
///         rate tuned for the global batch B0 = base_batch; capped at max_lr when
///         max_lr > 0 (the rule breaks down for large B: Goyal et al. §5.1 report it up to
///         8k for ResNet-50; for LeNet-5 on Fashion-MNIST peaks above about 0.4 diverge);
///  warmup: over the first W = warmup_epochs * steps_per_epoch steps the rate rises
///         linearly from lr to peak (Goyal et al. 2017, §2.2, "gradual warmup"); when
///         peak <= lr there is nothing to warm up and the rate is peak from the start;
///  then cosine decay to 0 over the remaining steps (Loshchilov & Hutter 2017, SGDR eq. 5
///         with a single cycle and eta_min = 0):
///         lr(t) = peak * (1 + cos(pi * (t - W) / (T - W))) / 2,  T = epochs * steps_per_epoch;
///  or constant peak (schedule "constant").
struct LrSchedule {
    double lr = 0.05;          ///< base rate for base_batch
    int base_batch = 64;       ///< B0, examples
    double max_lr = 0;         ///< cap on the scaled peak; 0 = none
    int global_batch = 64;     ///< B, examples per step over all ranks
    double warmup_epochs = 0;  ///< epochs (fractional allowed)
    bool cosine = true;        ///< cosine decay after warmup, else constant
    int64_t steps_per_epoch = 1;
    int epochs = 1;

    /// lr * B / B0, at most max_lr (when > 0).
    double peak() const {
        const double p = lr * static_cast<double>(global_batch) / base_batch;
        return max_lr > 0 && p > max_lr ? max_lr : p;
    }
    /// Rate for step t = 0, 1, ... (t counted over the whole run).
    double at(int64_t t) const;
};

/// SGD with momentum and L2 weight decay over the Model's fused buffers, PyTorch's
/// formulation (torch.optim.SGD, dampening 0, no Nesterov; Sutskever et al. 2013):
///   g' = g + wd * w (only segments with decay = true: conv / fc weights),
///   v  = momentum * v + g',  w = w - lr * v.
class Sgd {
public:
    Sgd(Model& model, double momentum, double weight_decay);
    /// One update with rate `lr` from model.grads() (already averaged over ranks).
    void step(double lr);
    /// The momentum buffer, (num_params,).
    const std::vector<float>& velocity() const { return v_; }

private:
    Model& m_;
    float momentum_, wd_;
    std::vector<float> v_;
    std::vector<char> decay_;  // per segment
};

}  // namespace train
}  // namespace tula
