// tula-train: training loop, evaluation, profiling kernels. See train.hpp.
#include "train/train.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>

#include "tula/models.hpp"

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
// The smallest and largest of `factors` (one per segment) over the segments with weight
// decay, the ones trust scaling applies to; 0 and 0 when there is none.
void trust_range(const std::vector<double>& factors, const std::vector<ParamSegment>& segs, double* lo,
                 double* hi) {
    *lo = *hi = 0;
    bool any = false;
    for (size_t k = 0; k < segs.size() && k < factors.size(); ++k) {
        if (!segs[k].decay) continue;
        *lo = any ? std::min(*lo, factors[k]) : factors[k];
        *hi = any ? std::max(*hi, factors[k]) : factors[k];
        any = true;
    }
}
}  // namespace

Trainer::Trainer(Model& model, Comm& comm, double momentum, double weight_decay)
    : Trainer(model, comm, sgd_config(momentum, weight_decay)) {}

Trainer::Trainer(Model& model, Comm& comm, const OptimConfig& oc)
    : m_(model), comm_(comm), opt_(model.segments(), model.num_params(), oc), loader_(new BatchLoader(false)) {}

namespace {
// splitmix64 finalizer (Steele, Lea, Flood 2014): a well-mixed 64-bit value from x.
uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}
}  // namespace

void Trainer::set_augment(const Augment& a, uint64_t seed, int64_t first_step) {
    aug_ = a;
    aug_seed_ = seed;
    aug_step_ = first_step;
}

namespace {
// The seed of the augmentation draws of step k on `rank` (see Trainer::set_augment).
uint64_t augment_seed(uint64_t seed, int64_t k, int rank) {
    return mix64(mix64(seed ^ mix64(static_cast<uint64_t>(k))) + static_cast<uint64_t>(rank));
}
}  // namespace

void Trainer::set_prefetch(bool on) {
    if (on != loader_->threaded()) loader_.reset(new BatchLoader(on));
}

void Trainer::prefetch(const Dataset& d, const int* idx, int n) {
    next_.data = &d;
    next_.idx.assign(idx, idx + std::max(0, n));
    next_.aug = aug_;
    next_.rng_seed = augment_seed(aug_seed_, aug_step_ + 1, comm_.rank());
}

const Batch& Trainer::take_batch(const Dataset& d, const int* idx, int n, double* gather_seconds) {
    const uint64_t seed = augment_seed(aug_seed_, aug_step_, comm_.rank());
    ++aug_step_;
    const Batch& b = loader_->take(d, idx, n, aug_, seed, gather_seconds);
    if (next_.data) {
        loader_->submit(std::move(next_));
        next_ = BatchKey();
    }
    return b;
}

