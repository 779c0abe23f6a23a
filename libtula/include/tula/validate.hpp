// libtula: leave-one-out validation of the models (tula validate, tula(1)).
#pragma once
#include <string>
#include <vector>

#include "tula/conf.hpp"
#include "tula/predict.hpp"
#include "tula/records.hpp"
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
    int ranks_per_node = 1;      ///< ranks on each node of the run (1 for "compute")
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
///  - runs: each usable finished run (usable_run) is predicted by the planner's prediction
///    (Predictor::run with the run's class's models, TimeModels::run_target) from the time
///    models fitted to the profiles and every other run (fit_run_models: the overlap exponent
///    and the time calibration without it); epoch time = seconds / epochs.
/// `partial`: the models only see the smallest and largest profiled local batch and the
/// smallest and largest profiled node count (>= 2), as Scavenger's partial search.
/// `corrections`: those switched off are left out of fit and prediction (the ablation).
/// Cost = nodes x epoch seconds / 3600 x `price`. Errors: tula::Error when the workload has
/// no training examples or too few compute samples to fit anything.
ValidationResult validate_workload(const Config& cfg, const Workload& w, const std::vector<ComputeSample>& compute,
                                   const std::vector<AllreduceSample>& allreduce, const std::vector<RunRecord>& runs,
                                   bool partial, double price_per_node_hour, const Corrections& corrections = Corrections{});

/// Checks the `max_checked` newest usable runs of `runs` (by `created`; multi-node runs are
/// skipped when `models` has no allreduce fit). Each is predicted as validate_workload
/// predicts it, from `models` (fit_profile_models) refitted to the other runs
/// (fit_run_models), with the interval of Predictor::run at `level`; it is flagged when it
/// has an interval and its measured seconds lie outside it. `job_id` non-empty: only runs with
/// that job id are checked. Pure. Errors: none.
std::vector<RunCheck> check_runs(const TimeModels& models, const std::vector<RunRecord>& runs, size_t max_checked,
                                 double level = 0.95, const std::string& job_id = "");

}  // namespace tula
