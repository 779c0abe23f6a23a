// libtula: leave-one-out validation of the models (see validate.hpp).
#include "tula/validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "tula/error.hpp"
#include "tula/models.hpp"
#include "tula/predict.hpp"

namespace tula {
namespace {

double mape(const std::vector<ValidationPoint>& p, bool cost) {
    if (p.empty()) return std::numeric_limits<double>::quiet_NaN();
    double s = 0;
    for (const auto& x : p) {
        const double m = cost ? x.measured_cost : x.measured_epoch_seconds;
        const double q = cost ? x.predicted_cost : x.predicted_epoch_seconds;
        s += std::fabs(q - m) / m;
    }
    return 100.0 * s / static_cast<double>(p.size());
}

// Samples restricted to the smallest and largest value of `key` (partial profiling).
template <class T, class K>
std::vector<T> extremes(const std::vector<T>& v, K key) {
    std::set<int> keys;
    for (const auto& x : v) keys.insert(key(x));
    if (keys.size() <= 2) return v;
    std::vector<T> out;
    for (const auto& x : v)
        if (key(x) == *keys.begin() || key(x) == *keys.rbegin()) out.push_back(x);
    return out;
}

// The usable runs of `runs` (usable_run) that `models` can predict (several nodes need an
// allreduce fit), in the input order.
std::vector<const RunRecord*> predictable(const TimeModels& models, const std::vector<RunRecord>& runs) {
    std::vector<const RunRecord*> out;
    for (const RunRecord& r : runs)
        if (usable_run(r) && r.global_batch <= models.workload.train_examples && (r.nodes == 1 || models.allreduce))
            out.push_back(&r);
    return out;
}

// `runs` without the one at `skip`.
std::vector<RunRecord> without(const std::vector<RunRecord>& runs, const RunRecord* skip) {
    std::vector<RunRecord> out;
    out.reserve(runs.size());
    for (const RunRecord& r : runs)
        if (&r != skip) out.push_back(r);
    return out;
}

}  // namespace

ValidationResult validate_workload(const Config& cfg, const Workload& w, const std::vector<ComputeSample>& compute_in,
                                   const std::vector<AllreduceSample>& allreduce_in, const std::vector<RunRecord>& runs,
                                   bool partial, double price, const Corrections& corrections) {
    if (w.train_examples < 1) throw Error("cannot validate " + w.name + ": its profile has no training examples");
    ValidationResult r;
    r.workload = w.name;
    r.partial = partial;
    std::vector<ComputeSample> compute = compute_in;
    // the within-node rows (one node) as they are; the across-node rows, partial: 2 node counts
    std::vector<AllreduceSample> allreduce, across;
    for (const auto& a : allreduce_in) (a.nodes >= 2 ? across : allreduce).push_back(a);
    if (partial) {
        compute = extremes(compute, [](const ComputeSample& s) { return s.local_batch; });
        across = extremes(across, [](const AllreduceSample& s) { return s.nodes; });
    }
    allreduce.insert(allreduce.end(), across.begin(), across.end());
    const double D = static_cast<double>(w.train_examples);

    // Compute points: leave one local batch out (full profiling only: partial keeps 2 batches);
    // the points of one rank alone (samples of several ranks at once only scale them).
    std::map<int, std::vector<double>> by_batch;
    for (const auto& s : compute)
        if (s.ranks <= 1) by_batch[s.local_batch].push_back(s.seconds_per_iter);
    if (by_batch.size() >= 3) {
        for (const auto& [b, times] : by_batch) {
            std::vector<ComputeSample> rest;
            for (const auto& s : compute)
                if (s.local_batch != b) rest.push_back(s);
            const ComputeModel m = ComputeModel::fit(rest);
            double mean = 0;
            for (double t : times) mean += t / static_cast<double>(times.size());
            const double iters = steps_per_epoch(D, b, w.last_batch);
            if (!(iters >= 1)) continue;
            ValidationPoint p;
            p.kind = "compute";
            p.global_batch = b;
            p.measured_epoch_seconds = iters * mean;
            p.predicted_epoch_seconds = iters * m.seconds_per_iter(b);
            p.measured_cost = p.measured_epoch_seconds / 3600.0 * price;
            p.predicted_cost = p.predicted_epoch_seconds / 3600.0 * price;
            r.points.push_back(p);
        }
    } else {
        r.notes.push_back("compute: " + std::to_string(by_batch.size()) +
                          " profiled local batch sizes; leaving one out needs at least 3");
    }

    // Finished runs: the planner's prediction from the profiles and every other run.
    std::vector<std::string> fit_notes;
    const TimeModels profile_models = fit_profile_models(cfg, w, compute, allreduce, corrections, &fit_notes);
    for (const std::string& n : fit_notes) r.notes.push_back(n);
    const std::vector<const RunRecord*> good = predictable(profile_models, runs);
    for (const RunRecord* run : good) {
        const TimeModels m = fit_run_models(profile_models, without(runs, run), nullptr);
        const RunPrediction q = Predictor(m, m.run_target(run->hardware_class)).run(*run);
        ValidationPoint p;
        p.kind = "run";
        p.nodes = run->nodes;
        p.ranks_per_node = std::max(1, run->ranks_per_node);
        p.global_batch = run->global_batch;
        p.measured_epoch_seconds = run->measured_seconds / run->epochs;
        p.predicted_epoch_seconds = q.seconds / run->epochs;
        p.measured_cost = run->nodes * p.measured_epoch_seconds / 3600.0 * price;
        p.predicted_cost = run->nodes * p.predicted_epoch_seconds / 3600.0 * price;
        r.points.push_back(p);
    }
    if (good.empty()) r.notes.push_back("runs: no finished runs of " + w.name + " in the run history that can be predicted");
    r.mape_epoch_time = mape(r.points, false);
    r.mape_cost = price > 0 ? mape(r.points, true) : r.mape_epoch_time;
    return r;
}

std::vector<RunCheck> check_runs(const TimeModels& models, const std::vector<RunRecord>& runs, size_t max_checked,
                                 double level, const std::string& job_id) {
    std::vector<RunCheck> out;
    if (models.workload.train_examples < 1 || max_checked == 0) return out;
    std::vector<const RunRecord*> good = predictable(models, runs);
    // Newest first; ties keep the input order.
    std::stable_sort(good.begin(), good.end(), [](const RunRecord* a, const RunRecord* b) { return a->created > b->created; });
    for (const RunRecord* run : good) {
        if (out.size() >= max_checked) break;
        if (!job_id.empty() && run->job_id != job_id) continue;
        const TimeModels m = fit_run_models(models, without(runs, run), nullptr);
        const Predictor pred(m, m.run_target(run->hardware_class), level);
        const JobPrediction job = pred.job(*run);
        const RunPrediction& q = job.run;
        RunCheck c;
        c.job_id = run->job_id;
        c.nodes = run->nodes;
        c.ranks_per_node = std::max(1, run->ranks_per_node);
        c.global_batch = run->global_batch;
        c.epochs = run->epochs;
        c.created = run->created;
        c.measured_seconds = run->measured_seconds;
        c.predicted_seconds = q.seconds;
        c.has_interval = q.step.has_interval;
        c.lower_seconds = q.lower;
        c.upper_seconds = q.upper;
        c.flagged = c.has_interval && (run->measured_seconds < c.lower_seconds || run->measured_seconds > c.upper_seconds);
        c.compute_step_seconds = q.step.seconds - q.step.exposed_comm_seconds;
        c.exposed_comm_step_seconds = q.step.exposed_comm_seconds;
        c.overhead_step_seconds = job.overhead_step_seconds();
        out.push_back(c);
    }
    return out;
}

}  // namespace tula
