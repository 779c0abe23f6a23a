// libtula: the one prediction of a step and a run, and the fit of the time models it reads
// (see predict.hpp; derivations in docs/models.md).
//
// For K nodes of R ranks at local batch b, global batch B = K R b, D examples per epoch, E epochs:
//   compute   t_c = f x compute(b) x concurrency(K, R, b)     f: the partition's compute factor
//   allreduce t_m = hierarchical(K, R, 4 x params bytes)      within the node, then across nodes
//   step      m   = factor(K, R, b) x overlap_gamma(t_c, t_m) factor: synchronized-step profile
//                                                             x time calibration of the runs
//             tau = m + factor t_c theta_R + psi(K,R) u phi_R the runs' StepFit (step_fit.hpp)
//   run       T   = E x floor(D / B) x tau + f x startup(b)
// The interval of tau widens t_c by the compute model's Student-t half-width h(b), or with a
// StepFit is tau exp(-/+ z sd / tau) (StepFit::sd); its upper end is multiplied by the partition's
// upper_factor (kScaledIntervalFactor when scaled); without a StepFit, where the across-node
// allreduce is taken from published figures (PartitionTarget::allreduce_from), the step's
// gradient exchange (within and across nodes) enters the upper end kScaledIntervalFactor times.
#include "tula/predict.hpp"

#include <gsl/gsl_cdf.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "tula/class_exchange.hpp"
#include "tula/error.hpp"
#include "tula/fit_cache.hpp"
#include "util.hpp"

