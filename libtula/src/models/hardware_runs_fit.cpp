// libtula: a hardware file's compute model calibrated by finished runs of its workload
// (fit_hardware_compute; hardware.hpp). Derivation: docs/models.md, "Runs calibrate a hardware
// file's compute model".
#include <Eigen/Dense>

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

// One run as a sample of the per-device step: x = examples per device per step, y = measured
// seconds per step less the modelled inter-node allreduce.
struct StepSample {
    double x = 0, y = 0;
};

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
        const double iters = std::floor(d / r.global_batch) * r.epochs;
        if (!(iters > 0)) continue;
        const double comm = hierarchical_allreduce_seconds(&m->allreduce, r.nodes, 1, grad_bytes, 0.0);
        StepSample q;
        q.x = r.local_batch();
        q.y = r.measured_seconds / iters - comm;
        if (q.x > 0 && q.y > 0 && std::isfinite(q.y)) s.push_back(q);
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
    // Least squares of y = a + c x in relative residuals: each row divided by its y, a, c >= 0.
    Eigen::MatrixXd A(static_cast<Eigen::Index>(s.size()), 2);
    const Eigen::VectorXd ones = Eigen::VectorXd::Ones(A.rows());
    for (size_t i = 0; i < s.size(); ++i) {
        A(static_cast<Eigen::Index>(i), 0) = 1.0 / s[i].y;
        A(static_cast<Eigen::Index>(i), 1) = s[i].x / s[i].y;
    }
    const Eigen::VectorXd ac = nnls_small(A, ones);
    const double a = ac(0), c = ac(1);
    if (!(c > 0)) return 0;
    ComputeModel& cm = m->compute;
    cm.t0 = a;
    cm.t1 = c / p.gpus_per_node;  // per example of the node's batch, spread over its devices
    cm.flat = false;
    cm.t_min = 0;
    return static_cast<int>(s.size());
}

}  // namespace tula
