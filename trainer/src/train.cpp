// tula-train: training loop, evaluation, profiling kernels. See train.hpp.
#include "train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

namespace tula {
namespace train {

namespace {
double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

namespace {
OptimConfig sgd_config(double momentum, double weight_decay) {
    OptimConfig c;
    c.momentum = momentum;
    c.weight_decay = weight_decay;
    return c;
}
double sq_norm(const float* g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(g[i]) * g[i];
    return s;
}
}  // namespace

Trainer::Trainer(Model& model, Comm& comm, double momentum, double weight_decay)
    : Trainer(model, comm, sgd_config(momentum, weight_decay)) {}

Trainer::Trainer(Model& model, Comm& comm, const OptimConfig& oc)
    : m_(model), comm_(comm), opt_(model.segments(), model.num_params(), oc) {}

double Trainer::step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                     StepStats* stats, bool measure_noise) {
    const size_t np = m_.num_params();
    const bool many = sync && comm_.size() > 1;
    const bool split = stats && measure_noise && !many && n >= 2;
    double loss = 0, local_g2 = 0;
    if (split) {
        // two micro-batches: g = (h g1 + (n-h) g2) / n, both gradients being means
        const int h = n / 2;
        double g2s = 0;
        for (int part = 0; part < 2; ++part) {
            const int lo = part == 0 ? 0 : h, cnt = part == 0 ? h : n - h;
            labels_.resize(cnt);
            gather_batch(d, idx + lo, cnt, x_, labels_.data());
            m_.zero_grad();
            const Tensor& z = m_.forward(x_, true);
            loss += ce_.forward(z, labels_.data(), cnt, correct) * cnt / n;
            m_.backward(ce_.backward());
            g2s += 0.5 * sq_norm(m_.grads(), np);
            const float wgt = static_cast<float>(cnt) / static_cast<float>(n);
            float* g = m_.grads();
            if (part == 0) {
                gacc_.resize(np);
                for (size_t i = 0; i < np; ++i) gacc_[i] = wgt * g[i];
            } else {
                for (size_t i = 0; i < np; ++i) g[i] = gacc_[i] + wgt * g[i];
            }
        }
        stats->noise = true;
        stats->b_small = 0.5 * n;
        stats->g2_small = g2s;
        stats->b_big = n;
    } else {
        labels_.resize(n);
        gather_batch(d, idx, n, x_, labels_.data());
        m_.zero_grad();
        const Tensor& z = m_.forward(x_, true);
        loss = ce_.forward(z, labels_.data(), n, correct);
        m_.backward(ce_.backward());
        if (stats && measure_noise && many) local_g2 = sq_norm(m_.grads(), np);
    }
    if (many) {
        float* g = m_.grads();
        comm_.allreduce_sum(g, np);
        const float inv = 1.0f / static_cast<float>(comm_.size());
        for (size_t i = 0; i < np; ++i) g[i] *= inv;
        if (stats && measure_noise) {
            comm_.allreduce_sum(&local_g2, 1);
            stats->noise = true;
            stats->b_small = n;
            stats->g2_small = local_g2 / comm_.size();
            stats->b_big = static_cast<double>(n) * comm_.size();
        }
    }
    if (stats) {
        stats->grad_norm2 = sq_norm(m_.grads(), np);
        if (stats->noise) stats->g2_big = stats->grad_norm2;
    }
    opt_.step(m_.params(), m_.grads(), lr);
    return loss;
}

EvalResult Trainer::evaluate(const Dataset& d, int batch) {
    if (comm_.size() > 1 && m_.state_size() > 0) comm_.broadcast(m_.state(), m_.state_size(), 0);
    const int64_t k = comm_.size(), r = comm_.rank();
    const int lo = static_cast<int>(r * d.count / k), hi = static_cast<int>((r + 1) * d.count / k);
    batch = std::max(1, batch);
    double sums[3] = {0, 0, 0};  // loss sum, correct, count
    for (int s = lo; s < hi; s += batch) {
        const int n = std::min(batch, hi - s);
        idx_.resize(n);
        std::iota(idx_.begin(), idx_.end(), s);
        labels_.resize(n);
        gather_batch(d, idx_.data(), n, x_, labels_.data());
        int64_t right = 0;
        sums[0] += ce_.forward(m_.forward(x_, false), labels_.data(), n, &right) * n;
        sums[1] += static_cast<double>(right);
        sums[2] += n;
    }
    comm_.allreduce_sum(sums, 3);
    EvalResult e;
    e.count = static_cast<int64_t>(sums[2]);
    if (sums[2] > 0) {
        e.loss = sums[0] / sums[2];
        e.accuracy = sums[1] / sums[2];
    }
    return e;
}

std::vector<EpochResult> train(Model& model, const Dataset& train_set, const Dataset& test_set, const TrainConfig& cfg,
                               Comm& comm, const std::function<void(const EpochResult&)>& on_epoch) {
    const int K = comm.size(), B = cfg.global_batch;
    if (B <= 0 || B % K != 0)
        throw TrainError("global batch " + std::to_string(B) + " is not a positive multiple of the " +
                         std::to_string(K) + " ranks");
    if (train_set.count < B)
        throw TrainError("the training set has " + std::to_string(train_set.count) +
                         " examples, fewer than one global batch of " + std::to_string(B));
    const int b = B / K;
    const int64_t steps = train_set.count / B;
    LrSchedule sched = cfg.lr;
    sched.global_batch = B;
    sched.steps_per_epoch = steps;
    sched.epochs = cfg.epochs;

    // Same start on every rank: rank 0's weights (identical already when seeded alike).
    comm.broadcast(model.params(), model.num_params(), 0);
    if (model.state_size() > 0) comm.broadcast(model.state(), model.state_size(), 0);

    OptimConfig oc = cfg.optim;
    oc.momentum = cfg.momentum;
    oc.weight_decay = cfg.weight_decay;
    Trainer tr(model, comm, oc);
    NoiseScale noise(cfg.noise_beta);
    const bool adaptive = cfg.warmup_threshold > 0;
    NormWarmup warm(adaptive ? cfg.warmup_threshold : 1.0, cfg.warmup_beta, std::max(1, cfg.warmup_min_steps),
                    std::llround(sched.warmup_epochs * static_cast<double>(steps)));
    double lr_now = 0;
    std::unique_ptr<HessianProbe> hess;
    if (cfg.hessian_every > 0) {
        // the probe batch: hessian_batch examples drawn once (without replacement) from the seed
        std::vector<int> all(train_set.count);
        std::iota(all.begin(), all.end(), 0);
        Rng prng(cfg.seed ^ 0x5851f42d4c957f2dULL);
        prng.shuffle(all.data(), all.size());
        const int pb = std::max(K, std::min<int>(cfg.hessian_batch, static_cast<int>(train_set.count)));
        hess.reset(new HessianProbe(std::vector<int>(all.begin(), all.begin() + pb), cfg.hessian, cfg.seed));
    }
    std::vector<int> perm(train_set.count);
    std::iota(perm.begin(), perm.end(), 0);
    Rng data_rng(cfg.seed ^ 0x9e3779b97f4a7c15ULL);
    std::vector<EpochResult> out;
    int64_t t = 0;
    for (int e = 1; e <= cfg.epochs; ++e) {
        data_rng.shuffle(perm.data(), perm.size());
        double loss_sum = 0, gnorm_sum = 0, probe_secs = 0;
        int64_t correct = 0;
        const double t0 = now_seconds();
        for (int64_t s = 0; s < steps; ++s, ++t) {
            const int* idx = perm.data() + s * B + static_cast<int64_t>(comm.rank()) * b;
            const bool measure = cfg.noise_every > 0 && t % cfg.noise_every == 0;
            lr_now = adaptive ? sched.at_adaptive(t, warm.end_step()) : sched.at(t);
            StepStats st;
            loss_sum += tr.step(train_set, idx, b, lr_now, true, &correct, &st, measure) * b;
            gnorm_sum += std::sqrt(st.grad_norm2);
            if (adaptive) warm.update(st.grad_norm2);
            if (hess && t % cfg.hessian_every == 0) {
                const double h0 = now_seconds();
                hess->measure(model, train_set, comm);
                probe_secs += now_seconds() - h0;
                if (cfg.on_hessian) cfg.on_hessian(t, hess->last(), std::sqrt(st.grad_norm2));
            }
            if (st.noise && noise.add(st.b_small, st.g2_small, st.b_big, st.g2_big) && noise.ready())
                sched.noise_scale = noise.value();
        }
        double secs = now_seconds() - t0 - probe_secs;  // the Hessian probe is not training time
        comm.allreduce_max(&secs, 1);
        double sums[2] = {loss_sum, static_cast<double>(correct)};
        comm.allreduce_sum(sums, 2);
        EpochResult r;
        r.epoch = e;
        const double seen = static_cast<double>(steps) * B;
        r.train_loss = sums[0] / seen;
        r.train_accuracy = sums[1] / seen;
        r.seconds = secs;
        r.images_per_second = secs > 0 ? seen / secs : 0;
        r.noise_scale = noise.value();
        r.lr = lr_now;
        r.warmup_end = adaptive ? warm.end_step() : -1;
        r.grad_norm = steps > 0 ? gnorm_sum / static_cast<double>(steps) : 0;
        r.hessian_eig = hess ? hess->last() : 0;
        r.batch = B;
        if (!std::isfinite(r.train_loss))
            throw TrainError("training diverged in epoch " + std::to_string(e) + " (loss " + std::to_string(r.train_loss) +
                             "); lower --lr or raise --warmup-epochs");
        const EvalResult ev = tr.evaluate(test_set, cfg.eval_batch);
        r.test_loss = ev.loss;
        r.test_accuracy = ev.accuracy;
        out.push_back(r);
        if (on_epoch) on_epoch(r);
    }
    return out;
}

double time_compute_step(Model& model, const Dataset& d, int batch, int warmup, int iters) {
    if (batch <= 0 || iters <= 0 || d.count <= 0) throw TrainError("time_compute_step: empty batch, data or iterations");
    Comm serial;
    Trainer tr(model, serial, 0.9, 5e-4);
    std::vector<int> idx(batch);
    int64_t pos = 0;
    auto next = [&]() {
        for (int i = 0; i < batch; ++i) idx[i] = static_cast<int>((pos + i) % d.count);
        pos = (pos + batch) % d.count;
    };
    const double lr = 1e-3;  // small: the weights must stay finite, the value is irrelevant to timing
    for (int i = 0; i < warmup; ++i) {
        next();
        tr.step(d, idx.data(), batch, lr, false, nullptr);
    }
    double total = 0;
    for (int i = 0; i < iters; ++i) {
        next();  // choosing the examples is not part of the step's time
        const double t0 = now_seconds();
        tr.step(d, idx.data(), batch, lr, false, nullptr);
        total += now_seconds() - t0;
    }
    return total / iters;
}

double time_allreduce(Comm& comm, int64_t bytes, int warmup, int iters) {
    if (comm.size() <= 1 || iters <= 0) return 0.0;
    // zeros: the sums stay finite however many calls (no overflow, no denormals)
    std::vector<float> buf(static_cast<size_t>((std::max<int64_t>(bytes, 4) + 3) / 4), 0.0f);
    for (int i = 0; i < warmup; ++i) comm.allreduce_sum(buf.data(), buf.size());
    comm.barrier();
    const double t0 = now_seconds();
    for (int i = 0; i < iters; ++i) comm.allreduce_sum(buf.data(), buf.size());
    double secs = (now_seconds() - t0) / iters;
    comm.allreduce_max(&secs, 1);
    return secs;
}

}  // namespace train
}  // namespace tula
