// libtula: the compute model, seconds per iteration of one rank vs its local batch
// (ComputeModel; the fit itself is in compute_fit.cpp; models.hpp, docs/models.md).
#include "tula/models.hpp"

#include <gsl/gsl_cdf.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "fit_util.hpp"
#include "tula/error.hpp"

namespace tula {

using namespace models_detail;

double ComputeModel::startup_seconds(double b) const {
    if (startup_knots.empty() || !(b > 0)) return 0.0;
    const auto& lo = startup_knots.front();
    const auto& hi = startup_knots.back();
    if (b <= lo.first) return lo.second * b / lo.first;
    if (b >= hi.first) {
        if (startup_knots.size() < 2) return hi.second * b / hi.first;
        const auto& pre = startup_knots[startup_knots.size() - 2];
        const double slope = (hi.second - pre.second) / (hi.first - pre.first);
        return hi.second + std::max(0.0, slope) * (b - hi.first);
    }
    const size_t i = knot_segment(startup_knots, b);
    if (startup_knots[i].first == b) return startup_knots[i].second;
    return lerp_knots(startup_knots[i - 1], startup_knots[i], b);
}

void ComputeModel::fit_concurrent(const std::vector<ComputeSample>& together) {
    std::map<int, std::map<int, std::vector<double>>> by;  // ranks -> local batch -> seconds
    std::map<int, std::map<int, std::map<int, std::vector<double>>>> on_node;  // R -> ranks -> b -> seconds
    for (const auto& s : together) {
        if (s.local_batch < 1 || !std::isfinite(s.seconds_per_iter) || s.seconds_per_iter <= 0)
            throw Error("compute profile of " + s.workload + " has a sample of " + std::to_string(s.ranks) +
                        " ranks at once with local batch " + std::to_string(s.local_batch) + " and " +
                        std::to_string(s.seconds_per_iter) + " s/iter; the batch must be >= 1 and the time > 0");
        if (s.ranks_per_node > 1) on_node[s.ranks_per_node][s.ranks][s.local_batch].push_back(s.seconds_per_iter);
        else by[s.ranks][s.local_batch].push_back(s.seconds_per_iter);
    }
    auto ratio_knots = [&](const std::map<int, std::vector<double>>& batches) {
        std::vector<std::pair<double, double>> knots;
        for (const auto& [b, times] : batches) knots.emplace_back(b, median(times) / seconds_per_iter(b));
        return knots;
    };
    concurrent.clear();
    for (const auto& [k, batches] : by) concurrent[k] = ratio_knots(batches);
    concurrent_on_node.clear();
    for (const auto& [r, counts] : on_node)
        for (const auto& [k, batches] : counts) concurrent_on_node[r][k] = ratio_knots(batches);
    // (ranks per node R, nodes K) -> local batch -> synced seconds; R = 1: K = ranks
    std::map<std::pair<int, int>, std::map<int, std::vector<double>>> sync;
    for (const auto& s : together) {
        if (!std::isfinite(s.synced_seconds_per_iter) || !(s.synced_seconds_per_iter > 0)) continue;
        const int R = std::max(1, s.ranks_per_node);
        if (s.ranks % R != 0) continue;  // not K whole nodes: no shape to key it by
        sync[{R, s.ranks / R}][s.local_batch].push_back(s.synced_seconds_per_iter);
    }
    synced.clear();
    synced_on_node.clear();
    for (const auto& [shape, batches] : sync) {
        auto& knots = shape.first <= 1 ? synced[shape.second] : synced_on_node[shape.first][shape.second];
        for (const auto& [b, times] : batches) knots.emplace_back(b, median(times));
    }
}

double ComputeModel::concurrency_factor(int nodes, double b) const {
    const int k = profiled_count(concurrent, nodes);
    return k == 0 ? 1.0 : TimeCalibration::curve_at(concurrent.at(k), b);
}

double ComputeModel::concurrency_at(int nodes, int ranks_per_node, double b) const {
    const int R = std::max(1, ranks_per_node);
    if (R > 1) {
        const auto it = concurrent_on_node.find(R);
        const int k = it == concurrent_on_node.end() ? 0 : profiled_count(it->second, nodes * R);
        if (k > 0) return TimeCalibration::curve_at(it->second.at(k), b);
    }
    return concurrency_factor(nodes * R, b);
}

double ComputeModel::seconds_per_iter(double b) const {
    if (!interpolated || knots.size() < 3) return parametric(b);
    const auto& lo = knots.front();
    const auto& hi = knots.back();
    // below the range: the shifted curve, but not below proportional scaling t(b_min) b / b_min
    if (b <= lo.first) return std::max(lo.second * b / lo.first, lo.second + parametric(b) - parametric(lo.first));
    if (b >= hi.first) return hi.second + parametric(b) - parametric(hi.first);
    const size_t i = knot_segment(knots, b);
    if (knots[i].first == b) return knots[i].second;
    return lerp_knots(knots[i - 1], knots[i], b);
}

double ComputeModel::relative_interval(double level) const {
    if (!interpolated || knots.size() < 3 || !(loo_rel_rms > 0) || loo_points < 1 || !(level > 0 && level < 1))
        return 0.0;
    const double r = gsl_cdf_tdist_Pinv(0.5 + level / 2.0, loo_points) * loo_rel_rms;
    return std::isfinite(r) ? r : 0.0;
}

double ComputeModel::interval(double b, double level) const {
    if (interpolated && knots.size() >= 3) return relative_interval(level) * seconds_per_iter(b);
    if (dof < 1 || !(sigma > 0) || !(level > 0 && level < 1)) return 0.0;
    const double q = gsl_cdf_tdist_Pinv(0.5 + level / 2.0, dof);
    const double lever = xtx_inv[0] + 2.0 * b * xtx_inv[1] + b * b * xtx_inv[2];
    const double h = q * sigma * std::sqrt(1.0 + std::max(0.0, lever));
    return std::isfinite(h) ? h : 0.0;
}

}  // namespace tula