namespace tula {

namespace {

// The flag of correction `name` in `c`. Errors: tula::Error for an unknown name.
bool* correction_flag(Corrections* c, const std::string& name) {
    if (name == "concurrency") return &c->concurrency;
    if (name == "synced-step") return &c->synced_step;
    if (name == "run-fit") return &c->run_fit;
    if (name == "calibration") return &c->calibration;
    if (name == "class-scaling") return &c->class_scaling;
    if (name == "class-runs") return &c->class_runs;
    throw Error("unknown correction '" + name +
                "'; the corrections are concurrency, synced-step, run-fit, calibration, class-scaling, class-runs");
}

// The names of the comma list `list` ("none" and empty items left out).
std::vector<std::string> correction_names(const std::string& list) {
    std::vector<std::string> out;
    std::stringstream ss(list);
    std::string name;
    while (std::getline(ss, name, ','))
        if (!name.empty() && name != "none") out.push_back(name);
    return out;
}

}  // namespace

Corrections Corrections::select(const std::string& with, const std::string& without) {
    Corrections c;
    const std::vector<std::string> on = correction_names(with), off = correction_names(without);
    for (const auto& n : on) *correction_flag(&c, n) = true;
    for (const auto& n : off) {
        if (std::find(on.begin(), on.end(), n) != on.end())
            throw Error("correction '" + n + "' is both switched on and off; name it once");
        *correction_flag(&c, n) = false;
    }
    return c;
}

namespace {

// `m` without the corrections switched off in `c` (the profile-side ones: concurrency and
// the synchronized-step profile).
ComputeModel stripped(ComputeModel m, const Corrections& c) {
    if (!c.concurrency) {
        m.concurrent.clear();
        m.concurrent_on_node.clear();
    }
    if (!c.synced_step) {
        m.synced.clear();
        m.synced_on_node.clear();
    }
    return m;
}

}  // namespace

TimeModels fit_profile_models(const Config& cfg, const Workload& w, const std::vector<ComputeSample>& compute,
                              const std::vector<AllreduceSample>& allreduce, const Corrections& corrections,
                              std::vector<std::string>* warnings) {
    std::vector<std::string> local;
    std::vector<std::string>* warn = warnings ? warnings : &local;
    TimeModels m;
    m.workload = w;
    m.corrections = corrections;
    m.compute = stripped(ComputeModel::fit(compute), corrections);
    if (AllreduceModel::has_inter_node(allreduce)) {  // rows of one node are the within-node profile
        try {
            m.allreduce = AllreduceModel::fit(allreduce);
            if (!m.allreduce->note.empty()) warn->push_back("allreduce model " + m.allreduce->note);
        } catch (const Error& e) {
            m.allreduce_error = e.what();
            warn->push_back(m.allreduce_error + "; planning for 1 node only");
        }
    }
    if (corrections.class_scaling) {
        std::vector<std::string> class_warnings;
        m.classes = fit_classes(cfg, compute, allreduce, &class_warnings);
        for (const std::string& s : class_warnings)
            if (std::find(warn->begin(), warn->end(), s) == warn->end()) warn->push_back(s);
        for (auto& kv : m.classes) kv.second.compute = stripped(kv.second.compute, corrections);
        m.targets = site_targets(cfg, m.classes);
    } else {
        // every partition and run takes the pooled models, at their own figures
        std::optional<IntraNodeModel> intra;
        if (IntraNodeModel::has_samples(allreduce)) {
            try {
                intra = IntraNodeModel::fit(allreduce);
            } catch (const Error&) {
                intra.reset();  // tula.conf's intra_node_bandwidth then
            }
        }
        m.targets = site_targets(cfg, m.compute, m.allreduce ? &*m.allreduce : nullptr);
        for (PartitionTarget& t : m.targets) {
            t.compute_factor = t.upper_factor = 1.0;
            t.scaled_from.clear();
            t.own_profile = true;
            t.allreduce = m.allreduce;
            t.left_out = t.conf.unavailable;
            t.intra = intra;
        }
        ClassFit pooled;
        pooled.compute = m.compute;
        pooled.allreduce = m.allreduce;
        pooled.intra = intra;
        m.classes.emplace("", std::move(pooled));
    }
    return m;
}

PartitionTarget TimeModels::run_target(const std::string& cls) const {
    PartitionTarget t;
    t.conf.hardware_class = corrections.class_scaling ? cls : std::string();  // the runs' StepFit of the class
    const auto it = cls.empty() || !corrections.class_scaling ? classes.end() : classes.find(cls);
    const bool own = it != classes.end();
    t.compute = own ? it->second.compute : compute;
    if (own) {
        t.allreduce = it->second.allreduce;
        t.allreduce_from = it->second.allreduce_from;
    } else {
        t.allreduce = allreduce;
    }
    for (const PartitionTarget& p : targets)
        if (p.conf.hardware_class == cls && p.conf.intra_node_bandwidth > 0)
            t.conf.intra_node_bandwidth = p.conf.intra_node_bandwidth;
    const auto fit = classes.find(corrections.class_scaling ? cls : std::string());
    if (fit != classes.end() && fit->second.intra) t.intra = fit->second.intra;
    return t;
}

namespace {

// Appends to `obs` (the runs of m.workload on class `cls`, "" with class scaling off) the
// exchange that the runs of the class's other workloads measured (m.class_exchange), as
// borrowed observations at the median local batch of the workload's runs at each R (of all its
// runs where none has that R), modelled without the runs' fit.
void borrow_class_exchange(const TimeModels& m, const std::string& cls, std::vector<StepObservation>* obs) {
    if (m.class_exchange.empty() || obs->empty()) return;
    const Predictor base(m.run_target(cls), m.workload, m.overlap, m.calibration);
    // the upper median of the local batches the workload ran at R ranks per node (at any R when
    // none): a batch it ran, not the mean of two as median() gives for an even count
    auto median_batch = [&](int R) {
        std::vector<double> b;
        for (const StepObservation& o : *obs)
            if (o.ranks_per_node == R) b.push_back(o.local_batch);
        if (b.empty())
            for (const StepObservation& o : *obs) b.push_back(o.local_batch);
        std::nth_element(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b.size() / 2), b.end());
        return b[b.size() / 2];
    };
    auto model_step = [&](int K, int R, double b) { return base.step(K, R, b).seconds; };
    const AllreduceModel* ar = base.target().allreduce ? &*base.target().allreduce : nullptr;
    auto across = [&](int K, double bytes) { return hierarchical_allreduce_seconds(ar, K, 1, bytes, 0.0); };
    const std::vector<StepObservation> borrowed = borrowed_exchange_observations(
        m.class_exchange, m.workload, m.corrections.class_scaling ? &cls : nullptr, median_batch, model_step, across);
    obs->insert(obs->end(), borrowed.begin(), borrowed.end());
}

}  // namespace

