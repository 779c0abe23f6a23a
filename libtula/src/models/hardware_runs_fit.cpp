// libtula: a hardware file's compute model calibrated by finished runs of its workload
// (fit_hardware_compute; hardware.hpp). Derivation: docs/models.md, "Runs calibrate a hardware
// file's compute model".
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "fit_util.hpp"
#include "tula/hardware.hpp"
#include "tula/models.hpp"

namespace tula {

using namespace models_detail;

namespace {

// One run as a sample of the per-device step: x = examples per device per step, t = measured
// seconds per step, comm = the inter-node allreduce of its gradient (whole and in buckets).
struct StepSample {
    double x = 0, t = 0;
    GradientAllreduce comm;
};

// Least squares of y = a + c x in relative residuals (each row divided by its y), a, c >= 0,
// where y = t less the allreduce not hidden behind the backward pass of the previous round's c
// (OverlapModel; the first round, c = 0, takes the whole allreduce out). Each round hides more
// of it, by less; rounds stop when c no longer changes (relative 1e-12) or after 50. Returns
// {a, c}; c = 0 when fewer than 2 runs are left with y > 0.
Eigen::Vector2d fit_step(const std::vector<StepSample>& s, const OverlapModel& overlap) {
    Eigen::Vector2d ac(0.0, 0.0);
    for (int round = 0; round < 50; ++round) {
        std::vector<std::pair<double, double>> xy;
        for (const StepSample& q : s) {
            const double batch = ac(1) * q.x;
            const double exposed = overlap.combine(ac(0) + batch, batch, q.comm) - (ac(0) + batch);
            const double y = q.t - exposed;
            if (y > 0 && std::isfinite(y)) xy.emplace_back(q.x, y);
        }
        if (xy.size() < 2) return Eigen::Vector2d(0.0, 0.0);
        Eigen::MatrixXd A(static_cast<Eigen::Index>(xy.size()), 2);
        for (size_t i = 0; i < xy.size(); ++i) {
            A(static_cast<Eigen::Index>(i), 0) = 1.0 / xy[i].second;
            A(static_cast<Eigen::Index>(i), 1) = xy[i].first / xy[i].second;
        }
        const Eigen::VectorXd next = nnls_small(A, Eigen::VectorXd::Ones(A.rows()));
        const bool settled = std::abs(next(1) - ac(1)) <= 1e-12 * next(1);
        ac = Eigen::Vector2d(next(0), next(1));
        if (!(overlap.bucket_bytes > 0) || settled) break;
    }
    return ac;
}

}  // namespace

bool runs_serve_partition(const RunRecord& r, const HardwareSpec& p) {
    if (r.hardware_class.empty()) return true;
    return r.hardware_class == (p.partition.empty() ? p.name : p.partition);
}

int fit_hardware_compute(const HardwareSpec& p, const std::vector<RunRecord>& runs, SimulatedModels* m) {
    std::vector<StepSample> s;
    const double grad_bytes = 4.0 * static_cast<double>(p.workload.params);
    for (const RunRecord& r : runs) {
        if (r.workload != p.workload.name || !usable_run(r) || !runs_serve_partition(r, p)) continue;
        const double d = r.examples_per_epoch(static_cast<double>(p.workload.train_examples));
        const double iters = steps_per_epoch(d, r.global_batch, p.workload.last_batch) * r.epochs;
        if (!(iters > 0)) continue;
        StepSample q;
        q.x = r.local_batch();
        q.t = r.measured_seconds / iters;
        q.comm = bucketed_allreduce(&m->allreduce, r.nodes, 1, grad_bytes, 0.0, m->overlap.bucket_bytes);
        if (q.x > 0 && q.t - q.comm.seconds > 0 && std::isfinite(q.t)) s.push_back(q);
    }
    std::set<double> xs;
    for (const StepSample& q : s) xs.insert(q.x);
    // A local batch a run trained at fits the device: the file's activations per example are
    // lowered where they would not let it.
    if (!xs.empty() && m->memory.per_example_bytes > 0) {
        const double node_batch = *xs.rbegin() * p.gpus_per_node;
        const double room = m->node_memory_bytes - m->memory.static_bytes;
        if (room > 0 && m->memory.per_example_bytes * node_batch > room)
            m->memory.per_example_bytes = room / node_batch;
    }
    if (xs.size() < 2) return 0;
    const Eigen::Vector2d ac = fit_step(s, m->overlap);
    const double a = ac(0), c = ac(1);
    if (!(c > 0)) return 0;
    ComputeModel& cm = m->compute;
    cm.t0 = a;
    cm.t1 = c / p.gpus_per_node;  // per example of the node's batch, spread over its devices
    cm.flat = false;
    cm.t_min = 0;
    return static_cast<int>(s.size());
}

SimulatedModels hardware_models(const HardwareSpec& p, const std::vector<RunRecord>& runs, int* calibrated_runs) {
    SimulatedModels m = derive_models(p);
    const int n = fit_hardware_compute(p, runs, &m);
    if (calibrated_runs) *calibrated_runs = n;
    return m;
}

}  // namespace tula
