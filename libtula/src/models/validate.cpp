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

// Runs the models can predict: at least one node, one example per rank, one epoch, a time.
bool usable_run(const RunRecord& run) {
    return run.nodes >= 1 && run.global_batch >= run.ranks() && run.epochs >= 1 && run.measured_seconds > 0 &&
           std::isfinite(run.measured_seconds);
}

// The modelled parts of one run's iteration and its measured seconds per iteration.
// `intra_bw`: the fitted within-node bandwidth (IntraNodeModel), bytes/s; 0 = not modelled.
IterationSample iteration_of(const RunRecord& run, const ComputeModel& cm, const AllreduceModel* am, double D,
                             double grad_bytes, double intra_bw) {
    IterationSample q;
    q.compute_seconds = cm.seconds_per_iter(run.local_batch()) * cm.concurrency_at(run.nodes, run.ranks_per_node, run.local_batch());
    q.comm_seconds = hierarchical_allreduce_seconds(am, run.nodes, run.ranks_per_node, grad_bytes, intra_bw);
    q.nodes = run.nodes;
    q.ranks_per_node = std::max(1, run.ranks_per_node);
    q.local_batch = run.local_batch();
    q.measured_seconds = steady_seconds(run, cm) / (std::floor(run.examples_per_epoch(D) / run.global_batch) * run.epochs);
    return q;
}

// The within-node bandwidth fitted to the samples with several ranks on one node
// (IntraNodeModel), bytes/s; 0 when they have none or the fit fails (then `notes`, when given,
// says why). All hardware classes pooled, as the other models here.
double fitted_intra_bandwidth(const std::vector<AllreduceSample>& samples, std::vector<std::string>* notes) {
    if (!IntraNodeModel::has_samples(samples)) return 0.0;
    try {
        return IntraNodeModel::fit(samples).bandwidth;
    } catch (const Error& e) {
        if (notes) notes->push_back(std::string("within-node allreduce: ") + e.what());
        return 0.0;
    }
}

// Gamma fitted on the multi-node runs of `good` except the one at `skip`; gamma = 1 when the
// fit fails or there are none.
OverlapModel overlap_without(const std::vector<const RunRecord*>& good, size_t skip, const ComputeModel& cm,
                             const AllreduceModel* am, double D, double grad_bytes, double intra_bw) {
    std::vector<IterationSample> others;
    for (size_t j = 0; j < good.size(); ++j) {
        if (j == skip || good[j]->nodes < 2 || !am) continue;
        const IterationSample q = iteration_of(*good[j], cm, am, D, grad_bytes, intra_bw);
        if (std::isfinite(q.measured_seconds)) others.push_back(q);
    }
    try {
        return OverlapModel::fit(others);
    } catch (const Error&) {
        return OverlapModel{};
    }
}

}  // namespace

ValidationResult validate_workload(const Workload& w, const std::vector<ComputeSample>& compute_in,
                                   const std::vector<AllreduceSample>& allreduce_in, const std::vector<RunRecord>& runs,
                                   bool partial, double price) {
    if (w.train_examples < 1) throw Error("cannot validate " + w.name + ": its profile has no training examples");
    ValidationResult r;
    r.workload = w.name;
    r.partial = partial;
    std::vector<ComputeSample> compute = compute_in;
    std::vector<AllreduceSample> allreduce;
    for (const auto& a : allreduce_in)
        if (a.nodes >= 2) allreduce.push_back(a);
    if (partial) {
        compute = extremes(compute, [](const ComputeSample& s) { return s.local_batch; });
        allreduce = extremes(allreduce, [](const AllreduceSample& s) { return s.nodes; });
    }
    const double D = static_cast<double>(w.train_examples);
    const double grad_bytes = 4.0 * static_cast<double>(w.params);

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
            const double iters = std::floor(D / b);
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

    // Finished runs: predicted from the profiles, gamma fitted on the other runs.
    std::vector<const RunRecord*> good;
    for (const auto& run : runs)
        if (usable_run(run)) good.push_back(&run);
    if (!good.empty()) {
        const ComputeModel cm = ComputeModel::fit(compute);
        std::optional<AllreduceModel> am;
        try {
            if (!allreduce.empty()) am = AllreduceModel::fit(allreduce);
        } catch (const Error& e) {
            r.notes.push_back(std::string("allreduce: ") + e.what());
        }
        const AllreduceModel* amp = am ? &*am : nullptr;
        const double intra_bw = fitted_intra_bandwidth(allreduce_in, &r.notes);
        for (size_t i = 0; i < good.size(); ++i) {
            const RunRecord& run = *good[i];
            if (run.nodes > 1 && !am) continue;
            const OverlapModel ov = overlap_without(good, i, cm, amp, D, grad_bytes, intra_bw);
            const IterationSample q = iteration_of(run, cm, amp, D, grad_bytes, intra_bw);
            // the online time calibration of the other runs (as plan_workload would have had it)
            std::vector<const RunRecord*> others;
            for (size_t j = 0; j < good.size(); ++j)
                if (j != i) others.push_back(good[j]);
            std::stable_sort(others.begin(), others.end(),
                             [](const RunRecord* a, const RunRecord* b) { return a->created < b->created; });
            const auto synced = step_synced_ratios(cm, amp, ov, grad_bytes, intra_bw);
            const TimeCalibration cal =
                TimeCalibration::fit(iteration_samples(others, w, cm, amp, intra_bw), ov, synced);
            ValidationPoint p;
            p.kind = "run";
            p.nodes = run.nodes;
            p.ranks_per_node = std::max(1, run.ranks_per_node);
            p.global_batch = run.global_batch;
            p.measured_epoch_seconds = run.measured_seconds / run.epochs;
            const double b_local = run.local_batch();
            p.predicted_epoch_seconds = std::floor(run.examples_per_epoch(D) / run.global_batch) *
                                            step_time_factor(cal, synced, run.nodes, run.ranks_per_node, b_local) *
                                                ov.combine(q.compute_seconds, q.comm_seconds) +
                                        cm.startup_seconds(b_local) / run.epochs;  // paid once per run
            p.measured_cost = run.nodes * p.measured_epoch_seconds / 3600.0 * price;
            p.predicted_cost = run.nodes * p.predicted_epoch_seconds / 3600.0 * price;
            r.points.push_back(p);
        }
    } else {
        r.notes.push_back("runs: no finished runs of " + w.name + " in the run history");
    }
    r.mape_epoch_time = mape(r.points, false);
    r.mape_cost = price > 0 ? mape(r.points, true) : r.mape_epoch_time;
    return r;
}