TimeModels fit_run_models(TimeModels m, const std::vector<RunRecord>& runs, std::vector<std::string>* warnings) {
    const Workload& w = m.workload;
    // each run's modelled step with its class's models, so that runs on other hardware
    // calibrate what the profiles of their own class missed
    auto samples_of = [&](const std::vector<const RunRecord*>& rs) {
        std::vector<IterationSample> out;
        std::map<std::string, PartitionTarget> targets;  // by the runs' class
        for (const RunRecord* r : rs) {
            auto it = targets.find(r->hardware_class);
            if (it == targets.end()) it = targets.emplace(r->hardware_class, m.run_target(r->hardware_class)).first;
            const PartitionTarget& t = it->second;
            for (const IterationSample& q : iteration_samples({r}, w, t.compute, t.allreduce ? &*t.allreduce : nullptr,
                                                              t.intra_node_bandwidth()))
                out.push_back(q);
        }
        return out;
    };
    std::vector<const RunRecord*> usable, multi;  // usable: oldest first, for the time calibration
    for (const RunRecord& r : runs) {
        if (!r.workload.empty() && r.workload != w.name) continue;
        if (usable_run(r) && (r.nodes == 1 || m.allreduce)) usable.push_back(&r);
        if (r.nodes >= 2) multi.push_back(&r);  // the overlap is fitted on multi-node runs
    }
    std::stable_sort(usable.begin(), usable.end(),
                     [](const RunRecord* a, const RunRecord* b) { return a->created < b->created; });
    m.overlap = OverlapModel{};
    m.calibration = TimeCalibration{};
    if (m.allreduce) {
        try {
            const std::vector<IterationSample> samples = samples_of(multi);
            m.overlap = m.fit_cache ? m.fit_cache->overlap(samples) : OverlapModel::fit(samples);
        } catch (const Error& e) {
            if (warnings) warnings->push_back(std::string(e.what()) + "; planning with gamma = 1 (no overlap)");
        }
    }
    if (m.corrections.calibration) {
        const double intra = m.targets.empty() ? 0.0 : m.targets.front().intra_node_bandwidth();
        const SyncedRatios pooled = step_synced_ratios(m.compute, m.allreduce ? &*m.allreduce : nullptr, m.overlap,
                                                       4.0 * static_cast<double>(w.params), intra);
        m.calibration = TimeCalibration::fit(samples_of(usable), m.overlap, pooled);
    }
    m.step_fits.clear();
    if (m.corrections.run_fit) {
        // each run's measured step against the step modelled without the runs' fit
        std::map<std::string, std::vector<StepObservation>> by_class;
        std::map<std::string, Predictor> bases;  // by the runs' class
        for (const RunRecord* r : usable) {
            auto b = bases.find(r->hardware_class);
            if (b == bases.end())
                b = bases.emplace(r->hardware_class, Predictor(m.run_target(r->hardware_class), w, m.overlap, m.calibration))
                        .first;
            const Predictor& base = b->second;
            const PartitionTarget& t = base.target();
            const int K = std::max(1, r->nodes), R = std::max(1, r->ranks_per_node);
            const double steps =
                base.steps_per_epoch(r->examples_per_epoch(static_cast<double>(w.train_examples)), r->global_batch) *
                r->epochs;
            if (!(steps > 0)) continue;
            const StepPrediction s = base.step(K, R, r->local_batch());
            StepObservation o;
            o.nodes = K;
            o.ranks_per_node = R;
            o.local_batch = r->local_batch();
            o.measured_seconds = steady_seconds(*r, t.compute) / steps;
            o.model_seconds = s.seconds;
            o.compute_seconds = s.time_factor * s.compute_seconds;
            by_class[m.corrections.class_scaling ? r->hardware_class : std::string()].push_back(o);
        }
        if (m.corrections.class_runs && m.allreduce)
            for (auto& [cls, obs] : by_class) borrow_class_exchange(m, cls, &obs);
        for (const auto& [cls, obs] : by_class)
            m.step_fits[cls] = m.fit_cache ? m.fit_cache->step_fit(obs) : StepFit::fit(obs);
    }
    return m;
}

TimeModels fit_time_models(const Config& cfg, const Workload& w, const std::vector<ComputeSample>& compute,
                           const std::vector<AllreduceSample>& allreduce, const std::vector<RunRecord>& runs,
                           const Corrections& corrections, std::vector<std::string>* warnings,
                           FitCache* fit_cache) {
    TimeModels m = fit_profile_models(cfg, w, compute, allreduce, corrections, warnings);
    m.fit_cache = fit_cache;
    return fit_run_models(std::move(m), runs, warnings);
}

