// libtula private: the planner's enumeration of candidates per partition and the helpers it
// shares with planner.cpp (see planner.hpp). Not installed.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tula/planner.hpp"
#include "tula/predict.hpp"
#include "util.hpp"

namespace tula {
namespace planner_detail {

/// A local batch more than this factor outside the profiled range is not predicted: the
/// linear compute model is not trusted that far (memory, cache effects).
constexpr double kExtrapolation = 4.0;

/// The profile rows (ComputeSample or AllreduceSample) that stand for hardware class `cls`:
/// every row for "" (any class); else the rows recorded with `cls`, or, when there are none, the
/// unknown-class ones. `*own` (when given) says whether they are the class's own. Pure.
template <class Row>
std::vector<Row> class_rows(const std::vector<Row>& rows, const std::string& cls, bool* own = nullptr) {
    if (own) *own = true;
    if (cls.empty()) return rows;
    std::vector<Row> mine, unknown;
    for (const Row& r : rows) {
        if (r.hardware_class == cls) mine.push_back(r);
        else if (r.hardware_class.empty()) unknown.push_back(r);
    }
    if (!mine.empty()) return mine;
    if (own) *own = false;
    return unknown;
}

using detail::fmt;
using detail::nodes_str;
/// "2 nodes x 256", "2 nodes of gpu x 256" when the candidate names a partition.
std::string config_str(const Candidate& c);
/// The whole epochs a job trains to reach `epochs_to_target` (fractional): rounded up, within
/// [1, 100000]; `fallback` when it is not a finite number.
int whole_epochs(double epochs_to_target, int fallback);

/// The shape whose synchronized-step profile serves a step of `nodes` nodes of `ranks_per_node`
/// ranks (SyncedRatios::serving) in words: "3 nodes x 2 ranks", "4 ranks at once" (one rank
/// per node), "0 ranks at once" when none serves. Pure.
std::string synced_shape_str(const SyncedRatios& synced, int nodes, int ranks_per_node);

/// Appends every feasible (nodes K, global batch B) candidate of the partition of `pred`
/// (Predictor::target, t) to plan->candidates (fewest nodes first, then the smallest batch): K
/// in [req.min_nodes, min(req.max_nodes, t.conf.nodes)] (1 without an across-node allreduce),
/// R = t.conf.ranks_per_node ranks per node, B a multiple of K R with the local batch B / (K R)
/// within the profiled range and device memory; each predicted by pred.step. Sets
/// plan->max_local_batch. partitions_after: how many partitions the caller will enumerate into
/// the same plan after this one (room is reserved for as many shapes each, so that the
/// candidates are not moved as the plan grows). Errors: tula::Error naming why, when the
/// partition has no feasible candidate (memory, divisibility, the profiled range).
void enumerate_partition(const PlanRequest& req, const Predictor& pred, Plan* plan, size_t partitions_after = 0);

}  // namespace planner_detail
}  // namespace tula