std::vector<RunCheck> check_runs(const Workload& w, const std::vector<ComputeSample>& compute,
                                 const std::vector<AllreduceSample>& allreduce_in, const std::vector<RunRecord>& runs,
                                 size_t max_checked, double level, const std::string& job_id) {
    std::vector<RunCheck> out;
    if (w.train_examples < 1 || max_checked == 0) return out;
    std::vector<const RunRecord*> good;
    for (const auto& run : runs)
        if (usable_run(run) && run.global_batch <= w.train_examples) good.push_back(&run);
    if (good.empty()) return out;
    const ComputeModel cm = ComputeModel::fit(compute);
    std::vector<AllreduceSample> allreduce;
    for (const auto& a : allreduce_in)
        if (a.nodes >= 2) allreduce.push_back(a);
    std::optional<AllreduceModel> am;
    try {
        if (!allreduce.empty()) am = AllreduceModel::fit(allreduce);
    } catch (const Error&) {
        am.reset();  // multi-node runs are then not checked
    }
    const AllreduceModel* amp = am ? &*am : nullptr;
    const double intra_bw = fitted_intra_bandwidth(allreduce_in, nullptr);
    const double D = static_cast<double>(w.train_examples);
    const double grad_bytes = 4.0 * static_cast<double>(w.params);
    // Newest first; ties keep the input order.
    std::vector<size_t> order(good.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return good[a]->created > good[b]->created; });
    for (size_t i : order) {
        if (out.size() >= max_checked) break;
        const RunRecord& run = *good[i];
        if ((run.nodes > 1 && !am) || (!job_id.empty() && run.job_id != job_id)) continue;
        const OverlapModel ov = overlap_without(good, i, cm, amp, D, grad_bytes, intra_bw);
        const IterationSample q = iteration_of(run, cm, amp, D, grad_bytes, intra_bw);
        const double b = run.local_batch();
        const double h = cm.interval(b, level) * cm.concurrency_at(run.nodes, run.ranks_per_node, b);  // as the compute part
        const double n_it = std::floor(run.examples_per_epoch(D) / run.global_batch) * run.epochs;
        RunCheck c;
        c.job_id = run.job_id;
        c.nodes = run.nodes;
        c.ranks_per_node = std::max(1, run.ranks_per_node);
        c.global_batch = run.global_batch;
        c.epochs = run.epochs;
        c.created = run.created;
        c.measured_seconds = run.measured_seconds;
        const double startup = cm.startup_seconds(b);  // once per run
        c.predicted_seconds = n_it * ov.combine(q.compute_seconds, q.comm_seconds) + startup;
        c.has_interval = h > 0 && std::isfinite(h);
        c.lower_seconds =
            n_it * ov.combine(std::max(0.0, q.compute_seconds - (c.has_interval ? h : 0.0)), q.comm_seconds) + startup;
        c.upper_seconds = n_it * ov.combine(q.compute_seconds + (c.has_interval ? h : 0.0), q.comm_seconds) + startup;
        c.flagged = c.has_interval && (run.measured_seconds < c.lower_seconds || run.measured_seconds > c.upper_seconds);
        out.push_back(c);
    }
    return out;
}

}  // namespace tula
