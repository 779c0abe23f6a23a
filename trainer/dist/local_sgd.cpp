// tula-train: Local SGD with adaptive batch sizes. See local_sgd.hpp.
#include "dist/local_sgd.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "core/layers.hpp"
#include "core/rng.hpp"

namespace tula {
namespace train {

BatchTest parse_batch_test(const std::string& s) {
    if (s == "none") return BatchTest::None;
    if (s == "norm") return BatchTest::Norm;
    if (s == "inner") return BatchTest::Inner;
    throw std::invalid_argument("unknown batch test '" + s + "'; valid: none, norm, inner");
}

BatchSums combine_batch_sums(const std::vector<BatchSums>& parts) {
    BatchSums out;
    for (const auto& p : parts) {
        if (out.weighted_sum.empty()) out.weighted_sum.assign(p.weighted_sum.size(), 0.0);
        if (p.weighted_sum.size() != out.weighted_sum.size())
            throw std::invalid_argument("combine_batch_sums: parts of different sizes");
        for (size_t j = 0; j < p.weighted_sum.size(); ++j) out.weighted_sum[j] += p.weighted_sum[j];
        out.examples += p.examples;
        out.micro += p.micro;
        out.sq_within += p.sq_within;
        out.sq_rank_means += p.sq_rank_means;
        out.ranks += p.ranks;
    }
    return out;
}

BatchStatistics batch_statistics(const BatchSums& s) {
    BatchStatistics st;
    st.examples = s.examples;
    if (!(s.examples > 0)) return st;
    double g2 = 0;
    for (double v : s.weighted_sum) g2 += (v / s.examples) * (v / s.examples);
    st.grad_norm2 = g2;
    if (s.micro >= 2) st.trace = std::max(0.0, (s.sq_within - s.examples * g2) / (s.micro - 1));
    if (s.ranks >= 1 && s.micro > s.ranks)
        st.trace_within = std::max(0.0, (s.sq_within - s.sq_rank_means) / (s.micro - s.ranks));
    return st;
}

int next_local_batch(BatchTest test, int b, const BatchStatistics& st, double eta, double theta, int max_batch,
                     double max_growth, int min_batch) {
    if (test == BatchTest::None) return b;
    const double g2 = st.grad_norm2;
    double need = 0;
    if (test == BatchTest::Norm) {
        if (!(g2 > 0) || !(eta > 0)) return b;
        need = st.trace / (eta * eta * g2);
    } else {
        if (!(g2 > 0) || !(theta > 0)) return b;
        need = st.ip_var / (theta * theta * g2 * g2);
    }
    if (!std::isfinite(need)) return b;
    double nb = std::max(static_cast<double>(std::max(1, min_batch)), std::ceil(need));
    if (max_growth > 1) nb = std::min(nb, std::max(static_cast<double>(b), std::floor(max_growth * b)));
    return nb >= max_batch ? max_batch : static_cast<int>(nb);
}

BatchStatisticsEma::BatchStatisticsEma(double beta)
    : beta_(std::min(0.9999, std::max(0.0, std::isfinite(beta) ? beta : 0.0))) {}

const BatchStatistics& BatchStatisticsEma::add(const BatchStatistics& st) {
    auto mix = [&](double& e, double x) {
        if (std::isfinite(x)) e = have_ ? beta_ * e + (1.0 - beta_) * x : x;
    };
    mix(ema_.trace, st.trace);
    mix(ema_.trace_within, st.trace_within);
    mix(ema_.grad_norm2, st.grad_norm2);
    mix(ema_.ip_var, st.ip_var);
    ema_.examples = st.examples;
    have_ = true;
    return ema_;
}

bool add_local_noise(NoiseScale& ns, const BatchStatistics& st) {
    if (!(st.trace_within > 0) || !(st.examples > 0)) return false;
    return ns.add_estimates(st.grad_norm2 - st.trace_within / st.examples, st.trace_within);
}

BatchVariance::BatchVariance(size_t np, bool keep_micro) : keep_(keep_micro) {
    s_.weighted_sum.assign(np, 0.0);
}

void BatchVariance::clear() {
    std::fill(s_.weighted_sum.begin(), s_.weighted_sum.end(), 0.0);
    s_.examples = s_.micro = s_.sq_within = 0;
    h_.clear();
    m_.clear();
}

void BatchVariance::add(const float* h, int m) {
    if (m <= 0) return;
    double sq = 0;
    for (size_t j = 0; j < s_.weighted_sum.size(); ++j) {
        s_.weighted_sum[j] += static_cast<double>(m) * h[j];
        sq += static_cast<double>(h[j]) * h[j];
    }
    s_.examples += m;
    s_.micro += 1;
    s_.sq_within += m * sq;
    if (keep_) {
        h_.emplace_back(h, h + s_.weighted_sum.size());
        m_.push_back(m);
    }
}

BatchSums BatchVariance::sums() const {
    BatchSums s = s_;
    s.ranks = 1;
    s.sq_rank_means = 0;
    if (s.examples > 0) {
        for (double v : s.weighted_sum) s.sq_rank_means += v * v;  // b_r^2 |gbar_r|^2
        s.sq_rank_means /= s.examples;
    }
    return s;
}

BatchStatistics BatchVariance::finish(Comm& comm, bool inner) {
    const size_t np = s_.weighted_sum.size();
    BatchSums all = sums();
    if (comm.size() > 1) {
        comm.allreduce_sum(all.weighted_sum.data(), np);
        double sc[5] = {all.examples, all.micro, all.sq_within, all.sq_rank_means, all.ranks};
        comm.allreduce_sum(sc, 5);
        all.examples = sc[0];
        all.micro = sc[1];
        all.sq_within = sc[2];
        all.sq_rank_means = sc[3];
        all.ranks = sc[4];
    }
    BatchStatistics st = batch_statistics(all);
    if (inner && keep_ && all.examples > 0) {
        // Var_i(grad f_i . g) from micro-batches: sum_i m_i (h_i . g - |g|^2)^2 / (M - 1)
        double acc = 0;
        for (size_t i = 0; i < h_.size(); ++i) {
            double p = 0;
            for (size_t j = 0; j < np; ++j) p += h_[i][j] * (all.weighted_sum[j] / all.examples);
            acc += m_[i] * (p - st.grad_norm2) * (p - st.grad_norm2);
        }
        if (comm.size() > 1) comm.allreduce_sum(&acc, 1);
        st.ip_var = all.micro >= 2 ? acc / (all.micro - 1) : 0;
    }
    return st;
}

namespace {
double now_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Averages buf[0..n) over the ranks.
void average(Comm& comm, float* buf, size_t n) {
    if (comm.size() <= 1 || n == 0) return;
    comm.allreduce_sum(buf, n);
    const float inv = 1.0f / static_cast<float>(comm.size());
    for (size_t i = 0; i < n; ++i) buf[i] *= inv;
}
}  // namespace

int memory_local_batch_cap(double rss_base, double rss_now, int b, double available, int local_ranks,
                           double fraction) {
    constexpr int none = std::numeric_limits<int>::max();
    if (!(std::isfinite(rss_base) && std::isfinite(rss_now) && std::isfinite(available) && rss_base > 0 &&
          available > 0 && fraction > 0 && local_ranks > 0 && b > 0 && rss_now > rss_base))
        return none;
    const double per_example = (rss_now - rss_base) / b;
    const double budget = fraction * (rss_now + available / local_ranks);
    const double cap = std::floor((budget - rss_base) / per_example);
    if (cap >= static_cast<double>(none)) return none;
    return std::max(b, static_cast<int>(cap));
}

double resident_bytes() {
    std::ifstream f("/proc/self/statm");
    double pages_total = 0, pages_resident = 0;
    if (!(f >> pages_total >> pages_resident)) return std::numeric_limits<double>::quiet_NaN();
    return pages_resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

namespace {

// The first number of file `path`; NaN when it cannot be read or says "max" (no limit).
double read_number(const std::string& path) {
    std::ifstream f(path);
    double v = 0;
    return f >> v ? v : std::numeric_limits<double>::quiet_NaN();
}

// The directory of cgroup `path` (as /proc/self/cgroup gives it) under the file system
// mounted at `mount`: the path itself when it exists there, else the path with its leading
// components dropped one at a time, down to the mount itself (a container that mounts its
// own group as the root without a cgroup namespace). "" when none exists.
std::string cgroup_dir(const std::string& mount, std::string path) {
    struct stat st {};
    for (;;) {
        const std::string d = mount + (path == "/" ? "" : path);
        if (::stat(d.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return d;
        if (path.empty() || path == "/") return "";
        const size_t next = path.find('/', 1);
        path = next == std::string::npos ? "/" : path.substr(next);
    }
}

}  // namespace

double cgroup_memory_left(const std::string& proc_self_cgroup, const std::string& root) {
    std::istringstream f(proc_self_cgroup);
    std::string line;
    double left = std::numeric_limits<double>::quiet_NaN();
    while (std::getline(f, line)) {  // "0::/path" (v2) or "4:memory:/path" (v1)
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string ctrl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        std::vector<std::pair<std::string, std::string>> files;
        if (ctrl.empty()) {
            for (const std::string& mount : {root, root + "/unified"}) {
                const std::string d = cgroup_dir(mount, path);
                if (!d.empty()) files.emplace_back(d + "/memory.max", d + "/memory.current");
            }
        } else if (ctrl == "memory") {
            const std::string d = cgroup_dir(root + "/memory", path);
            if (!d.empty()) files.emplace_back(d + "/memory.limit_in_bytes", d + "/memory.usage_in_bytes");
        }
        for (const auto& [limit_file, usage_file] : files) {
            const double limit = read_number(limit_file), usage = read_number(usage_file);
            if (std::isfinite(limit) && limit < 1e18 && std::isfinite(usage))  // v1 "unlimited" is ~9.2e18
                left = std::isfinite(left) ? std::min(left, limit - usage) : limit - usage;
        }
    }
    return left;
}

double available_memory_bytes() {
    std::ifstream f("/proc/meminfo");
    std::string key, unit;
    double kib = 0, avail = std::numeric_limits<double>::quiet_NaN();
    while (f >> key >> kib) {
        std::getline(f, unit);
        if (key == "MemAvailable:") {
            avail = kib * 1024.0;
            break;
        }
    }
    std::ifstream cg("/proc/self/cgroup");
    std::stringstream text;
    text << cg.rdbuf();
    const double left = cgroup_memory_left(text.str());
    if (std::isfinite(left)) avail = std::isfinite(avail) ? std::min(avail, std::max(0.0, left)) : std::max(0.0, left);
    return avail;
}

// The arguments train_local_sgd refuses; throws TrainError with the reason.
void check_local_sgd(const TrainConfig& cfg, const LocalSgdConfig& lc, int K, int64_t train_examples) {
    if (lc.local_steps < 1) throw TrainError("--local-steps must be >= 1");
    if (lc.micro_batches < 2) throw TrainError("the batch test needs at least 2 micro-batches");
    if (cfg.global_batch <= 0 || cfg.global_batch % K != 0)
        throw TrainError("global batch " + std::to_string(cfg.global_batch) + " is not a positive multiple of the " +
                         std::to_string(K) + " ranks");
    if (train_examples < cfg.global_batch)
        throw TrainError("the training set has " + std::to_string(train_examples) +
                         " examples, fewer than one global batch of " + std::to_string(cfg.global_batch));
}

// The model's parameters and state (batch-norm statistics) averaged over the ranks.
void average_model(Comm& comm, Model& model) {
    average(comm, model.params(), model.num_params());
    if (model.state_size() > 0) average(comm, model.state(), model.state_size());
}

// A round's last local step as M micro-batches of the local batch (the batch test's step): the
// micro-batches' gradients go to `bv`, their example-weighted mean is left in model.grads().
struct MicroBatchStep {
    Model& model;
    SoftmaxCrossEntropy& ce;
    BatchVariance& bv;
    Tensor& x;                 // one micro-batch's inputs, (cnt, C, H, W)
    std::vector<float>& gsum;  // (num_params,) the example-weighted gradient sum

    // Over the batch's first b examples: returns their summed loss; adds the correct
    // predictions to *correct and the mean gradient's L2 norm to *gnorm_sum.
    double run(const Batch& batch, int b, int M, int64_t* correct, double* gnorm_sum) {
        const size_t np = model.num_params();
        bv.clear();
        std::fill(gsum.begin(), gsum.end(), 0.0f);
        double loss = 0;
        for (int i = 0; i < M; ++i) {
            const int lo = static_cast<int>(static_cast<int64_t>(i) * b / M);
            const int cnt = static_cast<int>(static_cast<int64_t>(i + 1) * b / M) - lo;
            x.resize(cnt, batch.x.shape());
            std::copy(batch.x.sample(lo), batch.x.sample(lo) + x.size(), x.ptr());
            model.zero_grad();
            loss += ce.forward(model.forward(x, true), batch.labels.data() + lo, cnt, correct) * cnt;
            model.backward(ce.backward());
            bv.add(model.grads(), cnt);
            const float* g = model.grads();
            for (size_t j = 0; j < np; ++j) gsum[j] += static_cast<float>(cnt) * g[j];
        }
        float* g = model.grads();
        double g2 = 0;
        for (size_t j = 0; j < np; ++j) {
            g[j] = gsum[j] / static_cast<float>(b);
            g2 += static_cast<double>(g[j]) * g[j];
        }
        *gnorm_sum += std::sqrt(g2);
        return loss;
    }
};

// The next local batch `nb` (> b) capped by every rank's memory bound, the smallest of them
// for all (memory_local_batch_cap); the first cap is reported through lc.on_memory_cap on rank 0.
double memory_capped_batch(double nb, int b, double rss_base, const LocalSgdConfig& lc, Comm& comm, bool* capped) {
    const double avail = available_memory_bytes();
    double mem = -memory_local_batch_cap(rss_base, resident_bytes(), b, avail, lc.local_ranks, lc.memory_fraction);
    comm.allreduce_max(&mem, 1);  // the minimum over ranks
    mem = -mem;
    if (nb <= mem) return nb;
    if (!*capped && comm.rank() == 0 && lc.on_memory_cap) lc.on_memory_cap(comm.size() * static_cast<int>(mem), avail);
    *capped = true;
    return mem;
}

std::vector<EpochResult> train_local_sgd(Model& model, const Dataset& train_set, const Dataset& test_set,
                                         const TrainConfig& cfg, const LocalSgdConfig& lc, Comm& comm,
                                         const std::function<void(const EpochResult&)>& on_epoch) {
    const int K = comm.size();
    check_local_sgd(cfg, lc, K, train_set.count);
    const int cap_all = static_cast<int>(train_set.count / K);
    const int cap = lc.max_local_batch > 0 ? std::min(lc.max_local_batch, cap_all) : cap_all;
    int b = cfg.global_batch / K;
    LrSchedule sched = cfg.lr;
    sched.epochs = cfg.epochs;

    comm.broadcast(model.params(), model.num_params(), 0);
    if (model.state_size() > 0) comm.broadcast(model.state(), model.state_size(), 0);
    const double rss_base = lc.memory_fraction > 0 ? resident_bytes() : 0.0;  // before any batch buffer
    bool memory_capped = false;
    OptimConfig oc = cfg.optim;
    oc.momentum = cfg.momentum;
    oc.weight_decay = cfg.weight_decay;
    Trainer tr(model, comm, oc);
    tr.set_prefetch(cfg.prefetch);
    tr.set_augment(cfg.augment, cfg.seed);  // --augment: the same per-step draws as train()
    const bool inner = lc.test == BatchTest::Inner;
    const size_t np = model.num_params();
    BatchVariance bv(np, inner);
    SoftmaxCrossEntropy ce;
    ce.set_label_smoothing(cfg.label_smoothing);
    Tensor x;
    std::vector<float> gsum(np);

    std::vector<int> perm(train_set.count);
    std::iota(perm.begin(), perm.end(), 0);
    Rng data_rng(cfg.seed ^ 0x9e3779b97f4a7c15ULL);
    const double total = static_cast<double>(train_set.count) * cfg.epochs;
    double seen = 0, lr_now = 0, noise = 0;
    NoiseScale noise_est(cfg.noise_beta);
    BatchStatisticsEma test_ema(lc.test_beta);
    const int b0 = b;  // the batch may fall back to this one, never below
    int h = 0;  // local steps since the last averaging
    std::vector<EpochResult> out;
    for (int e = 1; e <= cfg.epochs; ++e) {
        data_rng.shuffle(perm.data(), perm.size());
        double loss_sum = 0, gnorm_sum = 0, examples = 0;
        int64_t correct = 0, steps = 0;
        const double t0 = now_seconds();
        for (int64_t pos = 0; pos + static_cast<int64_t>(K) * b <= train_set.count;) {
            // this step's examples; b may grow at the end of the step, the next one starts here
            const int64_t stride = static_cast<int64_t>(K) * b;
            const int* idx = perm.data() + pos + static_cast<int64_t>(comm.rank()) * b;
            lr_now = sched.at_progress(seen / total, K * b);
            const bool last = h + 1 == lc.local_steps;
            const bool test_now = last && lc.test != BatchTest::None;  // the batch may grow after this step
            const int64_t next = pos + 2 * static_cast<int64_t>(K) * b;
            if (!test_now && next <= train_set.count) tr.prefetch(train_set, idx + static_cast<int64_t>(K) * b, b);
            if (test_now) {
                // the round's last local step as M micro-batches: gradient and its variance
                MicroBatchStep mb{model, ce, bv, x, gsum};
                loss_sum += mb.run(tr.take_batch(train_set, idx, b), b, std::min(lc.micro_batches, b), &correct, &gnorm_sum);
                tr.optimizer().step(model.params(), model.grads(), lr_now);
            } else {
                StepStats st;
                loss_sum += tr.step(train_set, idx, b, lr_now, false, &correct, &st, false) * b;
                gnorm_sum += std::sqrt(st.grad_norm2);
            }
            ++steps;
            examples += b;
            seen += static_cast<double>(K) * b;
            if (++h == lc.local_steps) {
                h = 0;
                average_model(comm, model);
                if (lc.test != BatchTest::None) {
                    const BatchStatistics bs = bv.finish(comm, inner);
                    if (add_local_noise(noise_est, bs) && noise_est.ready())
                        sched.observe_noise_scale(noise = noise_est.value());
                    double nb = next_local_batch(lc.test, b, test_ema.add(bs), lc.eta, lc.theta, cap, lc.max_growth,
                                                 b0);
                    comm.allreduce_max(&nb, 1);  // one decision on every rank
                    if (nb > b && lc.memory_fraction > 0) nb = memory_capped_batch(nb, b, rss_base, lc, comm, &memory_capped);
                    b = static_cast<int>(nb);
                }
            }
            pos += stride;  // not K x the new b: that skipped K (b_new - b_old) examples at each growth
        }
        if (h != 0) {  // the epoch's unfinished round: average before evaluating
            h = 0;
            average_model(comm, model);
        }
        double secs = now_seconds() - t0;
        comm.allreduce_max(&secs, 1);
        double sums[4] = {loss_sum, static_cast<double>(correct), examples, gnorm_sum};
        comm.allreduce_sum(sums, 4);
        EpochResult r;
        r.epoch = e;
        r.train_loss = sums[2] > 0 ? sums[0] / sums[2] : 0;
        r.train_accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0;
        r.seconds = secs;
        r.images_per_second = secs > 0 ? sums[2] / secs : 0;
        r.noise_scale = noise;
        r.lr = lr_now;
        r.grad_norm = steps > 0 ? sums[3] / (static_cast<double>(steps) * K) : 0;
        r.batch = K * b;
        finish_epoch(r, tr, test_set, cfg.eval_batch, out, on_epoch, cfg.val_set);
        if (reached_target(r.test_accuracy, cfg.target_accuracy)) break;  // the same verdict on every rank
    }
    return out;
}

}  // namespace train
}  // namespace tula
