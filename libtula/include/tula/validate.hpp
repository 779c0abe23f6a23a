// libtula: leave-one-out validation of the models (tula validate, tula(1)).
#pragma once
#include <string>
#include <vector>

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
///  - runs: each finished run (K, B) is predicted from the compute and allreduce models and
///    the overlap gamma fitted on the other runs; epoch time = measured_seconds / epochs. A
///    run with several ranks per node adds the within-node allreduce at the bandwidth fitted
///    to the within-node samples of `allreduce` (IntraNodeModel; not modelled without them).
///    The modelled step is scaled as the planner scales it (step_time_factor): by the
///    synchronized-step profile of the run's shape, K nodes x R ranks (step_synced_ratios with
///    that bandwidth), and the time calibration of the other runs.
/// `partial`: the models only see the smallest and largest profiled local batch and the
/// smallest and largest profiled node count (>= 2), as Scavenger's partial search.
/// Cost = nodes x epoch seconds / 3600 x `price`. Errors: tula::Error when the workload has
/// no training examples or too few compute samples to fit anything.
ValidationResult validate_workload(const Workload& w, const std::vector<ComputeSample>& compute,
                                   const std::vector<AllreduceSample>& allreduce, const std::vector<RunRecord>& runs,
                                   bool partial, double price_per_node_hour);

/// A finished run checked against the prediction interval of the models refitted without it
/// (online refit: every other finished run is in the overlap fit, so the next prediction uses
/// this one too).
struct RunCheck {
    std::string job_id;
    int nodes = 0;
    int global_batch = 0;
    int epochs = 0;
    double created = 0;             ///< Unix seconds, of the run
    double measured_seconds = 0;    ///< training seconds the run recorded
    double predicted_seconds = 0;   ///< epochs x floor(D/B) x overlap(compute(B/K), allreduce(K)), seconds
    double lower_seconds = 0;       ///< lower end of the prediction interval, seconds
    double upper_seconds = 0;       ///< upper end, seconds
    bool has_interval = false;      ///< false when the compute fit has no residual degrees of freedom
    bool flagged = false;           ///< has_interval and measured outside [lower, upper]
    int ranks_per_node = 1;         ///< ranks on each node of the run
};

/// Checks the `max_checked` newest runs of `runs` (by `created`; runs with nodes < 1,
/// global_batch < nodes x ranks per node, epochs < 1 or a non-positive time are skipped, as are multi-node
/// runs when there is no allreduce fit). For each: the compute model from `compute` with its
/// Student-t prediction half-width h at local batch b = B/K (ComputeModel::interval, `level`),
/// the allreduce model from `allreduce` (nodes >= 2) and the Pollux gamma fitted on the other
/// runs; the interval of the training time is
///   [E n_it overlap(max(t_c - h, 0), t_m),  E n_it overlap(t_c + h, t_m)],  n_it = floor(D/B),
/// the planner's upper bound (planner.hpp) and its mirror image. `job_id` non-empty: only
/// runs with that job id are checked. Pure. Errors: tula::Error when the compute model cannot
/// be fitted (fewer than 2 local batches).
std::vector<RunCheck> check_runs(const Workload& w, const std::vector<ComputeSample>& compute,
                                 const std::vector<AllreduceSample>& allreduce, const std::vector<RunRecord>& runs,
                                 size_t max_checked, double level = 0.95, const std::string& job_id = "");

}  // namespace tula
