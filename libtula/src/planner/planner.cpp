// libtula: the planner (see planner.hpp): the choice among the candidates (Pareto front,
// policies, Kneedle), its reason, and the planning path from profiles. The candidates and
// their prediction formula are in candidates.cpp.
#include "tula/planner.hpp"
#include "tula/stop.hpp"
#include "tula/convergence_fit.hpp"
#include "tula/tula.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>


#include "candidates.hpp"
#include "tula/predict.hpp"
#include "tula/validate.hpp"
#include "tula/error.hpp"
#include "util.hpp"

namespace tula {
namespace {

using planner_detail::config_str;
using planner_detail::fmt;
using planner_detail::nodes_str;

// "X.Xx faster than <what> for Y% more cost" comparing a (faster) to b (cheaper).
std::string tradeoff(const Candidate& a, const Candidate& b, const std::string& what) {
    const double speed = a.time_to_target > 0 ? b.time_to_target / a.time_to_target : 1.0;
    std::string s = fmt("%.1fx", speed) + " faster than " + what;
    if (b.cost_to_target > 0) s += " for " + fmt("%.0f", (a.cost_to_target / b.cost_to_target - 1.0) * 100.0) + "% more cost";
    else s += " at no cost (price per node-hour is 0)";
    return s;
}

// Seconds as "42.0s", "3m12s" or "2h05m".
std::string duration(double s) {
    if (!(s < 3600.0 * 1e6)) return fmt("%.3gs", s);
    if (s < 60) return fmt("%.1fs", s);
    const long r = std::lround(s);
    char b[64];
    if (r < 3600) std::snprintf(b, sizeof b, "%ldm%02lds", r / 60, r % 60);
    else std::snprintf(b, sizeof b, "%ldh%02ldm", r / 3600, (r % 3600) / 60);
    return b;
}


// A plan for a given node count (`fixed`, the nodes a job was allocated) picks the knee of that
// node count's candidates, which can differ from the global batch the plan over every node
// count chose on the same nodes (what sbatch announced to the user at submission): the
// accuracy bound is measured from the best candidate, and a global batch too small to split
// over `fixed` nodes can be the best only in the plan over every node count. When the
// plan over every node count (`free_req`) chooses `fixed` nodes, the fixed plan takes the same
// candidate, so the job trains with the batch it was submitted for. A plan over every node
// count that fails (no candidate within a deadline or budget) leaves `plan` as it is.
void keep_free_choice(Plan& plan, const PlanRequest& free_req, const std::vector<PartitionTarget>& targets, int fixed) {
    Plan free_plan;
    try {
        free_plan = make_site_plan(free_req, targets);
    } catch (const Error&) {
        return;
    }
    const Candidate& want = free_plan.choice();
    if (want.nodes != fixed) return;
    for (size_t i = 0; i < plan.candidates.size(); ++i) {
        const Candidate& c = plan.candidates[i];
        if (c.nodes != want.nodes || c.global_batch != want.global_batch || c.partition != want.partition ||
            i == plan.chosen)
            continue;
        plan.chosen = i;
        plan.reason = free_plan.reason + "; on " + std::to_string(fixed) +
                      (fixed == 1 ? " node" : " nodes") + " as given, the plan over every node count's choice";
        int max_time = 0;
        for (const PartitionTarget& t : targets)
            if (t.conf.name == c.partition) max_time = t.conf.max_time_minutes;
        plan.time_limit_minutes = candidate_time_limit(c, free_req.time_margin, free_req.time_overhead, max_time);
        return;
    }
}

// check_runs for the runs of each hardware class against that class's profile rows
// (planner_detail::class_rows; the runs of unknown class against every row, as before classes
// were recorded), newest first over all classes, at most `max_checked`. Errors: tula::Error
// from check_runs when there is one class and its compute fit fails; a class whose fit fails
// among several is left unchecked.

}  // namespace

PolicySpec parse_policy_spec(const std::string& s) {
    PolicySpec p;
    if (s == "auto") return p;
    if (s == "time") {
        p.policy = Policy::Time;
        return p;
    }
    if (s == "cost") {
        p.policy = Policy::Cost;
        return p;
    }
    std::string shown = s.substr(0, 64);
    for (char& c : shown)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    if (s.rfind("deadline=", 0) == 0) {
        // embedded NULs would hide the rest of the value from the C parser: refuse them
        const std::string d = s.substr(9);
        const double sec = d.find('\0') == std::string::npos ? tula_parse_duration(d.c_str(), nullptr, 0) : -1;
        if (!(sec > 0))
            throw Error("policy '" + shown + "': the deadline must be a positive duration HH:MM:SS (or MM:SS, D-HH:MM:SS), e.g. deadline=01:30:00");
        p.policy = Policy::Deadline;
        p.deadline_seconds = sec;
        return p;
    }
    if (s.rfind("budget=", 0) == 0) {
        double v = 0;
        const std::string b = s.substr(7);
        if (b.find('\0') != std::string::npos || tula_check_budget(b.c_str(), &v, nullptr, 0) != 0)
            throw Error("policy '" + shown + "': the budget must be a number > 0 in the price unit of tula.conf, e.g. budget=2.5");
        p.policy = Policy::Budget;
        p.budget = v;
        return p;
    }
    throw Error("unknown policy '" + shown + "'; valid values: auto, time, cost, deadline=HH:MM:SS, budget=X");
}


const char* policy_name(Policy p) {
    switch (p) {
        case Policy::Auto: return "auto";
        case Policy::Time: return "time";
        case Policy::Cost: return "cost";
        case Policy::Deadline: return "deadline";
        case Policy::Budget: return "budget";
    }
    return "auto";
}

std::vector<size_t> pareto_front(const std::vector<Candidate>& c) {
    // (time, cost, index) side by side: sorted without reaching into the candidates
    struct Point {
        double time, cost;
        size_t i;
    };
    // The front lies in the box of the fastest and the cheapest points: a point slower than the
    // fastest point of least cost, or costlier than the cheapest point of least time, is
    // dominated by that point (and is no exact duplicate of it), so it is not sorted.
    const double inf = std::numeric_limits<double>::infinity();
    double t_min = inf, c_min = inf;
    for (const Candidate& x : c)
        if (std::isfinite(x.time_to_target) && std::isfinite(x.cost_to_target)) {
            t_min = std::min(t_min, x.time_to_target);
            c_min = std::min(c_min, x.cost_to_target);
        }
    double t_box = inf, c_box = inf;  // the time of the cheapest, the cost of the fastest
    for (const Candidate& x : c) {
        if (x.cost_to_target == c_min && std::isfinite(x.time_to_target)) t_box = std::min(t_box, x.time_to_target);
        if (x.time_to_target == t_min && std::isfinite(x.cost_to_target)) c_box = std::min(c_box, x.cost_to_target);
    }
    std::vector<Point> pts;
    for (size_t i = 0; i < c.size(); ++i)
        if (std::isfinite(c[i].time_to_target) && std::isfinite(c[i].cost_to_target) && c[i].time_to_target <= t_box &&
            c[i].cost_to_target <= c_box)
            pts.push_back({c[i].time_to_target, c[i].cost_to_target, i});
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) {
        if (a.time != b.time) return a.time < b.time;
        if (a.cost != b.cost) return a.cost < b.cost;
        return a.i < b.i;  // ties in input order
    });
    // Sweep in increasing time: a point is on the front when its cost is below every cost
    // seen so far, or it equals (time and cost) the point that set the current best cost.
    std::vector<size_t> front;
    const Point* last = nullptr;
    for (const Point& q : pts) {
        if (!last || q.cost < last->cost || (q.cost == last->cost && q.time == last->time)) {
            front.push_back(q.i);  // an exact duplicate of a front point is not dominated either
            last = &q;
        }
    }
    return front;
}