Predictor::Predictor(const PartitionTarget& target, const Workload& w, const OverlapModel& overlap,
                     const TimeCalibration& calibration, double level)
    : target_(target), overlap_(overlap), calibration_(calibration), level_(level) {
    z_ = level > 0 && level < 1 ? gsl_cdf_ugaussian_Pinv(0.5 + 0.5 * level) : 0.0;
    grad_bytes_ = 4.0 * static_cast<double>(w.params);
    examples_ = static_cast<double>(w.train_examples);
    last_batch_ = w.last_batch;
    test_examples_ = static_cast<double>(std::max<int64_t>(0, w.test_examples));
    eval_batch_ = std::max(1, w.eval_batch);
    synced_ = step_synced_ratios(target_.compute, target_.allreduce ? &*target_.allreduce : nullptr, overlap_,
                                 grad_bytes_, target_.intra_node_bandwidth());
    const ComputeModel& c = target_.compute;
    sigma_q_ = c.dof > 0 && c.sigma > 0 ? c.interval(0.0, level) / std::sqrt(1.0 + std::max(0.0, c.xtx_inv[0])) : 0.0;
    rel_q_ = c.relative_interval(level);
    fixed_seconds_ = c.t0;
}

GradientAllreduce Predictor::gradient_allreduce(int nodes, int ranks_per_node) const {
    return bucketed_allreduce(target_.allreduce ? &*target_.allreduce : nullptr, nodes, std::max(1, ranks_per_node),
                              grad_bytes_, target_.intra_node_bandwidth(), overlap_.bucket_bytes);
}

StepPrediction Predictor::step(int K, int R, double b, const GradientAllreduce& comm) const {
    const ComputeModel& c = target_.compute;
    const double f = target_.compute_factor;
    R = std::max(1, R);
    StepPrediction p;
    const double conc = c.concurrency_at(K, R, b);  // 1 unless ranks were profiled at once
    p.compute_seconds = f * c.seconds_per_iter(b) * conc;
    p.comm_seconds = comm.seconds;
    // the compute beyond the fixed part t0 (in the flat region of a floor, the floor's): the
    // forward and backward passes, of which the backward pass hides the allreduce's buckets
    const double batch_part =
        overlap_.bucket_bytes > 0 ? f * conc * std::max(0.0, c.seconds_per_iter(b) - fixed_seconds_) : 0.0;
    p.time_factor = step_time_factor(calibration_, synced_, K, R, b, &p.synced_profile);
    p.seconds = p.time_factor * overlap_.combine(p.compute_seconds, batch_part, comm);
    p.exposed_comm_seconds = std::max(0.0, p.seconds - p.time_factor * p.compute_seconds);
    p.startup_seconds = f * c.startup_seconds(b);
    if (fit_.runs == 0) {
        // the compute profile's interval, through the overlap
        const double lever = c.xtx_inv[0] + 2.0 * b * c.xtx_inv[1] + b * b * c.xtx_inv[2];
        const double half =
            c.interpolated ? rel_q_ * p.compute_seconds : f * conc * sigma_q_ * std::sqrt(1.0 + std::max(0.0, lever));
        p.has_interval = half > 0 && std::isfinite(half);
        const double h = p.has_interval ? half : 0.0;
        // an across-node allreduce from published figures, not measured: the exchange's upper end
        // kScaledIntervalFactor times
        GradientAllreduce upper_comm = comm;
        if (!target_.allreduce_from.empty()) {
            upper_comm.seconds *= kScaledIntervalFactor;
            upper_comm.bucket_seconds *= kScaledIntervalFactor;
            upper_comm.last_seconds *= kScaledIntervalFactor;
        }
        p.upper = target_.upper_factor * p.time_factor * overlap_.combine(p.compute_seconds + h, batch_part, upper_comm);
        p.lower = p.time_factor * overlap_.combine(std::max(0.0, p.compute_seconds - h), batch_part, comm);
    } else {
        // the runs' step model on the modelled step, and its interval instead of the profile's
        const double modelled = p.seconds, tc = p.time_factor * p.compute_seconds;
        const StepFit::Prediction q = fit_.predict(K, R, b, modelled, tc);
        p.seconds = q.seconds;
        p.run_fit_seconds = p.seconds - modelled;
        p.run_fit_runs = fit_.runs;
        // the compute the runs add is compute; the rest of the step beyond it is exposed exchange
        p.exposed_comm_seconds = std::max(0.0, p.seconds - tc - std::max(0.0, q.compute_correction));
        // log-normal: tau exp(-/+ z sd / tau), the fit's errors being relative
        const double hw = p.seconds > 0 ? z_ * q.sd / p.seconds : 0.0;
        p.has_interval = hw > 0 && std::isfinite(hw);
        p.lower = p.seconds * std::exp(p.has_interval ? -hw : 0.0);
        p.upper = target_.upper_factor * p.seconds * std::exp(p.has_interval ? hw : 0.0);
    }
    return p;
}

