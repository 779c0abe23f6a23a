// libtula: leave-one-out validation of the models (tula validate, tula(1)).
#pragma once
#include <string>
#include <vector>

#include "tula/db.hpp"
#include "tula/workload.hpp"

namespace tula {

/// One held-out configuration and its prediction from the rest.
struct ValidationPoint {
    std::string kind;            ///< "compute" (a profiled local batch, 1 node) or "run" (a finished run)
    int nodes = 1;
    int global_batch = 0;        ///< = local batch for "compute"
    double measured_epoch_seconds = 0;   ///< seconds
    double predicted_epoch_seconds = 0;  ///< seconds
    double measured_cost = 0;    ///< node-hours x price, epoch of training
    double predicted_cost = 0;
};

/// Result for one workload: mean absolute percentage errors over the held-out points.
struct ValidationResult {
    std::string workload;
    bool partial = false;
    std::vector<ValidationPoint> points;
    double mape_epoch_time = 0;  ///< percent; NaN when there are no points
    double mape_cost = 0;        ///< percent; NaN when there are no points
    std::vector<std::string> notes;  ///< why points were skipped
};

/// Leave-one-out validation (pure, no I/O):
///  - compute: each distinct profiled local batch b is held out, the compute model is fitted
///    on the other batches (needs >= 2 left), and the epoch time at 1 node, global batch b,
///    floor(D/b) x t(b), is compared with the measured mean;
///  - runs: each finished run (K, B) is predicted from the compute and allreduce models and
///    the overlap gamma fitted on the other runs; epoch time = measured_seconds / epochs.
/// `partial`: the models only see the smallest and largest profiled local batch and the
/// smallest and largest profiled node count (>= 2), as Scavenger's partial search.
/// Cost = nodes x epoch seconds / 3600 x `price`. Errors: tula::Error when the workload has
/// no training examples or too few compute samples to fit anything.
ValidationResult validate_workload(const Workload& w, const std::vector<ComputeSample>& compute,
                                   const std::vector<AllreduceSample>& allreduce, const std::vector<RunRecord>& runs,
                                   bool partial, double price_per_node_hour);

}  // namespace tula