// Kneedle (Satopaa et al. 2011, sec. II), for a decreasing convex curve:
//   order the points by x (ties: input order);
//   xn_i = (x_i - min x) / (max x - min x),  yn_i = (y_i - min y) / (max y - min y)
//          (0 when the range is 0);
//   chord through the first (f) and last (l) points in x order:
//          L(xn) = yn_f + (yn_l - yn_f) * xn;
//   difference D_i = L(xn_i) - yn_i, which for a decreasing curve (yn_f = 1, yn_l = 0) is
//          D_i = (1 - yn_i) - xn_i, the paper's difference curve of the flipped curve;
//   knee = argmax_i D_i, the first in x order among equal maxima (within 1e-12).
// No knee: fewer than 3 points, or none strictly below the chord (max D_i <= 1e-12: a straight
// or concave front, whose ends tie at D = 0). Then the point of least x_i y_i when every x and y
// is positive (along a front, moving to it from a neighbour changes y by a larger factor than
// it changes x the other way, an elasticity |d ln y / d ln x| of 1), else the point nearest the
// origin after normalization; ties: the last in x order (the cheaper end of a time/cost front).
size_t knee_point(const std::vector<double>& x, const std::vector<double>& y) {
    if (x.size() != y.size()) throw Error("knee_point: x and y differ in size");
    if (x.empty()) throw Error("knee_point: no points");
    std::vector<size_t> order(x.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
    // Plain variables, not structured bindings: C++17 does not let a lambda capture those.
    const auto xmm = std::minmax_element(x.begin(), x.end());
    const auto ymm = std::minmax_element(y.begin(), y.end());
    const double xmin = *xmm.first, ymin = *ymm.first;
    const double xr = *xmm.second - xmin, yr = *ymm.second - ymin;
    auto xn = [&](size_t i) { return xr > 0 ? (x[i] - xmin) / xr : 0.0; };
    auto yn = [&](size_t i) { return yr > 0 ? (y[i] - ymin) / yr : 0.0; };
    size_t best = order.front();
    if (x.size() >= 3) {
        const double yf = yn(order.front()), yl = yn(order.back());
        double bd = -INFINITY;
        for (size_t i : order) {
            const double d = (yf + (yl - yf) * xn(i)) - yn(i);
            if (d > bd + 1e-12) {
                bd = d;
                best = i;
            }
        }
        if (bd > 1e-12) return best;
    }
    const bool positive = xmin > 0 && ymin > 0;
    double bv = INFINITY;
    for (size_t i : order) {
        const double v = positive ? x[i] * y[i] : xn(i) * xn(i) + yn(i) * yn(i);
        if (v <= bv * (1 + 1e-12)) {
            bv = v;
            best = i;
        }
    }
    return best;
}

namespace {

// Checks what make_site_plan needs of `req`. Errors: tula::Error naming the workload and the
// field (epochs, training examples, parameters, node range, prices, allreduce profile).
void check_plan_request(const PlanRequest& req, const AllreduceModel* allreduce) {
    const Workload& w = req.workload;
    if (req.epochs < 1) throw Error("cannot plan " + w.name + ": epochs must be >= 1 (got " + std::to_string(req.epochs) + ")");
    if (w.train_examples < 1)
        throw Error("cannot plan " + w.name + ": its profile has no training examples; run `tula profile compute --workload " +
                    w.name + "` again");
    if (req.examples_per_epoch() < 1)
        throw Error("cannot plan " + w.name + ": tula-train --val-split " + std::to_string(req.examples.validation) +
                    " holds out all " + std::to_string(req.examples.limited_train(w)) +
                    " training examples of an epoch; give a smaller --val-split");
    if (w.params < 0) throw Error("cannot plan " + w.name + ": negative parameter count in its profile");
    if (req.min_nodes < 1 || req.max_nodes < req.min_nodes)
        throw Error("cannot plan " + w.name + ": node range [" + std::to_string(req.min_nodes) + ", " +
                    std::to_string(req.max_nodes) + "] is empty");
    if (!std::isfinite(req.price_per_node_hour) || req.price_per_node_hour < 0)
        throw Error("cannot plan " + w.name + ": price_per_node_hour must be a finite number >= 0");
    if (req.gpus_per_node < 0 || !std::isfinite(req.price_per_gpu_hour) || req.price_per_gpu_hour < 0 ||
        !std::isfinite(req.watts_per_node) || req.watts_per_node < 0)
        throw Error("cannot plan " + w.name + ": gpus_per_node, price_per_gpu_hour and watts_per_node must be >= 0");
    if (!allreduce && req.min_nodes > 1)
        throw Error("cannot plan " + w.name + " on " + nodes_str(req.min_nodes) +
                    ": " + kNoAllreduceProfile);
}


// The accuracy bound from the run history: candidates expected to lose more than
// req.max_accuracy_loss of test accuracy against the best candidate are removed
// (plan->accuracy_excluded counts them). Nothing happens without an accuracy model.
void filter_by_accuracy(const PlanRequest& req, Plan* out) {
    Plan& plan = *out;
    // Accuracy bound from the run history: the large batches that lose more than
    // max_accuracy_loss of expected test accuracy against the best candidate are not planned.
    // Only at fixed epochs: when the epochs follow the batch, epochs_to_target already buys
    // the accuracy back, and the bound would charge the same loss a second time.
    if (req.fixed_epochs && req.accuracy.known() && req.max_accuracy_loss < 1.0) {
        double best = -1;
        for (const auto& c : plan.candidates)
            if (std::isfinite(c.expected_accuracy)) best = std::max(best, c.expected_accuracy);
        if (best >= 0) {
            plan.best_expected_accuracy = best;
            const size_t before = plan.candidates.size();
            plan.candidates.erase(std::remove_if(plan.candidates.begin(), plan.candidates.end(),
                                                 [&](const Candidate& c) {
                                                     return std::isfinite(c.expected_accuracy) &&
                                                            c.expected_accuracy < best - req.max_accuracy_loss - 1e-12;
                                                 }),
                                  plan.candidates.end());
            plan.accuracy_excluded = static_cast<int>(before - plan.candidates.size());
        }
    }
}

// Marks the Pareto front of time and cost to target and sets plan->chosen by req.policy
// (time: fastest; cost: cheapest; deadline / budget: cheapest / fastest within the bound's
// upper prediction; auto: the knee of the front, Satopaa et al. 2011). Returns the reason's
// first part. Errors: tula::Error when no candidate meets a deadline or budget, or every
// prediction is non-finite.
std::string choose_candidate(const PlanRequest& req, Plan* out) {
    const Workload& w = req.workload;
    Plan& plan = *out;
    const std::vector<Candidate>& cs = plan.candidates;
    const std::vector<size_t> front = pareto_front(cs);
    for (size_t i : front) plan.candidates[i].pareto = true;
    if (front.empty()) throw Error("cannot plan " + w.name + ": every prediction is non-finite; check its profile");

    // Fastest and cheapest over all candidates; first (fewest nodes, then smallest batch) on ties.
    size_t fastest = front.front(), cheapest = front.front();
    for (size_t i = 0; i < cs.size(); ++i) {
        if (cs[i].time_to_target < cs[fastest].time_to_target ||
            (cs[i].time_to_target == cs[fastest].time_to_target && i < fastest))
            fastest = i;
        if (cs[i].cost_to_target < cs[cheapest].cost_to_target || (cs[i].cost_to_target == cs[cheapest].cost_to_target && i < cheapest)) cheapest = i;
    }
    const std::string n_cand = std::to_string(cs.size()) + " candidate" + (cs.size() == 1 ? "" : "s");
    std::string reason;
    switch (req.policy) {
        case Policy::Time:
            plan.chosen = fastest;
            reason = "fastest of " + n_cand + " (policy time): " + config_str(cs[fastest]);
            if (fastest == cheapest || cs[fastest].cost_to_target <= cs[cheapest].cost_to_target) reason += ", also the cheapest";
            else reason += ", " + tradeoff(cs[fastest], cs[cheapest], "the cheapest (" + config_str(cs[cheapest]) + ")");
            break;
        case Policy::Cost:
            plan.chosen = cheapest;
            reason = "cheapest of " + n_cand + " (policy cost): " + config_str(cs[cheapest]);
            if (fastest == cheapest || cs[cheapest].time_to_target <= cs[fastest].time_to_target)
                reason += ", also the fastest";
            else reason += "; the fastest (" + config_str(cs[fastest]) + ") is " + tradeoff(cs[fastest], cs[cheapest], "it");
            break;
        case Policy::Deadline: {
            // Cheapest whose upper bound of training time meets the deadline; ties: faster.
            size_t best = cs.size();
            for (size_t i = 0; i < cs.size(); ++i) {
                if (!(cs[i].queue_wait_seconds + cs[i].job_seconds_upper() <= req.deadline_seconds)) continue;
                if (best == cs.size() || cs[i].cost_to_target < cs[best].cost_to_target ||
                    (cs[i].cost_to_target == cs[best].cost_to_target && cs[i].time_to_target < cs[best].time_to_target))
                    best = i;
            }
            if (best == cs.size())
                throw Error("no candidate for " + w.name + " meets the deadline " + duration(req.deadline_seconds) +
                            ": the fastest (" + config_str(cs[fastest]) + ") is predicted " + duration(cs[fastest].job_seconds()) +
                            ", up to " + duration(cs[fastest].job_seconds_upper()) +
                            "; allow more time, more nodes (--max-nodes) or fewer epochs");
            plan.chosen = best;
            reason = "cheapest of " + n_cand + " that meets the deadline " + duration(req.deadline_seconds) +
                     " (upper bound " + duration(cs[best].job_seconds_upper()) + "): " + config_str(cs[best]);
            break;
        }
        case Policy::Budget: {
            // Fastest whose upper bound of cost stays within the budget; ties: cheaper.
            size_t best = cs.size();
            for (size_t i = 0; i < cs.size(); ++i) {
                if (!(cs[i].cost_upper <= req.budget)) continue;
                if (best == cs.size() || cs[i].time_to_target < cs[best].time_to_target ||
                    (cs[i].time_to_target == cs[best].time_to_target && cs[i].cost_to_target < cs[best].cost_to_target))
                    best = i;
            }
            if (best == cs.size())
                throw Error("no candidate for " + w.name + " stays within the budget " + fmt("%g", req.budget) +
                            ": the cheapest (" + config_str(cs[cheapest]) + ") is predicted to cost " +
                            fmt("%.4g", cs[cheapest].cost) + ", up to " + fmt("%.4g", cs[cheapest].cost_upper) +
                            "; raise the budget or train fewer epochs");
            plan.chosen = best;
            reason = "fastest of " + n_cand + " within the budget " + fmt("%g", req.budget) + " (cost up to " +
                     fmt("%.4g", cs[best].cost_upper) + "): " + config_str(cs[best]);
            break;
        }
        case Policy::Auto: {
            // Knee of cost (y) against time (x): along the front, sorted by increasing time,
            // the cost decreases, the orientation Kneedle's decreasing convex case expects.
            std::vector<double> x, y;
            for (size_t i : front) {
                x.push_back(cs[i].time_to_target);
                y.push_back(cs[i].cost_to_target);
            }
            size_t k = front[knee_point(x, y)];
            // Exact duplicates on the front: fewest nodes, then smallest batch.
            for (size_t i : front)
                if (cs[i].time_to_target == cs[k].time_to_target && cs[i].cost_to_target == cs[k].cost_to_target && i < k) k = i;
            plan.chosen = k;
            const size_t front_cheapest = front.back();
            const size_t front_fastest = front.front();
            const std::string head = "knee of the time/cost Pareto front (" + std::to_string(front.size()) + " point" +
                                     (front.size() == 1 ? "" : "s") + " of " + n_cand + "): ";
            if (front.size() == 1) {
                reason = "the only point on the time/cost Pareto front of " + n_cand + ": " + config_str(cs[k]) +
                         " is both the fastest and the cheapest";
            } else if (cs[k].cost_to_target <= cs[front_cheapest].cost_to_target) {
                reason = head + config_str(cs[k]) + " is the cheapest; the fastest (" + config_str(cs[front_fastest]) +
                         ") is " + tradeoff(cs[front_fastest], cs[k], "it");
            } else {
                reason = head + config_str(cs[k]) + " is " +
                         tradeoff(cs[k], cs[front_cheapest], "the cheapest (" + config_str(cs[front_cheapest]) + ")");
            }
            break;
        }
    }
    return reason;
}

// The rest of the chosen candidate's reason: its prediction, a --limit-train, the
// calibration factors that scaled it and the candidates the accuracy bound left out.
std::string explain_choice(const PlanRequest& req, const AllreduceModel* allreduce, const SyncedRatios& synced,
                           const Plan& plan) {
    const Workload& w = req.workload;
    const std::vector<Candidate>& cs = plan.candidates;
    const int64_t D = req.examples_per_epoch();
    std::string reason;
    const Candidate& ch = cs[plan.chosen];
    reason += "; predicted " + duration(ch.total_seconds) + " for " + std::to_string(ch.epochs) + " epoch" +
              (ch.epochs == 1 ? "" : "s");
    if (req.convergence.e_min > 0 && !req.fixed_epochs)  // the epochs to a target accuracy (convergence_from_history)
        reason += " (to test accuracy " + fmt("%.4g", req.convergence.target_accuracy) + " at batch " +
                  std::to_string(ch.global_batch) + ")";
    else if (ch.epochs != req.epochs)
        reason += " (" + std::to_string(req.epochs) + " at batch " + std::to_string(plan.reference_batch) + " -> " +
                  std::to_string(ch.epochs) + " at batch " + std::to_string(ch.global_batch) + ")";
    const int64_t held_out = req.examples.held_out(w);
    if (ch.evaluation_seconds > 0)
        reason += " and " + duration(ch.evaluation_seconds) + " evaluating the test set" +
                  (held_out > 0 ? " and the validation split" : "") + " after them";
    reason += ", " + fmt("%.3g", ch.node_hours) + " node-hours";
    if (D < w.train_examples)
        reason += "; " + std::to_string(D) + " of the " + std::to_string(w.train_examples) +
                  " training examples per epoch (tula-train " +
                  (req.examples.limited_train(w) < w.train_examples ? "--limit-train" : "") +
                  (req.examples.limited_train(w) < w.train_examples && held_out > 0 ? ", " : "") +
                  (held_out > 0 ? "--val-split " + std::to_string(held_out) : "") + ")";
    if (!allreduce) reason += std::string("; only 1 node considered: ") + kNoAllreduceProfile;
    const TimeCalibration& cal = req.calibration;
    // "N finished K-node run(s)" when the runs of the chosen shape serve, else of its kind
    const int K = ch.nodes, R = std::max(1, ch.ranks_per_node), ranks = K * R;
    const std::string shape = std::to_string(K) + "-node " + (R > 1 ? std::to_string(R) + "-rank-per-node " : "");
    auto runs_text = [&](int n) {
        const std::string kind = cal.own_nodes(K, R) ? shape
                                 : cal.own_kind(K, R) ? (ranks <= 1 ? "single-node " : "multi-node ")
                                                      : "";
        return std::to_string(n) + " finished " + kind + "run" + (n == 1 ? "" : "s");
    };
    const std::string prof = planner_detail::synced_shape_str(synced, K, R);
    const double run_factor = cal.factor_at(K, R, ch.local_batch);
    const char* curve = cal.by_local_batch(K, R) ? ", interpolated over their local batches" : "";
    if (ch.synced_profile && cal.own_kind(K, R)) {
        reason += "; times x" + fmt("%.3g", ch.time_factor) + ": the synchronized-step profile of " + prof + " (x" +
                  fmt("%.3g", ComputeModel::synced_factor_at(synced, K, R, ch.local_batch)) + ") and " +
                  runs_text(cal.runs_for(K, R)) + " (x" + fmt("%.3g", run_factor) + ", measured / profiled" + curve + ")";
    } else if (ch.synced_profile) {
        reason += "; times x" + fmt("%.3g", ch.time_factor) + " from the synchronized-step profile of " + prof +
                  " (measured / modelled; no finished run on " + std::to_string(K) + " nodes" +
                  (R > 1 ? " of " + std::to_string(R) + " ranks" : std::string()) +
                  " and fewer than 2 finished multi-node runs to calibrate it)";
    } else if (cal.runs > 0) {
        reason += "; times x" + fmt("%.3g", run_factor) + " from " + runs_text(cal.runs_for(K, R)) +
                  " (measured / modelled" + curve + ")";
    }
    if (plan.accuracy_excluded > 0)
        reason += "; " + std::to_string(plan.accuracy_excluded) + " candidate" +
                  (plan.accuracy_excluded == 1 ? "" : "s") + " left out: expected test accuracy more than " +
                  fmt("%.3g", req.max_accuracy_loss * 100) + " points below the best (" +
                  fmt("%.1f", plan.best_expected_accuracy * 100) + " %, run history; max_accuracy_loss in tula.conf)";
    return reason;
}

}  // namespace

Plan make_site_plan(const PlanRequest& req, const std::vector<PartitionTarget>& targets) {
    const Workload& w = req.workload;
    const AllreduceModel* any_allreduce = nullptr;
    for (const PartitionTarget& t : targets) {
        if (t.allreduce) any_allreduce = &*t.allreduce;
        const PartitionConf& p = t.conf;
        if (!std::isfinite(p.node_hour_price()) || p.price_per_node_hour < 0 || p.price_per_gpu_hour < 0 ||
            p.gpus_per_node < 0 || p.ranks_per_node < 1 || p.nodes < 1 || !(p.watts_per_node >= 0) ||
            !(t.compute_factor > 0) || !(t.upper_factor >= 1))
            throw Error("cannot plan " + w.name + " on partition " + p.name +
                        ": its nodes, ranks, prices and watts must be finite and >= 0 (nodes and ranks >= 1)");
    }
    if (targets.empty()) throw Error("cannot plan " + w.name + ": the site has no partition");
    check_plan_request(req, any_allreduce);
    Plan plan;
    plan.gamma = req.overlap.gamma;
    plan.allreduce_bucket_bytes = req.overlap.bucket_bytes;
    plan.last_batch = w.last_batch;
    plan.calibration = req.calibration;
    plan.convergence = req.convergence;
    plan.fixed_epochs = req.fixed_epochs;
    plan.train_examples = req.examples_per_epoch();
    int smallest = 0;
    for (int b : req.global_batches)
        if (b > 0 && (smallest == 0 || b < smallest)) smallest = b;
    plan.reference_batch = req.reference_batch > 0 ? req.reference_batch : std::max(1, smallest);
    // The one prediction of each partition (predict.hpp): its models, the overlap and the runs'
    // calibration, with the synchronized-step profile's ratios per shape, and the step model of
    // the runs on the partition's class.
    std::vector<Predictor> predictors;
    std::string first_error;
    for (const PartitionTarget& t : targets) {
        predictors.emplace_back(t, w, req.overlap, req.calibration, req.interval_level);
        predictors.back().set_step_fit(find_step_fit(req.step_fits, t.conf.hardware_class));
        predictors.back().set_evaluated_examples(req.examples.tested(w), req.examples.held_out(w));
        if (!t.left_out.empty()) {
            plan.left_out.push_back(t.conf.name + ": " + t.left_out);
            continue;
        }
        try {
            planner_detail::enumerate_partition(req, predictors.back(), &plan, targets.size() - predictors.size());
        } catch (const Error& e) {
            if (targets.size() == 1) throw;  // one partition: its reason is the whole answer
            if (first_error.empty()) first_error = e.what();
            std::string why = e.what();
            if (why.rfind("tula: ", 0) == 0) why.erase(0, 6);  // one "tula: " on the line that shows it
            plan.left_out.push_back(t.conf.name + ": " + why);
        }
    }
    if (plan.candidates.empty()) {
        std::string all;
        for (const std::string& l : plan.left_out) all += (all.empty() ? "" : "; ") + l;
        throw Error("no partition has a feasible candidate for " + w.name + ": " + all);
    }
    filter_by_accuracy(req, &plan);
    std::string reason = choose_candidate(req, &plan);
    const Candidate& ch = plan.candidates[plan.chosen];
    size_t ti = 0;
    while (ti + 1 < targets.size() && targets[ti].conf.name != ch.partition) ++ti;
    const PartitionTarget& t = targets[ti];
    reason += explain_choice(req, t.allreduce ? &*t.allreduce : nullptr, predictors[ti].synced(), plan);
    if (!ch.scaled_from.empty())
        reason += "; partition " + ch.partition + " has no profile of its own: predicted from class " + ch.scaled_from +
                  " (compute x" + fmt("%.3g", t.compute_factor) + " by the published figures, interval upper end x" +
                  fmt("%.3g", t.upper_factor) + ")";
    if (ch.ranks_per_node > 1) {
        reason += "; " + std::to_string(ch.ranks_per_node) + " ranks per node, within-node allreduce ";
        if (ch.intra_node_source == "fit")
            reason += "at " + fmt("%.4g", ch.intra_node_bandwidth / 1e9) + " GB/s fitted from the within-node profile";
        else if (ch.intra_node_source == "tula.conf")
            reason += "at " + fmt("%.4g", ch.intra_node_bandwidth / 1e9) + " GB/s from tula.conf's intra_node_bandwidth";
        else
            reason += "not modelled (no within-node allreduce profile and no intra_node_bandwidth in tula.conf)";
    }
    if (!plan.left_out.empty()) {
        reason += "; left out: ";
        for (size_t i = 0; i < plan.left_out.size(); ++i) reason += (i ? "; " : "") + plan.left_out[i];
    }
    plan.reason = reason;
    plan.time_limit_minutes = candidate_time_limit(ch, req.time_margin, req.time_overhead, t.conf.max_time_minutes);
    return plan;
}

int candidate_time_limit(const Candidate& c, double margin, double overhead, int max_time_minutes) {
    const double allowance = c.signal_seconds > 0 ? c.signal_seconds + kSlurmSignalResolution : 0.0;
    const int m = slurm_time_limit_minutes(std::max(c.job_seconds(), c.job_seconds_upper()), margin, overhead + allowance);
    return max_time_minutes > 0 ? std::min(m, max_time_minutes) : m;
}

int candidate_time_min(const Candidate& c, int time_limit_minutes) {
    return time_min_minutes(c.startup_seconds, c.epoch_with_evaluation_seconds(), c.signal_seconds, time_limit_minutes);
}

std::string hole_phrase(const HoleStart& h) {
    const std::string head = "starts in a backfill hole of " + duration(h.seconds) + " in " + duration(h.wait_seconds);
    const std::string tail = ": result in " + duration(h.time_to_result) + " instead of " + duration(h.full_seconds);
    auto parts = [](int n) { return std::to_string(n) + (n == 1 ? " part" : " parts"); };
    if (h.rest_parts <= 0) return head + " and finishes in it in " + parts(h.hole_parts) + tail;
    return head + " and trains " + duration(h.train_seconds) + " in " + parts(h.hole_parts) + ", then the rest (" +
           duration(h.rest_train_seconds) + ", " + parts(h.rest_parts) + ") starts in " +
           duration(h.rest_wait_seconds) + tail;
}

void apply_queue_starts(Plan* plan, const std::vector<QueueStart>& starts, const PolicySpec& policy,
                       const std::string& workload, double margin, double overhead,
                       const std::vector<PartitionConf>& partitions) {
    Plan& p = *plan;
    const size_t old_choice = p.chosen;
    const std::string old_reason = p.reason;
    bool any_wait = false;
    if (starts.size() != p.candidates.size())
        throw Error("apply_queue_starts: " + std::to_string(starts.size()) + " starts for " +
                    std::to_string(p.candidates.size()) + " candidates");
    auto seconds = [](double x) { return std::isfinite(x) && x > 0 ? x : 0.0; };
    for (size_t i = 0; i < starts.size(); ++i) {
        Candidate& c = p.candidates[i];
        c.queue_wait_seconds = seconds(starts[i].wait_seconds);
        c.time_to_target = c.queue_wait_seconds + c.job_seconds();
        c.hole = HoleStart{};
        if (seconds(starts[i].hole_seconds) > 0) {
            c.hole = hole_time_to_result(starts[i].hole_wait_seconds, starts[i].hole_seconds, c.queue_wait_seconds,
                                         c.job_seconds(), c.startup_seconds, c.signal_seconds,
                                         starts[i].part_seconds);
            if (c.hole.used) c.time_to_target = c.hole.time_to_result;
        }
        any_wait = any_wait || c.queue_wait_seconds > 0;
        c.pareto = false;
    }
    PlanRequest req;  // what choose_candidate reads: the workload's name and the policy
    req.workload.name = workload;
    req.policy = policy.policy;
    req.deadline_seconds = policy.deadline_seconds;
    req.budget = policy.budget;
    const std::string reason = choose_candidate(req, &p);
    const Candidate& ch = p.choice();
    int max_time = 0;
    for (const PartitionConf& part : partitions)
        if (part.name == ch.partition) max_time = part.max_time_minutes;
    const std::string ttr = "time to result: the expected wait in the queue plus the predicted training and evaluation";
    if (p.chosen == old_choice)  // the same choice: its full explanation stands
        p.reason = any_wait ? old_reason + "; also by " + ttr : old_reason;
    else
        p.reason = reason + " (" + ttr + ")";
    if (ch.hole.used) p.reason += "; " + hole_phrase(ch.hole);
    p.time_limit_minutes = candidate_time_limit(ch, margin, overhead, max_time);
}

PlanRequest make_plan_request(const Config& cfg, const Workload& w, int epochs, int max_nodes, Policy policy) {
    PlanRequest r;
    r.workload = w;
    r.epochs = epochs > 0 ? epochs : cfg.default_epochs;
    r.min_nodes = 1;
    int site_max = 1;  // the largest partition (cfg.max_nodes for a file without sections)
    for (const PartitionConf& p : cfg.site_partitions()) site_max = std::max(site_max, p.nodes);
    r.max_nodes = max_nodes > 0 ? std::min(max_nodes, site_max) : site_max;
    r.global_batches = cfg.global_batches;
    r.price_per_node_hour = cfg.price_per_node_hour;
    r.gpus_per_node = cfg.gpus_per_node;
    r.exclusive = cfg.exclusive;
    r.price_per_gpu_hour = cfg.price_per_gpu_hour;
    r.watts_per_node = cfg.watts_per_node;
    r.time_margin = cfg.time_margin;
    r.time_overhead = cfg.time_overhead;
    r.policy = policy;
    r.device_memory_bytes = cfg.device_memory_bytes;
    r.convergence.noise_scale = cfg.noise_scale;
    r.max_accuracy_loss = cfg.max_accuracy_loss;
    r.fixed_epochs = cfg.fixed_epochs;
    try {
        r.memory = MemoryModel::from_workload(w);
    } catch (const Error&) {
        r.memory.reset();  // activation size unknown: memory is not modelled
    }
    return r;
}

std::vector<Plan> plan_node_counts(const Config& cfg, const PlanData& data, int epochs, int max_nodes,
                                   const std::vector<int>& counts, const PolicySpec& policy,
                                   std::vector<std::string>* warnings, const EpochExamples& examples) {
    if ((policy.policy == Policy::Deadline && !(policy.deadline_seconds > 0)) ||
        (policy.policy == Policy::Budget && !(policy.budget > 0)))
        throw Error("the deadline or budget of the policy must be > 0");
    std::vector<std::string> local;
    std::vector<std::string>* warn = warnings ? warnings : &local;
    const Workload* w = &data.workload;
    const std::string& workload = w->name;
    const std::vector<RunRecord>& runs = data.runs;
    // The time models: per hardware class and pooled, the overlap and the calibration of the runs.
    TimeModels profile_models = fit_profile_models(cfg, *w, data.compute, data.allreduce, Corrections{}, warn);
    profile_models.fit_cache = data.fit_cache;
    profile_models.class_exchange = data.class_exchange;
    const TimeModels tm = fit_run_models(profile_models, runs, warn);
    const AllreduceModel* ar = tm.allreduce ? &*tm.allreduce : nullptr;
    const std::string& allreduce_error = tm.allreduce_error;
    const std::vector<PartitionTarget>& targets = tm.targets;
    PlanRequest req = make_plan_request(cfg, *w, epochs, max_nodes, policy.policy);
    req.deadline_seconds = policy.deadline_seconds;
    req.budget = policy.budget;
    req.reference_batch = policy.reference_batch;
    req.fixed_epochs = req.fixed_epochs || policy.fixed_epochs;
    req.examples = examples;
    req.overlap = tm.overlap;
    req.calibration = tm.calibration;
    req.step_fits = tm.step_fits;
    // The run history: accuracy (of the runs comparable with the job: its epochs, the full
    // data set unless it trains on part of it) and the epochs to the target.
    req.accuracy = AccuracyModel::fit(runs, req.epochs, req.examples_per_epoch(), w->train_examples);
    req.convergence = ConvergenceModel::from_runs(runs, cfg.noise_scale);  // measured B_noise, else tula.conf's
    {  // B_crit fitted to the runs' epochs to the target (given, or the requested epochs' at B_ref); prior: above
        int ref = req.reference_batch;
        if (ref <= 0)  // as enumerate_candidates: the smallest global batch
            for (int b : req.global_batches)
                if (b > 0 && (ref <= 0 || b < ref)) ref = b;
        req.convergence =
            history_convergence(runs, *w, policy.target_accuracy, ref, req.epochs, req.convergence, warn,
                                policy.optimizer);
    }
    const PlanRequest& free_req = req;  // over every node count, for a given one's consistency below
    std::vector<Plan> plans;
    for (const int fixed_nodes : counts) {
        PlanRequest r = req;
        if (fixed_nodes > 0) {
            if (fixed_nodes > 1 && !ar)
                throw Error("cannot plan " + workload + " on " + nodes_str(fixed_nodes) + ": " +
                            (allreduce_error.empty() ? std::string(kNoAllreduceProfile)
                                                     : allreduce_error));
            r.min_nodes = r.max_nodes = fixed_nodes;
            // The node count is given: round each global batch down to a multiple of it (at
            // least one example per node) so that an odd node count still has candidates.
            for (int& b : r.global_batches)
                if (b % fixed_nodes != 0) b = std::max(fixed_nodes, b / fixed_nodes * fixed_nodes);
        }
        if (targets.size() == 1) check_plan_request(r, ar);  // a single partition's messages as before
        // A given node count is the job's allocation: tula.conf's max_nodes does not cut it.
        std::vector<PartitionTarget> ts = targets;
        for (PartitionTarget& t : ts) t.conf.nodes = std::max(t.conf.nodes, fixed_nodes);
        plans.push_back(make_site_plan(r, ts));
        if (fixed_nodes > 0) keep_free_choice(plans.back(), free_req, targets, fixed_nodes);
    }
    // Online refit: the newest runs checked against the interval of the models without them.
    for (const RunCheck& c : check_runs(profile_models, runs, kCheckedRuns, req.interval_level))
        if (c.flagged)
            for (Plan& p : plans) p.flagged_runs.push_back(c);
    return plans;
}

}  // namespace tula
