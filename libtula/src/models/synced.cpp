// libtula: the synchronized-step profile's ratios to the modelled step, per shape (nodes x
// ranks per node), and the factor they put on a step (see models.hpp: SyncedRatios,
// ComputeModel::synced_ratios, step_synced_ratios, step_time_factor).
#include <algorithm>
#include <cmath>

#include "tula/models.hpp"

namespace tula {

const BatchKnots* SyncedRatios::serving(int nodes, int ranks_per_node, std::pair<int, int>* timed) const {
    if (timed) *timed = {0, 0};
    const int R = std::max(1, ranks_per_node);
    if (R > 1 && nodes >= 1) {
        const auto it = on_node.find(R);
        if (it != on_node.end()) {
            auto k = it->second.upper_bound(nodes);  // the largest profiled K <= nodes
            if (k != it->second.begin()) {
                --k;
                if (timed) *timed = {k->first, R};
                return &k->second;
            }
        }
    }
    const int k = profiled_count(one_per_node, nodes * R);
    if (k == 0) return nullptr;
    if (timed) *timed = {k, 1};
    return &one_per_node.at(k);
}


SyncedRatios ComputeModel::synced_ratios(const std::function<double(int, int, double)>& modelled) const {
    auto ratios = [&](int k, int r, const BatchKnots& knots) {
        BatchKnots out;
        for (const auto& [bj, secs] : knots) {
            const double m = modelled(k, r, bj);
            if (m > 0 && std::isfinite(m)) out.emplace_back(bj, secs / m);
        }
        return out;
    };
    SyncedRatios out;
    for (const auto& [k, knots] : synced) {
        BatchKnots q = ratios(k, 1, knots);
        if (!q.empty()) out.one_per_node[k] = std::move(q);
    }
    for (const auto& [r, by_nodes] : synced_on_node)
        for (const auto& [k, knots] : by_nodes) {
            BatchKnots q = ratios(k, r, knots);
            if (!q.empty()) out.on_node[r][k] = std::move(q);
        }
    return out;
}

SyncedRatios ComputeModel::synced_ratios(const std::function<double(int, double)>& modelled) const {
    return synced_ratios([&](int k, int r, double b) { return r <= 1 ? modelled(k, b) : 0.0; });
}

double ComputeModel::synced_factor_at(const SyncedRatios& ratios, int nodes, int ranks_per_node, double b) {
    const BatchKnots* knots = ratios.serving(nodes, ranks_per_node);
    if (!knots) return 1.0;
    return std::min(TimeCalibration::kMax, std::max(TimeCalibration::kMin, TimeCalibration::curve_at(*knots, b)));
}

SyncedRatios step_synced_ratios(const ComputeModel& compute, const AllreduceModel* allreduce, const OverlapModel& overlap,
                                double grad_bytes, double intra_bandwidth) {
    return compute.synced_ratios([&](int k, int r, double b) {
        if (k > 1 && !allreduce) return 0.0;  // no across-node model: the knot is left out
        return overlap.combine(compute.seconds_per_iter(b) * compute.concurrency_at(k, r, b),
                               hierarchical_allreduce_seconds(allreduce, k, r, grad_bytes, intra_bandwidth));
    });
}

double step_time_factor(const TimeCalibration& calibration, const SyncedRatios& synced_ratios, int nodes,
                        int ranks_per_node, double b, bool* from_synced) {
    const bool synced = synced_ratios.serving(nodes, ranks_per_node) != nullptr;
    if (from_synced) *from_synced = synced;
    if (!synced) return calibration.factor_at(nodes, ranks_per_node, b);
    const double y = ComputeModel::synced_factor_at(synced_ratios, nodes, ranks_per_node, b);
    if (!calibration.own_kind(nodes, ranks_per_node)) return y;
    return std::min(TimeCalibration::kMax,
                    std::max(TimeCalibration::kMin, y * calibration.factor_at(nodes, ranks_per_node, b)));
}

}  // namespace tula