double Trainer::step(const Dataset& d, const int* idx, int n, double lr, bool sync, int64_t* correct,
                     StepStats* stats, bool measure_noise) {
    double gather_secs = 0;
    const Batch& batch = take_batch(d, idx, n, &gather_secs);
    if (stats) stats->gather_seconds = gather_secs;
    const size_t np = m_.num_params();
    const bool many = sync && comm_.size() > 1;
    const bool split = stats && measure_noise && !many && n >= 2;
    double loss = 0, local_g2 = 0;
    bool reduced = false;  // by the gradient buckets
    if (split) {
        // two micro-batches: g = (h g1 + (n-h) g2) / n, both gradients being means. Their
        // forward passes would update the batch-norm running statistics twice, from half
        // batches: the statistics are kept as they were before the step instead
        bn_saved_.assign(m_.state(), m_.state() + m_.state_size());
        const int h = n / 2;
        double g2s = 0;
        for (int part = 0; part < 2; ++part) {
            const int lo = part == 0 ? 0 : h, cnt = part == 0 ? h : n - h;
            // the micro-batch: examples [lo, lo + cnt) of the batch (gathered with one
            // sequence of draws, example by example, as two gathers in a row would draw)
            x_.resize(cnt, batch.x.shape());
            std::copy(batch.x.sample(lo), batch.x.sample(lo) + x_.size(), x_.ptr());
            m_.zero_grad();
            const Tensor& z = m_.forward(x_, true);
            loss += ce_.forward(z, batch.labels.data() + lo, cnt, correct) * cnt / n;
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
        std::copy(bn_saved_.begin(), bn_saved_.end(), m_.state());
        stats->noise = true;
        stats->b_small = 0.5 * n;
        stats->g2_small = g2s;
        stats->b_big = n;
    } else {
        m_.zero_grad();
        const Tensor& z = m_.forward(batch.x, true);
        loss = ce_.forward(z, batch.labels.data(), n, correct);
        if (many && !buckets_.empty()) {
            // start each bucket's reduction once backward has passed its first parameter
            float* g = m_.grads();
            const bool want_g2 = stats && measure_noise;
            size_t next = 0;
            auto launch = [&](size_t ready) {
                for (; next < buckets_.size() && buckets_[next].first >= ready; ++next) {
                    const size_t lo = buckets_[next].first, cnt = buckets_[next].second - lo;
                    if (want_g2) local_g2 += sq_norm(g + lo, cnt);  // this rank's |g_r|^2, before the sum
                    comm_.iallreduce_sum(g + lo, cnt);
                }
                comm_.progress();
            };
            m_.backward(ce_.backward(), launch);
            launch(0);
            comm_.wait_all();
            reduced = true;
        } else {
            m_.backward(ce_.backward());
            if (stats && measure_noise && many) local_g2 = sq_norm(m_.grads(), np);
        }
    }
    if (many) {
        float* g = m_.grads();
        if (!reduced) comm_.allreduce_sum(g, np);
        const float inv = 1.0f / static_cast<float>(comm_.size());
        for (size_t i = 0; i < np; ++i) g[i] *= inv;
        if (stats && measure_noise) stats->observe_noise(comm_, local_g2, n);
    }
    if (stats) {
        stats->grad_norm2 = sq_norm(m_.grads(), np);
        if (stats->noise) stats->g2_big = stats->grad_norm2;
    }
    opt_.step(m_.params(), m_.grads(), lr);
    if (stats) trust_range(opt_.last_factors(), m_.segments(), &stats->trust_min, &stats->trust_max);
    return loss;
}

void StepStats::observe_noise(Comm& comm, double local_g2, int n) {
    comm.allreduce_sum(&local_g2, 1);
    noise = true;
    b_small = n;
    g2_small = local_g2 / comm.size();
    b_big = static_cast<double>(n) * comm.size();
}

void Trainer::set_bucket_bytes(size_t bytes) {
    buckets_.clear();
    if (bytes == 0) return;
    const size_t per = std::max<size_t>(1, bytes / sizeof(float));
    for (size_t hi = m_.num_params(); hi > 0;) {
        const size_t lo = hi > per ? hi - per : 0;
        buckets_.emplace_back(lo, hi);
        hi = lo;
    }
}

EvalResult evaluate_sharded(const Dataset& d, int batch, Comm& comm,
                            const std::function<double(const int* idx, int n, int64_t* correct)>& eval_batch) {
    const int64_t k = comm.size(), r = comm.rank();
    const int lo = static_cast<int>(r * d.count / k), hi = static_cast<int>((r + 1) * d.count / k);
    batch = std::max(1, batch);
    std::vector<int> idx;
    double sums[3] = {0, 0, 0};  // loss sum, correct, count
    for (int s = lo; s < hi; s += batch) {
        const int n = std::min(batch, hi - s);
        idx.resize(n);
        std::iota(idx.begin(), idx.end(), s);
        int64_t right = 0;
        sums[0] += eval_batch(idx.data(), n, &right) * n;
        sums[1] += static_cast<double>(right);
        sums[2] += n;
    }
    comm.allreduce_sum(sums, 3);
    EvalResult e;
    e.count = static_cast<int64_t>(sums[2]);
    if (sums[2] > 0) {
        e.loss = sums[0] / sums[2];
        e.accuracy = sums[1] / sums[2];
    }
    return e;
}

EvalResult Trainer::evaluate(const Dataset& d, int batch) {
    if (comm_.size() > 1 && m_.state_size() > 0) comm_.broadcast(m_.state(), m_.state_size(), 0);
    return evaluate_sharded(d, batch, comm_, [&](const int* idx, int n, int64_t* right) {
        labels_.resize(n);
        gather_batch(d, idx, n, x_, labels_.data(), d.mean, d.std);
        return ce_.forward(m_.forward(x_, false), labels_.data(), n, right);
    });
}

namespace {
// An EpochResult as named fields (checkpoints), and back. Errors of epoch_from_json:
// std::invalid_argument naming the field.
nlohmann::json epoch_to_json(const EpochResult& e) {
    return {{"epoch", e.epoch},           {"train_loss", e.train_loss},   {"train_accuracy", e.train_accuracy},
            {"test_loss", e.test_loss},   {"test_accuracy", e.test_accuracy}, {"seconds", e.seconds},
            {"images_per_second", e.images_per_second}, {"noise_scale", e.noise_scale}, {"lr", e.lr},
            {"warmup_end", e.warmup_end}, {"grad_norm", e.grad_norm},     {"hessian_eig", e.hessian_eig},
            {"batch", e.batch},           {"val_loss", e.val_loss},       {"val_accuracy", e.val_accuracy}};
}
EpochResult epoch_from_json(const nlohmann::json& j) {
    try {
        EpochResult e;
        e.epoch = j.at("epoch").get<int>();
        e.train_loss = j.at("train_loss").get<double>();
        e.train_accuracy = j.at("train_accuracy").get<double>();
        e.test_loss = j.at("test_loss").get<double>();
        e.test_accuracy = j.at("test_accuracy").get<double>();
        e.seconds = j.at("seconds").get<double>();
        e.images_per_second = j.at("images_per_second").get<double>();
        e.noise_scale = j.at("noise_scale").get<double>();
        e.lr = j.at("lr").get<double>();
        e.warmup_end = j.at("warmup_end").get<int64_t>();
        e.grad_norm = j.at("grad_norm").get<double>();
        e.hessian_eig = j.at("hessian_eig").get<double>();
        e.batch = j.at("batch").get<int>();
        e.val_loss = j.at("val_loss").get<double>();
        e.val_accuracy = j.at("val_accuracy").get<double>();
        return e;
    } catch (const nlohmann::json::exception& x) {
        throw std::invalid_argument(std::string("finished epoch: ") + x.what());
    }
}
}  // namespace

namespace {

// One synchronous data-parallel run of train(): its configuration, its state between steps
// (what a checkpoint holds) and the steps of its epochs.
struct Run {
    Model& model;
    const Dataset& train_set;
    const Dataset& test_set;
    const TrainConfig& cfg;
    Comm& comm;
    const std::function<void(const EpochResult&)>& on_epoch;
    TrainHooks* hooks;
    const int K, B, b;        // ranks, global batch, local batch
    const int64_t steps;      // steps per epoch
    LrSchedule sched;
    std::unique_ptr<Trainer> cpu;  // the CPU engine, when no other was given
    StepEngine* tr = nullptr;
    NoiseScale noise;
    const bool adaptive;      // data-driven warmup
    NormWarmup warm;
    std::unique_ptr<HessianProbe> hess;
    std::vector<int> perm;    // the data order of the epoch
    Rng data_rng;
    std::vector<EpochResult> out;
    double lr_now = 0;
    int64_t t = 0, s0 = 0;    // steps done in all; steps of the resumed epoch done
    int e0 = 1;               // the first epoch to train
    double loss_sum = 0, secs0 = 0;  // this rank's sums of the epoch so far; its seconds before a resume
    double longest = 0;              // the longest step of this part so far (hooks->time_is_up), seconds
    int64_t part_steps = 0;          // steps trained in this part (this call of train())
    double part_secs = 0;            // their training seconds (the step loops, without evaluations)
    int64_t correct = 0;
    std::vector<double> parts_before;  // training seconds of the parts before the resume (Checkpoint::parts)
    const Checkpoint* ck = nullptr;
    bool watch = false;       // stop signals are watched (a checkpoint file is set)

    Run(Model& m, const Dataset& trs, const Dataset& tes, const TrainConfig& c, Comm& cm,
        const std::function<void(const EpochResult&)>& oe, TrainHooks* h, StepEngine* engine)
        : model(m), train_set(trs), test_set(tes), cfg(c), comm(cm), on_epoch(oe), hooks(h), K(cm.size()),
          B(c.global_batch), b(c.global_batch / cm.size()), steps(epoch_steps(trs.count, c.global_batch)), sched(c.lr),
          noise(c.noise_beta), adaptive(c.warmup_threshold > 0),
          warm(adaptive ? c.warmup_threshold : 1.0, c.warmup_beta, std::max(1, c.warmup_min_steps),
               std::llround(c.lr.warmup_epochs * static_cast<double>(epoch_steps(trs.count, c.global_batch))), c.warmup_window),
          perm(trs.count), data_rng(c.seed ^ 0x9e3779b97f4a7c15ULL) {
        sched.global_batch = B;
        sched.steps_per_epoch = steps;
        sched.epochs = cfg.epochs;
        // Same start on every rank: rank 0's weights (identical already when seeded alike).
        comm.broadcast(model.params(), model.num_params(), 0);
        if (model.state_size() > 0) comm.broadcast(model.state(), model.state_size(), 0);
        OptimConfig oc = cfg.optim;
        oc.momentum = cfg.momentum;
        oc.weight_decay = cfg.weight_decay;
        if (!engine) {
            cpu = std::make_unique<Trainer>(model, comm, oc);
            cpu->set_bucket_bytes(cfg.bucket_bytes);
            cpu->set_label_smoothing(cfg.label_smoothing);
        }
        tr = engine ? engine : cpu.get();
        if (engine && cfg.hessian_every > 0)
            throw TrainError("the Hessian probe (--hessian-every) is not implemented with --device cuda");
        if (cfg.hessian_every > 0) {
            // the probe batch: hessian_batch examples drawn once (without replacement) from the seed
            std::vector<int> all(train_set.count);
            std::iota(all.begin(), all.end(), 0);
            Rng prng(cfg.seed ^ 0x5851f42d4c957f2dULL);
            prng.shuffle(all.data(), all.size());
            const int pb = std::max(K, std::min<int>(cfg.hessian_batch, static_cast<int>(train_set.count)));
            hess.reset(new HessianProbe(std::vector<int>(all.begin(), all.begin() + pb), cfg.hessian, cfg.seed));
        }
        std::iota(perm.begin(), perm.end(), 0);
        ck = hooks ? hooks->resume : nullptr;
        if (ck) restore(*ck);
        watch = hooks && !hooks->checkpoint_path.empty();
        if (engine && (ck || watch))
            throw TrainError("checkpoints (--checkpoint, --resume, stop signals) are not implemented with --device cuda");
        if (engine && cfg.augment.any())
            throw TrainError("data augmentation (--augment) is not implemented with --device cuda; give --augment none");
        if (cpu) {
            cpu->set_augment(cfg.augment, cfg.seed, t);
            cpu->set_prefetch(cfg.prefetch);
        }
        if (hooks && !hooks->save_epochs.empty() && (engine || hooks->checkpoint_path.empty()))
            throw TrainError(engine ? "checkpoints (--save-epochs) are not implemented with --device cuda"
                                    : "saving epochs needs a checkpoint file (--checkpoint FILE)");
    }

    // Continues from checkpoint `c`: weights, optimizer, estimators, finished epochs, position
    // and this rank's partial sums; the data order is replayed. Errors: TrainError.
    void restore(const Checkpoint& c) {
        if (c.params.size() != model.num_params() || c.state.size() != model.state_size())
            throw TrainError("the checkpoint holds " + std::to_string(c.params.size()) + " parameters and " +
                             std::to_string(c.state.size()) + " BN values, the model " + model.name() + " has " +
                             std::to_string(model.num_params()) + " and " + std::to_string(model.state_size()) +
                             ": it is another model's");
        if (c.epoch > cfg.epochs || c.step_in_epoch > steps || !c.epochs_done.is_array())
            throw TrainError("the checkpoint's position (epoch " + std::to_string(c.epoch) + ", step " +
                             std::to_string(c.step_in_epoch) + ") lies outside this run");
        std::copy(c.params.begin(), c.params.end(), model.params());
        std::copy(c.state.begin(), c.state.end(), model.state());
        try {
            if (cpu) cpu->optimizer().set_state(c.opt_m1, c.opt_m2, c.opt_t);
        } catch (const std::invalid_argument& x) {
            throw TrainError("the checkpoint's " + std::string(x.what()));
        }
        try {
            model.set_rng_states(c.layer_rng);
        } catch (const std::invalid_argument& x) {
            throw TrainError("the checkpoint's dropout state does not fit the model: " + std::string(x.what()));
        }
        try {
            noise = NoiseScale::from_json(c.noise_estimator);
            warm = NormWarmup::from_json(c.warmup);
            for (const auto& e : c.epochs_done) out.push_back(epoch_from_json(e));
        } catch (const std::invalid_argument& x) {
            throw TrainError("the checkpoint's " + std::string(x.what()));
        }
        sched.noise_scale = c.noise_scale;
        e0 = c.epoch;
        s0 = c.step_in_epoch;
        t = c.global_step;
        lr_now = c.lr;
        secs0 = c.epoch_seconds;
        parts_before = c.parts;
        // this rank's partial sums of the epoch; with another rank count rank 0 takes them all
        if (c.ranks == K) {
            loss_sum = c.rank_sums[2 * comm.rank()];
            correct = static_cast<int64_t>(c.rank_sums[2 * comm.rank() + 1]);
        } else if (comm.rank() == 0) {
            for (int r = 0; r < c.ranks; ++r) {
                loss_sum += c.rank_sums[2 * r];
                correct += static_cast<int64_t>(c.rank_sums[2 * r + 1]);
            }
        }
        for (int e = 1; e < e0; ++e) data_rng.shuffle(perm.data(), perm.size());  // replay the data order
    }

    // The training seconds of the parts: parts_before, then this part's, the rest of
    // `total_seconds` (the run's training seconds so far: its finished epochs' and the share of
    // the epoch in progress), at least 0.
    std::vector<double> part_list(double total_seconds) const {
        std::vector<double> p = parts_before;
        double before = 0;
        for (double x : parts_before) before += x;
        p.push_back(std::max(0.0, total_seconds - before));
        return p;
    }
    // The training seconds of the finished epochs in `out`.
    double epochs_seconds() const {
        double s = 0;
        for (const EpochResult& x : out) s += x.seconds;
        return s;
    }

    // Writes the training state at a step boundary (epoch e in progress, s steps of it done,
    // t_done steps in all, `secs` training seconds of epoch e so far) to `path`: every rank's
    // partial sums of the epoch are gathered, rank 0 writes; the same verdict on every rank
    // (TrainError when the write failed).
    void save(const std::string& path, int e, int64_t s, int64_t t_done, double secs) {
        Checkpoint c;
        c.config = hooks->config;
        c.ranks = K;
        c.epoch = e;
        c.step_in_epoch = s;
        c.global_step = t_done;
        c.epoch_seconds = secs;
        c.lr = lr_now;
        c.noise_scale = sched.noise_scale;
        c.rank_sums.assign(2 * static_cast<size_t>(K), 0.0);
        c.rank_sums[2 * comm.rank()] = loss_sum;
        c.rank_sums[2 * comm.rank() + 1] = static_cast<double>(correct);
        comm.allreduce_sum(c.rank_sums.data(), c.rank_sums.size());
        std::string err;
        if (comm.rank() == 0) {
            c.noise_estimator = noise.to_json();
            c.warmup = warm.to_json();
            for (const EpochResult& x : out) c.epochs_done.push_back(epoch_to_json(x));
            c.parts = part_list(epochs_seconds() + secs);  // a resume from it starts the next part
            c.params.assign(model.params(), model.params() + model.num_params());
            c.state.assign(model.state(), model.state() + model.state_size());
            if (cpu) cpu->optimizer().get_state(c.opt_m1, c.opt_m2, c.opt_t);
            c.layer_rng = model.rng_states();
            try {
                write_checkpoint(path, c);
            } catch (const CheckpointError& x) {
                err = x.what();
            }
        }
        double failed = err.empty() ? 0.0 : 1.0;
        comm.allreduce_sum(&failed, 1);
        if (failed > 0) throw TrainError(err.empty() ? "rank 0 could not write the checkpoint" : err);
    }

    // The per-step record of step s of epoch e for hooks->on_step.
    StepRecord step_record(int e, int64_t s, double global_loss, const StepStats& st, double seconds) const {
        StepRecord rec;
        rec.step = t;
        rec.epoch = e;
        rec.step_in_epoch = s;
        rec.steps_per_epoch = steps;
        rec.loss = global_loss / B;
        rec.lr = lr_now;
        rec.grad_norm = std::sqrt(st.grad_norm2);
        rec.seconds = seconds;
        rec.images_per_second = seconds > 0 ? B / seconds : 0;
        rec.examples = B;
        rec.gather_seconds = st.gather_seconds;
        rec.trust_min = st.trust_min;
        rec.trust_max = st.trust_max;
        return rec;
    }

    // Trains epoch e, evaluates it and appends its result to `out`. Returns false when a stop
    // signal ended it (the checkpoint is written, hooks->stopped set).
    bool epoch(int e) {
        data_rng.shuffle(perm.data(), perm.size());
        double gnorm_sum = 0, probe_secs = 0;  // per epoch (a resumed epoch restarts them)
        std::vector<double> noise_trace;       // B_simple after each observation of the epoch
        if (e != e0 || !ck) {
            loss_sum = 0;
            correct = 0;
            secs0 = 0;
        }
        const double t0 = now_seconds();
        double t_prev = t0;
        for (int64_t s = e == e0 ? s0 : 0; s < steps; ++s, ++t) {
            const int* idx = perm.data() + s * B + static_cast<int64_t>(comm.rank()) * b;
            if (s + 1 < steps) tr->prefetch(train_set, idx + B, b);  // the next step's slice, while this one computes
            const bool measure = cfg.noise_every > 0 && t % cfg.noise_every == 0;
            lr_now = adaptive ? sched.at_adaptive(t, warm.end_step()) : sched.at(t);
            StepStats st;
            const double l = tr->step(train_set, idx, b, lr_now, true, &correct, &st, measure);
            ++part_steps;
            loss_sum += l * b;
            gnorm_sum += std::sqrt(st.grad_norm2);
            if (adaptive) warm.update(st.grad_norm2);
            if (hess && t % cfg.hessian_every == 0) {
                const double h0 = now_seconds();
                hess->measure(model, train_set, comm);
                probe_secs += now_seconds() - h0;
                if (cfg.on_hessian) cfg.on_hessian(t, hess->last(), std::sqrt(st.grad_norm2));
            }
            if (st.noise && noise.add(st.b_small, st.g2_small, st.b_big, st.g2_big) && noise.ready()) {
                sched.observe_noise_scale(noise.value());
                noise_trace.push_back(noise.value());
            }
            if (!watch && !(hooks && hooks->on_step)) continue;
            longest = std::max(longest, now_seconds() - t_prev);
            if (watch && hooks->time_is_up && !stop_requested() && hooks->time_is_up(longest)) set_stop_requested(true);
            // the step's global mean loss, whether any rank got a stop signal and whether any
            // got SIGTERM: one allreduce
            double agree[3] = {l * b, watch && stop_requested() ? 1.0 : 0.0, watch && stop_terminates() ? 1.0 : 0.0};
            comm.allreduce_sum(agree, 3);
            const double t1 = now_seconds();
            if (hooks->on_step) hooks->on_step(step_record(e, s, agree[0], st, t1 - t_prev));
            t_prev = t1;
            if (agree[1] == 0) continue;
            save(hooks->checkpoint_path, e, s + 1, t + 1, secs0 + (now_seconds() - t0) - probe_secs);
            part_secs += now_seconds() - t0 - probe_secs;
            hooks->part_steps = part_steps;
            hooks->part_train_seconds = part_secs;
            hooks->longest_step = longest;
            hooks->steps_left = std::max<int64_t>(0, static_cast<int64_t>(cfg.epochs) * steps - (t + 1));
            hooks->stopped = true;
            hooks->requeue = agree[2] == 0;
            if (cpu) hooks->prefetched = cpu->prefetched();
            return false;
        }
        part_secs += now_seconds() - t0 - probe_secs;
        double secs = secs0 + (now_seconds() - t0) - probe_secs;  // the Hessian probe is not training time
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
        if (hooks) {
            if (cpu) hooks->prefetched = cpu->prefetched();
            hooks->noise_scale = noise_trace.empty() ? noise.value() : tula::median(noise_trace);
            hooks->noise_observations = noise.count();
        }
        r.lr = lr_now;
        r.warmup_end = adaptive ? warm.end_step() : -1;
        r.grad_norm = steps > 0 ? gnorm_sum / static_cast<double>(steps) : 0;
        r.hessian_eig = hess ? hess->last() : 0;
        r.batch = B;
        finish_epoch(r, *tr, test_set, cfg.eval_batch, out, on_epoch, cfg.val_set);
        if (hooks && std::find(hooks->save_epochs.begin(), hooks->save_epochs.end(), e) != hooks->save_epochs.end()) {
            loss_sum = 0;  // the next epoch starts with empty sums
            correct = 0;
            save(saved_epoch_path(hooks->checkpoint_path, e), e + 1, 0, t, 0.0);
        }
        return true;
    }
};

}  // namespace

std::vector<EpochResult> train(Model& model, const Dataset& train_set, const Dataset& test_set, const TrainConfig& cfg,
                               Comm& comm, const std::function<void(const EpochResult&)>& on_epoch, TrainHooks* hooks,
                               StepEngine* engine) {
    const int K = comm.size(), B = cfg.global_batch;
    if (B <= 0 || B % K != 0)
        throw TrainError("global batch " + std::to_string(B) + " is not a positive multiple of the " +
                         std::to_string(K) + " ranks");
    if (train_set.count < B)
        throw TrainError("the training set has " + std::to_string(train_set.count) +
                         " examples, fewer than one global batch of " + std::to_string(B));
    Run run(model, train_set, test_set, cfg, comm, on_epoch, hooks, engine);
    run.tr->begin();
    if (hooks) {
        hooks->total_steps = static_cast<int64_t>(cfg.epochs) * run.steps;
        hooks->global_batch = B;
        hooks->epochs = cfg.epochs;
    }
    for (int e = run.e0; e <= cfg.epochs; ++e) {
        if (!run.epoch(e)) return run.out;
        if (reached_target(run.out.back().test_accuracy, cfg.target_accuracy)) break;  // the same verdict on every rank
    }
    run.tr->end();
    if (hooks) hooks->part_seconds = run.part_list(run.epochs_seconds());
    return run.out;
}

std::string saved_epoch_path(const std::string& checkpoint_path, int epoch) {
    return checkpoint_path + ".e" + std::to_string(epoch);
}

bool reached_target(double accuracy, double target) { return target > 0 && accuracy >= target; }

void finish_epoch(EpochResult& r, StepEngine& engine, const Dataset& test_set, int eval_batch,
                  std::vector<EpochResult>& out, const std::function<void(const EpochResult&)>& on_epoch,
                  const Dataset* val_set) {
    if (!std::isfinite(r.train_loss))
        throw TrainError("training diverged in epoch " + std::to_string(r.epoch) + " (loss " +
                         std::to_string(r.train_loss) + "); lower --lr or raise --warmup-epochs");
    const double t0 = now_seconds();
    const EvalResult ev = engine.evaluate(test_set, eval_batch);
    r.test_loss = ev.loss;
    r.test_accuracy = ev.accuracy;
    if (val_set && val_set->count > 0) {
        const EvalResult vr = engine.evaluate(*val_set, eval_batch);
        r.val_loss = vr.loss;
        r.val_accuracy = vr.accuracy;
    }
    r.eval_seconds = now_seconds() - t0;
    out.push_back(r);
    if (on_epoch) on_epoch(r);
}

double time_compute_step(Model& model, const Dataset& d, int batch, int warmup, int iters, double min_seconds,
                         int* timed, double* startup, Comm* together) {
    if (batch <= 0 || iters <= 0 || d.count <= 0) throw TrainError("time_compute_step: empty batch, data or iterations");
    if (together && together->size() <= 1) together = nullptr;
    Comm serial;
    Trainer tr(model, serial, 0.9, 5e-4);
    std::vector<int> idx(batch);
    int64_t pos = 0;
    auto next = [&]() {
        for (int i = 0; i < batch; ++i) idx[i] = static_cast<int>((pos + i) % d.count);
        pos = (pos + batch) % d.count;
    };
    // whether to take one more step: this rank's answer, or with `together` any rank's (an
    // untimed allreduce that also starts the step on every rank at once)
    auto more = [&](bool mine) {
        if (!together) return mine;
        double v = mine ? 1.0 : 0.0;
        together->allreduce_max(&v, 1);
        return v > 0;
    };
    const double lr = 1e-3;  // small: the weights must stay finite, the value is irrelevant to timing
    double warm_total = 0;  // the warm-up steps' own seconds (examples chosen outside, as below)
    int warm_steps = 0;
    for (; more(warm_steps < warmup || warm_total < min_seconds / 4); ++warm_steps) {
        next();
        const double t0 = now_seconds();
        tr.step(d, idx.data(), batch, lr, false, nullptr);
        warm_total += now_seconds() - t0;
    }
    double total = 0;
    int n = 0;
    const int64_t cap = int64_t{1000} * iters;
    std::vector<double> per_step;  // (n,) seconds of each timed step, with `together` only
    for (; more(n < iters || (total < min_seconds && n < cap)); ++n) {
        next();  // choosing the examples is not part of the step's time
        const double t0 = now_seconds();
        tr.step(d, idx.data(), batch, lr, false, nullptr);
        const double dt = now_seconds() - t0;
        total += dt;
        if (together) per_step.push_back(dt);
    }
    if (together) {  // each step at its slowest rank
        together->allreduce_max(per_step.data(), per_step.size());
        total = 0;
        for (double t : per_step) total += t;
    }
    if (timed) *timed = n;
    if (startup) *startup = std::max(0.0, warm_total - warm_steps * (total / n));
    return total / n;
}

double time_synced_step(Model& model, const Dataset& d, int batch, int warmup, int iters, double min_seconds, Comm& comm,
                        size_t bucket_bytes) {
    const int64_t B = static_cast<int64_t>(batch) * comm.size();  // global batch
    if (batch <= 0 || iters <= 0 || d.count <= 0) throw TrainError("time_synced_step: empty batch, data or iterations");
    if (B > d.count)
        throw TrainError("time_synced_step: global batch " + std::to_string(B) + " exceeds the " +
                         std::to_string(d.count) + " examples");
    Trainer tr(model, comm, 0.9, 5e-4);
    tr.set_bucket_bytes(bucket_bytes);
    std::vector<int> perm(static_cast<size_t>(d.count));  // (count,) a shuffled epoch order, as train() draws
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(12345);
    rng.shuffle(perm.data(), perm.size());
    const int64_t steps = epoch_steps(d.count, B);
    int64_t s = 0, t = 0, correct = 0;
    const double lr = 1e-3;  // small: the weights must stay finite, the value is irrelevant to timing
    // one step; its allreduce of 2 values is train()'s per-step agreement (the global loss and
    // whether any rank stops), here whether any rank wants another step: returns that
    auto one = [&](bool mine) {
        if (s == steps) s = 0;
        const int* idx = perm.data() + s * B + static_cast<int64_t>(comm.rank()) * batch;
        StepStats st;
        const double l = tr.step(d, idx, batch, lr, true, &correct, &st, t % 10 == 0);
        double agree[2] = {l * batch, mine ? 1.0 : 0.0};
        comm.allreduce_sum(agree, 2);
        ++s;
        ++t;
        return agree[1] > 0;
    };
    for (int i = 0; i < warmup; ++i) one(true);
    comm.barrier();
    const double t0 = now_seconds();
    int n = 0;
    const int64_t cap = int64_t{1000} * iters;
    for (bool more = true; more; ++n)
        more = one(n + 1 < iters || (now_seconds() - t0 < min_seconds && n + 1 < cap));
    double secs = (now_seconds() - t0) / n;
    comm.allreduce_max(&secs, 1);
    return secs;
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
