// Builders of libtula's plain records for the unit tests, so that a test states only the
// fields it is about, and a field-by-field comparison.
#pragma once
#include <cppunit/extensions/HelperMacros.h>

#include <cstdint>
#include <string>

#include "tula/models.hpp"
#include "tula/records.hpp"
#include "tula/workload.hpp"

namespace tula_test {

/// The workload MODEL@fashion-mnist with `params` parameters, `train` training and 10,000 test
/// examples (activation size 0: not known).
inline tula::Workload fmnist_workload(const std::string& model, int64_t params, int64_t train = 60000) {
    tula::Workload w;
    w.model = model;
    w.dataset = "fashion-mnist";
    w.name = tula::workload_name(w.model, w.dataset);
    w.params = params;
    w.train_examples = train;
    w.test_examples = 10000;
    return w;
}

/// A finished run of `workload`: job id, node count, global batch, epochs, training seconds
/// and creation time (Unix seconds); everything else 0.
inline tula::RunRecord run_record(const std::string& job_id, const std::string& workload, int nodes, int global_batch,
                                  int epochs, double measured_seconds, double created) {
    tula::RunRecord r;
    r.job_id = job_id;
    r.workload = workload;
    r.nodes = nodes;
    r.global_batch = global_batch;
    r.epochs = epochs;
    r.measured_seconds = measured_seconds;
    r.created = created;
    return r;
}

/// The compute model t0 + t1 b seconds per iteration (b: local batch), profiled over
/// [min_batch, max_batch].
inline tula::ComputeModel linear_compute(double t0, double t1, int min_batch = 0, int max_batch = 0) {
    tula::ComputeModel m;
    m.t0 = t0;
    m.t1 = t1;
    m.min_batch = min_batch;
    m.max_batch = max_batch;
    return m;
}

/// `m` with a prediction interval: residual standard deviation sigma (seconds), `dof` degrees
/// of freedom and the upper triangle (00, 01, 11) of (X^T X)^-1 of the fit.
inline tula::ComputeModel with_interval(tula::ComputeModel m, double sigma, int dof, double x00, double x01, double x11) {
    m.sigma = sigma;
    m.dof = dof;
    m.xtx_inv[0] = x00;
    m.xtx_inv[1] = x01;
    m.xtx_inv[2] = x11;
    return m;
}

}  // namespace tula_test
