// libtula: leave-one-out validation of the models (see validate.hpp).
#include "tula/validate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
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

    // Compute points: leave one local batch out (full profiling only: partial keeps 2 batches).
    std::map<int, std::vector<double>> by_batch;
    for (const auto& s : compute) by_batch[s.local_batch].push_back(s.seconds_per_iter);
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
        if (run.nodes >= 1 && run.global_batch >= run.nodes && run.epochs >= 1 && run.measured_seconds > 0 &&
            std::isfinite(run.measured_seconds))
            good.push_back(&run);
    if (!good.empty()) {
        const ComputeModel cm = ComputeModel::fit(compute);
        std::optional<AllreduceModel> am;
        try {
            if (!allreduce.empty()) am = AllreduceModel::fit(allreduce);
        } catch (const Error& e) {
            r.notes.push_back(std::string("allreduce: ") + e.what());
        }
        auto parts = [&](const RunRecord& run, double* tc, double* tm) {
            *tc = cm.seconds_per_iter(static_cast<double>(run.global_batch) / run.nodes);
            *tm = run.nodes > 1 && am ? am->seconds(run.nodes, grad_bytes) : 0.0;
        };
        for (size_t i = 0; i < good.size(); ++i) {
            const RunRecord& run = *good[i];
            if (run.nodes > 1 && !am) continue;
            std::vector<IterationSample> others;
            for (size_t j = 0; j < good.size(); ++j) {
                if (j == i || good[j]->nodes < 2 || !am) continue;
                IterationSample q;
                parts(*good[j], &q.compute_seconds, &q.comm_seconds);
                q.measured_seconds = good[j]->measured_seconds /
                                     (std::floor(D / good[j]->global_batch) * good[j]->epochs);
                if (std::isfinite(q.measured_seconds)) others.push_back(q);
            }
            OverlapModel ov;
            try {
                ov = OverlapModel::fit(others);
            } catch (const Error&) {
                ov = OverlapModel{};
            }
            double tc = 0, tm = 0;
            parts(run, &tc, &tm);
            ValidationPoint p;
            p.kind = "run";
            p.nodes = run.nodes;
            p.global_batch = run.global_batch;
            p.measured_epoch_seconds = run.measured_seconds / run.epochs;
            p.predicted_epoch_seconds = std::floor(D / run.global_batch) * ov.combine(tc, tm);
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

}  // namespace tula