double Predictor::evaluation_seconds(int K, int R) const {
    return evaluation_pass_seconds(test_examples_, K, R) + evaluation_pass_seconds(validation_examples_, K, R);
}

double Predictor::evaluation_pass_seconds(double examples, int K, int R) const {
    if (!(examples > 0)) return 0.0;
    K = std::max(1, K);
    R = std::max(1, R);
    const double d = std::max(1, target_.devices_per_rank);
    // a rank's examples: its devices' largest shards, and its passes of eval_batch per device
    const double n = d * std::ceil(examples / (static_cast<double>(K) * R * d));
    const ComputeModel& c = target_.compute;
    double b = std::min<double>(d * eval_batch_, n);
    if (c.max_batch > 0) b = std::min<double>(b, c.max_batch);
    const double forward = (1.0 - overlap_.backward_fraction) * target_.compute_factor * c.seconds_per_iter(b) *
                           c.concurrency_at(K, R, b);
    return std::ceil(n / b) * forward;
}

RunPrediction Predictor::assemble(const StepPrediction& step, double steps_per_epoch, int epochs) const {
    RunPrediction r;
    r.step = step;
    r.steps_per_epoch = steps_per_epoch;
    const double n = epochs * steps_per_epoch;
    r.seconds = n * step.seconds + step.startup_seconds;
    r.lower = n * step.lower + step.startup_seconds;
    r.upper = n * step.upper + target_.upper_factor * step.startup_seconds;
    return r;
}

RunPrediction Predictor::run(int K, int R, int B, int E, double D) const {
    R = std::max(1, R);
    if (K < 1 || B < K * R || B % (K * R) != 0 || !(D >= B) || E < 1)
        throw Error("cannot predict " + std::to_string(E) + " epochs of global batch " + std::to_string(B) + " on " +
                    detail::nodes_str(K) + " of " + std::to_string(R) + " rank" + (R == 1 ? "" : "s") +
                    " each with " + detail::fmt("%.0f", D) +
                    " examples per epoch: the global batch must be a multiple of the ranks, and at most the examples");
    return assemble(step(K, R, B / (K * R)), steps_per_epoch(D, B), E);
}

RunPrediction Predictor::run(const RunRecord& rec) const {
    // a recorded run's global batch need not divide by its ranks: its mean local batch
    StepPrediction s = step(std::max(1, rec.nodes), std::max(1, rec.ranks_per_node), rec.local_batch());
    if (target_.compute.trained_warm(rec)) s.startup_seconds = 0;
    return assemble(s, steps_per_epoch(rec.examples_per_epoch(examples_), rec.global_batch), rec.epochs);
}

JobPrediction Predictor::job(const StepPrediction& step, int K, double steps_per_epoch, int E,
                             double evaluation_per_epoch) const {
    return job_of(assemble(step, steps_per_epoch, E), K, E, evaluation_per_epoch);
}

JobPrediction Predictor::job(int K, int R, int B, int E, double D) const {
    return job_of(run(K, R, B, E, D), K, E, evaluation_seconds(K, std::max(1, R)));
}

JobPrediction Predictor::job(const RunRecord& rec) const {
    const int K = std::max(1, rec.nodes), R = std::max(1, rec.ranks_per_node);
    return job_of(run(rec), K, rec.epochs, evaluation_seconds(K, R));
}

JobPrediction Predictor::job_of(const RunPrediction& r, int K, int E, double evaluation_per_epoch) const {
    JobPrediction j;
    j.run = r;
    j.nodes = std::max(1, K);
    j.epochs = E;
    j.evaluation_seconds = E * evaluation_per_epoch;
    j.seconds = j.run.seconds + j.evaluation_seconds;
    j.upper = j.run.upper + j.evaluation_seconds;
    const PartitionConf& conf = target_.conf;
    j.node_hours = j.nodes * j.seconds / 3600.0;
    j.gpu_hours = j.node_hours * conf.gpus_per_node;
    j.energy_kwh = j.node_hours * conf.watts_per_node / 1000.0;
    j.cost = j.node_hours * conf.node_hour_price();
    j.cost_upper = j.nodes * j.upper / 3600.0 * conf.node_hour_price();
    return j;
}

}  // namespace tula
