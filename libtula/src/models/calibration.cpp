// libtula: the time calibration of finished runs on the modelled step (TimeCalibration), and
// the runs as iteration samples (usable_run, steady_seconds, iteration_samples; models.hpp).
#include "tula/models.hpp"


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

bool usable_run(const RunRecord& run) {
    return run.nodes >= 1 && run.global_batch >= run.ranks() && run.epochs >= 1 && run.measured_seconds > 0 &&
           std::isfinite(run.measured_seconds);
}

double steady_seconds(const RunRecord& r, const ComputeModel& compute) {
    if (r.ranks() < 1 || compute.trained_warm(r)) return r.measured_seconds;
    const double s = compute.startup_seconds(r.local_batch());
    return std::max(r.measured_seconds - s, 0.5 * r.measured_seconds);
}

std::vector<IterationSample> iteration_samples(const std::vector<const RunRecord*>& runs, const Workload& w,
                                               const ComputeModel& compute, const AllreduceModel* allreduce,
                                               double intra_bandwidth) {
    std::vector<IterationSample> out;
    const double grad_bytes = 4.0 * static_cast<double>(w.params);
    for (const RunRecord* r : runs) {
        if (!usable_run(*r) || (r->nodes > 1 && !allreduce)) continue;
        const double n_iter =
            steps_per_epoch(r->examples_per_epoch(static_cast<double>(w.train_examples)), r->global_batch, w.last_batch) *
            r->epochs;
        if (!(n_iter > 0)) continue;
        IterationSample q;
        q.compute_seconds =
            compute.seconds_per_iter(r->local_batch()) * compute.concurrency_at(r->nodes, r->ranks_per_node, r->local_batch());
        q.comm_seconds = hierarchical_allreduce_seconds(allreduce, r->nodes, r->ranks_per_node, grad_bytes, intra_bandwidth);
        q.measured_seconds = steady_seconds(*r, compute) / n_iter;
        q.nodes = r->nodes;
        q.ranks_per_node = std::max(1, r->ranks_per_node);
        q.local_batch = r->local_batch();
        out.push_back(q);
    }
    return out;
}

double TimeCalibration::curve_at(const std::vector<std::pair<double, double>>& knots, double b) {
    if (knots.empty()) return 1.0;
    if (!(b > knots.front().first)) return knots.front().second;
    if (!(b < knots.back().first)) return knots.back().second;
    const size_t i = knot_segment(knots, b);
    const auto& [b0, r0] = knots[i - 1];
    const auto& [b1, r1] = knots[i];
    const double t = std::log(b / b0) / std::log(b1 / b0);
    return r0 + t * (r1 - r0);
}

double TimeCalibration::factor_at(int nodes, int ranks_per_node, double local_batch) const {
    if (!by_local_batch(nodes, ranks_per_node)) return shape_factor(nodes, ranks_per_node);
    const NodeGroup* g = node_group(nodes, ranks_per_node);
    const double r = curve_at(g ? g->curve : curve_multi, local_batch);
    return std::min(kMax, std::max(kMin, r));
}

namespace {

// (local batch, ratio) of some samples -> knots: the median ratio per distinct local batch,
// ascending in local batch; samples with an unknown local batch are left out.
std::vector<std::pair<double, double>> ratio_knots(const std::vector<std::pair<double, double>>& pts) {
    std::map<double, std::vector<double>> by_b;
    for (const auto& [b, r] : pts)
        if (b > 0) by_b[b].push_back(r);
    std::vector<std::pair<double, double>> knots;
    for (auto& [b, rs] : by_b) knots.emplace_back(b, median(rs));
    return knots;
}

// Whether the ratio curve over the local batch predicts the group's ratios (b, r) at least as
// well as their median, by leave-one-out (squared error of log ratio); false when the points
// cover fewer than 2 local batches.
bool curve_beats_median(const std::vector<std::pair<double, double>>& pts) {
    if (ratio_knots(pts).size() < 2) return false;
    double err_curve = 0, err_median = 0;
    for (size_t i = 0; i < pts.size(); ++i) {
        std::vector<std::pair<double, double>> rest;
        std::vector<double> rs;
        for (size_t j = 0; j < pts.size(); ++j)
            if (j != i) rest.push_back(pts[j]), rs.push_back(pts[j].second);
        const auto knots = ratio_knots(rest);
        if (knots.empty() || rs.empty()) return false;
        const double lr = std::log(pts[i].second);
        err_curve += std::pow(std::log(TimeCalibration::curve_at(knots, pts[i].first)) - lr, 2);
        err_median += std::pow(std::log(median(rs)) - lr, 2);
    }
    return err_curve <= err_median * (1 + 1e-12);
}

}  // namespace

TimeCalibration TimeCalibration::fit(const std::vector<IterationSample>& samples, const OverlapModel& overlap,
                                     const SyncedRatios& synced_ratios) {
    // the newest kNewest usable samples whose shape (nodes, ranks per node) `in_group` accepts,
    // as (local batch, measured / (modelled x the sync factor the prediction carried))
    auto group_points = [&](const auto& in_group) {
        std::vector<std::pair<double, double>> pts;
        for (auto it = samples.rbegin(); it != samples.rend() && pts.size() < kNewest; ++it) {
            const int rpn = std::max(1, it->ranks_per_node);
            if (!in_group(Shape{it->nodes, rpn})) continue;
            const double lb = std::isfinite(it->local_batch) ? it->local_batch : 0.0;
            const double y = lb > 0 ? ComputeModel::synced_factor_at(synced_ratios, it->nodes, rpn, lb) : 1.0;
            const double pred = overlap.combine(it->compute_seconds, it->comm_seconds) * y;
            const double r = it->measured_seconds / pred;
            if (std::isfinite(r) && r > 0 && pred > 0)
                pts.emplace_back(lb, r);
        }
        return pts;
    };
    auto group_factor = [&](const std::vector<std::pair<double, double>>& pts, int* runs) {
        std::vector<double> ratios;
        for (const auto& p : pts) ratios.push_back(p.second);
        *runs = static_cast<int>(ratios.size());
        return ratios.empty() ? 1.0 : std::min(kMax, std::max(kMin, median(ratios)));
    };
    TimeCalibration c;
    c.factor = group_factor(group_points([](Shape) { return true; }), &c.runs);
    const auto single = group_points([](Shape k) { return k.first * k.second <= 1; });
    const auto multi = group_points([](Shape k) { return k.first * k.second > 1; });
    c.factor_single = group_factor(single, &c.runs_single);
    c.factor_multi = group_factor(multi, &c.runs_multi);
    // only multi-node runs get a curve: a single-node run is what the compute profile measured,
    // at the same local batch, so what remains is a steady-state offset (the median)
    if (c.runs_multi >= kGroupMin && curve_beats_median(multi)) c.curve_multi = ratio_knots(multi);
    std::set<Shape> counts;
    for (const auto& q : samples)
        if (q.nodes * std::max(1, q.ranks_per_node) > 1) counts.insert(Shape{q.nodes, std::max(1, q.ranks_per_node)});
    for (const Shape& k : counts) {
        const auto pts = group_points([k](Shape n) { return n == k; });
        if (pts.empty()) continue;
        NodeGroup& g = c.by_nodes[k];
        g.factor = group_factor(pts, &g.runs);
        if (g.runs >= kGroupMin && curve_beats_median(pts)) g.curve = ratio_knots(pts);
    }
    return c;
}

}  // namespace tula
