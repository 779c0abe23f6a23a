// libtula: the critical batch fitted from the run history (see convergence_fit.hpp).
#include "tula/convergence_fit.hpp"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_vector.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "tula/error.hpp"

namespace tula {

EpochsSelection epochs_to_target_points(const std::vector<RunRecord>& runs, const Workload& w, double target) {
    EpochsSelection sel;
    std::vector<const RunRecord*> use;
    std::map<std::string, double> best;  // optimizer -> best last-epoch accuracy
    for (const auto& r : runs) {
        if (r.workload != w.name || r.global_batch < 1) continue;
        if (r.train_examples > 0 && r.train_examples < w.train_examples) {
            ++sel.limited;
            continue;
        }
        const auto& acc = r.epoch_test_accuracy;
        if (acc.empty() || std::any_of(acc.begin(), acc.end(), [](double a) { return !std::isfinite(a); })) {
            ++sel.no_curve;
            continue;
        }
        use.push_back(&r);
        double& b = best[r.optimizer];
        b = std::max(b, acc.back());
    }
    for (const RunRecord* r : use) {
        const auto& acc = r->epoch_test_accuracy;
        if (acc.back() < AccuracyModel::kDivergedFraction * best[r->optimizer]) {
            ++sel.diverged;
            continue;
        }
        const auto hit = std::find_if(acc.begin(), acc.end(), [&](double a) { return a >= target; });
        if (hit == acc.end()) {
            ++sel.short_of;
            continue;
        }
        sel.points.push_back({r->global_batch, static_cast<double>(hit - acc.begin() + 1), r->optimizer});
    }
    return sel;
}

namespace {

// The runs of one global batch as the cost sees them: n runs, S1 = sum 1/E_i, S2 = sum
// 1/E_i^2. Their part of sum_i (m/E_i - 1)^2 is S2 (m - S1/S2)^2 + n - S1^2/S2, so the
// residual sqrt(S2) (m - S1/S2) carries them (the rest is a constant).
struct BatchGroup {
    double batch = 0;
    double n = 0, s1 = 0, s2 = 0;
};

struct FitData {
    const std::vector<BatchGroup>* groups;
};

// x = (ln E_min, ln B_crit)
int residual_f(const gsl_vector* x, void* params, gsl_vector* f) {
    const auto& g = *static_cast<const FitData*>(params)->groups;
    const double e = std::exp(gsl_vector_get(x, 0)), bc = std::exp(gsl_vector_get(x, 1));
    for (size_t i = 0; i < g.size(); ++i) {
        const double m = e * (1.0 + g[i].batch / bc);
        gsl_vector_set(f, i, g[i].s2 > 0 ? std::sqrt(g[i].s2) * (m - g[i].s1 / g[i].s2) : 0.0);
    }
    return GSL_SUCCESS;
}

int residual_df(const gsl_vector* x, void* params, gsl_matrix* J) {
    const auto& g = *static_cast<const FitData*>(params)->groups;
    const double e = std::exp(gsl_vector_get(x, 0)), bc = std::exp(gsl_vector_get(x, 1));
    for (size_t i = 0; i < g.size(); ++i) {
        const double w = g[i].s2 > 0 ? std::sqrt(g[i].s2) : 0.0;
        gsl_matrix_set(J, i, 0, w * e * (1.0 + g[i].batch / bc));  // d m / d ln E_min
        gsl_matrix_set(J, i, 1, -w * e * g[i].batch / bc);          // d m / d ln B_crit
    }
    return GSL_SUCCESS;
}

// The start: weighted least squares of c_g = S1/S2 on E_min + beta B with weights S2 (the
// same cost, linear in E_min and beta = E_min / B_crit), kept inside the allowed range.
void linear_start(const std::vector<BatchGroup>& g, double lo, double hi, double* e_min, double* b_crit) {
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& q : g) {
        if (!(q.s2 > 0)) continue;
        const double c = q.s1 / q.s2;
        sw += q.s2, sx += q.s2 * q.batch, sy += q.s2 * c, sxx += q.s2 * q.batch * q.batch, sxy += q.s2 * q.batch * c;
    }
    const double det = sw * sxx - sx * sx;
    double a = det > 0 ? (sxx * sy - sx * sxy) / det : sy / sw;
    double beta = det > 0 ? (sw * sxy - sx * sy) / det : 0.0;
    if (!(a > 0)) a = 0.5 * sy / sw;  // a penalty steeper than linear: start near the small batches
    double bc = beta > 0 ? a / beta : hi;
    *e_min = a;
    *b_crit = std::min(hi, std::max(lo, bc));
}

// One fit of the groups with workspace `w` (sized for g.size() residuals). Returns false when
// GSL fails or the result is not finite; *e_min, *b_crit and *cost are then untouched.
bool fit_groups(const std::vector<BatchGroup>& g, gsl_multifit_nlinear_workspace* w, double lo, double hi,
                double* e_min, double* b_crit, double* cost) {
    FitData data{&g};
    gsl_multifit_nlinear_fdf fdf;
    fdf.f = residual_f;
    fdf.df = residual_df;
    fdf.fvv = nullptr;
    fdf.n = g.size();
    fdf.p = 2;
    fdf.params = &data;
    double e0 = 0, b0 = 0;
    linear_start(g, lo, hi, &e0, &b0);
    double x0[2] = {std::log(e0), std::log(b0)};
    gsl_vector_view xv = gsl_vector_view_array(x0, 2);
    if (gsl_multifit_nlinear_init(&xv.vector, &fdf, w) != GSL_SUCCESS) return false;
    int info = 0;
    const int st = gsl_multifit_nlinear_driver(100, 1e-10, 1e-10, 0.0, nullptr, nullptr, &info, w);
    // GSL_ENOPROG: no step lowers the cost any further, the position is the optimum to machine
    // precision (the usual case here, as the linear start minimises the same cost when both of
    // its coefficients come out positive); GSL_EMAXITER: the last position, checked below.
    if (st != GSL_SUCCESS && st != GSL_EMAXITER && st != GSL_ENOPROG) return false;
    const gsl_vector* x = gsl_multifit_nlinear_position(w);
    const double e = std::exp(gsl_vector_get(x, 0)), bc = std::exp(gsl_vector_get(x, 1));
    double c = 0;
    if (gsl_blas_ddot(gsl_multifit_nlinear_residual(w), gsl_multifit_nlinear_residual(w), &c) != GSL_SUCCESS)
        return false;
    if (!std::isfinite(e) || !(e > 0) || !std::isfinite(bc) || !(bc > 0) || !std::isfinite(c)) return false;
    // B_crit beyond the range: no measurable penalty (or nothing but penalty); E_min refitted
    // at the bound is the weighted mean of c_g / (1 + B_g / B_crit).
    if (bc < lo || bc > hi) {
        const double b = bc < lo ? lo : hi;
        double num = 0, den = 0;
        for (const auto& q : g) {
            const double f = 1.0 + q.batch / b;
            num += q.s1 * f, den += q.s2 * f * f;
        }
        *e_min = num / den;
        *b_crit = b;
    } else {
        *e_min = e;
        *b_crit = bc;
    }
    *cost = c;
    return true;
}

// Groups `idx` (indices into points; repeats allowed) by batch into `g`, whose batches are
// already set (all of the points' distinct batches, ascending); point i falls in group
// group_of[i]. Returns how many groups have runs.
int fill_groups(const std::vector<EpochsToTarget>& points, const std::vector<size_t>& idx,
                const std::vector<size_t>& group_of, std::vector<BatchGroup>* g) {
    for (auto& q : *g) q.n = q.s1 = q.s2 = 0;
    for (size_t i : idx) {
        BatchGroup& q = (*g)[group_of[i]];
        const double inv = 1.0 / points[i].epochs;
        q.n += 1, q.s1 += inv, q.s2 += inv * inv;
    }
    int used = 0;
    for (const auto& q : *g) used += q.n > 0;
    return used;
}

// Errors: tula::Error unless `target` is a test accuracy in (0, 1].
void check_target(double target) {
    if (!(target > 0 && target <= 1))
        throw Error("the target accuracy must be a fraction in (0, 1], e.g. 0.75 for 75 %, not " + std::to_string(target));
}

// The p-quantile of v (not empty) by linear interpolation of the order statistics.
double quantile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    const double h = p * static_cast<double>(v.size() - 1);
    const size_t i = static_cast<size_t>(std::floor(h));
    return i + 1 < v.size() ? v[i] + (h - static_cast<double>(i)) * (v[i + 1] - v[i]) : v.back();
}

}  // namespace

CriticalBatchFit fit_critical_batch(const std::vector<EpochsToTarget>& points, int resamples, uint64_t seed) {
    gsl_set_error_handler_off();
    std::map<int, size_t> slot;
    for (const auto& p : points) {
        if (p.global_batch < 1 || !std::isfinite(p.epochs) || !(p.epochs > 0))
            throw Error("a run for the critical-batch fit has global batch " + std::to_string(p.global_batch) +
                        " and " + std::to_string(p.epochs) +
                        " epochs to the target; the batch must be >= 1 and the epochs a number > 0");
        slot.emplace(p.global_batch, 0);
    }
    if (slot.size() < 2)
        throw Error("the critical-batch fit needs runs at 2 or more global batches, the history has " +
                    std::to_string(slot.size()) + "; run the workload at another batch size");
    std::vector<BatchGroup> g;
    for (auto& [b, i] : slot) {
        i = g.size();
        g.push_back({static_cast<double>(b), 0, 0, 0});
    }
    std::vector<size_t> group_of(points.size());
    for (size_t i = 0; i < points.size(); ++i) group_of[i] = slot.at(points[i].global_batch);
    const double lo = CriticalBatchFit::kMinFactor * g.front().batch, hi = CriticalBatchFit::kMaxFactor * g.back().batch;
    gsl_multifit_nlinear_parameters par = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace* w = gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &par, g.size(), 2);
    if (!w) throw Error("out of memory in the critical-batch fit");
    CriticalBatchFit fit;
    try {
        std::vector<size_t> idx(points.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        fill_groups(points, idx, group_of, &g);
        double cost = 0;
        if (!fit_groups(g, w, lo, hi, &fit.e_min, &fit.b_crit, &cost))
            throw Error("the critical-batch fit (GSL nonlinear least squares) failed on " + std::to_string(points.size()) +
                        " runs; the epochs to the target may be inconsistent");
        fit.runs = static_cast<int>(points.size());
        fit.batches = static_cast<int>(g.size());
        double ss = 0;
        for (const auto& p : points) ss += std::pow(fit.epochs(p.global_batch) / p.epochs - 1.0, 2);
        fit.rms_rel = std::sqrt(ss / static_cast<double>(points.size()));
        std::mt19937_64 rng(seed);
        std::vector<double> es, bs;
        const unsigned __int128 n = points.size();
        for (int r = 0; r < resamples; ++r) {
            for (auto& i : idx) i = static_cast<size_t>((static_cast<unsigned __int128>(rng()) * n) >> 64);
            if (fill_groups(points, idx, group_of, &g) < 2) continue;
            double e = 0, b = 0, c = 0;
            if (!fit_groups(g, w, lo, hi, &e, &b, &c)) continue;
            es.push_back(e);
            bs.push_back(b);
        }
        fit.resamples = static_cast<int>(es.size());
        fit.e_min_low = fit.e_min_high = fit.e_min;
        fit.b_crit_low = fit.b_crit_high = fit.b_crit;
        if (!es.empty()) {
            const double a = (1.0 - CriticalBatchFit::kLevel) / 2.0;
            fit.e_min_low = quantile(es, a), fit.e_min_high = quantile(es, 1.0 - a);
            fit.b_crit_low = quantile(bs, a), fit.b_crit_high = quantile(bs, 1.0 - a);
        }
    } catch (...) {
        gsl_multifit_nlinear_free(w);
        throw;
    }
    gsl_multifit_nlinear_free(w);
    return fit;
}

ConvergenceModel convergence_from_history(const std::vector<RunRecord>& runs, const Workload& w, double target,
                                          const ConvergenceModel& prior, const std::string& optimizer,
                                          std::string* note) {
    if (target == 0) return prior;
    check_target(target);
    auto say = [&](const std::string& s) {
        if (note) *note = s;
    };
    const EpochsSelection sel = epochs_to_target_points(runs, w, target);
    // one optimizer: the one asked for, else the one whose runs cover the most batches
    std::map<std::string, std::pair<std::set<int>, int>> by;  // optimizer -> (batches, runs)
    for (const auto& p : sel.points) {
        auto& e = by[p.optimizer];
        e.first.insert(p.global_batch);
        ++e.second;
    }
    std::string pick = optimizer;
    if (pick.empty()) {
        size_t nb = 0;
        int nr = 0;
        for (const auto& [o, e] : by)
            if (e.first.size() > nb || (e.first.size() == nb && e.second > nr)) pick = o, nb = e.first.size(), nr = e.second;
    }
    std::vector<EpochsToTarget> pts;
    for (const auto& p : sel.points)
        if (p.optimizer == pick) pts.push_back(p);
    char acc[32];
    std::snprintf(acc, sizeof acc, "%.4g", target);
    const std::string left = " (left out: " + std::to_string(sel.limited) + " on part of the data set, " +
                             std::to_string(sel.diverged) + " diverged, " + std::to_string(sel.short_of) +
                             " short of the target, " + std::to_string(sel.no_curve) + " without per-epoch accuracy)";
    ConvergenceModel m = prior;
    m.target_accuracy = target;
    if (pts.empty()) {
        say(std::string("no run of ") + w.name + " reached test accuracy " + acc + left +
            "; the epochs follow the requested ones with B_noise " + prior.origin());
        return m;
    }
    m.fit_runs = static_cast<int>(pts.size());
    m.fit_optimizer = pick;
    std::set<int> batches;
    for (const auto& p : pts) batches.insert(p.global_batch);
    m.fit_batches = static_cast<int>(batches.size());
    if (batches.size() < 2) {
        std::vector<double> e;
        for (const auto& p : pts) e.push_back(p.epochs);
        m.e_min = m.e_min_low = m.e_min_high = median(e) / (1.0 + pts.front().global_batch / m.noise_scale);
        say("the runs reaching test accuracy " + std::string(acc) + " are all at global batch " +
            std::to_string(pts.front().global_batch) + left + ": E_min from them, B_noise " + prior.origin() +
            "; run another batch size to fit B_crit");
        return m;
    }
    const CriticalBatchFit f = fit_critical_batch(pts);
    m.noise_scale = f.b_crit;
    m.noise_scale_low = f.b_crit_low;
    m.noise_scale_high = f.b_crit_high;
    m.confidence = f.resamples > 0 ? CriticalBatchFit::kLevel : 0.0;
    m.measured_runs = 0;
    m.source = "fit";
    m.e_min = f.e_min;
    m.e_min_low = f.e_min_low;
    m.e_min_high = f.e_min_high;
    char line[160];
    std::snprintf(line, sizeof line, "B_crit %.4g examples (%.4g..%.4g), E_min %.4g epochs (%.4g..%.4g)", f.b_crit,
                  f.b_crit_low, f.b_crit_high, f.e_min, f.e_min_low, f.e_min_high);
    say(std::string(line) + " to test accuracy " + acc + ", " + m.origin() + left);
    return m;
}

double reference_accuracy(const std::vector<RunRecord>& runs, const Workload& w, int batch, int epochs) {
    if (epochs < 1) return 0.0;
    std::vector<double> acc;
    for (const auto& r : runs) {
        if (r.workload != w.name || r.global_batch != batch) continue;
        if (r.train_examples > 0 && r.train_examples < w.train_examples) continue;
        const auto& c = r.epoch_test_accuracy;
        if (c.size() < static_cast<size_t>(epochs) ||
            std::any_of(c.begin(), c.end(), [](double a) { return !std::isfinite(a); }))
            continue;
        acc.push_back(c[static_cast<size_t>(epochs) - 1]);
    }
    if (acc.empty()) return 0.0;
    const double best = *std::max_element(acc.begin(), acc.end());
    acc.erase(std::remove_if(acc.begin(), acc.end(),
                             [&](double a) { return a < AccuracyModel::kDivergedFraction * best; }),
              acc.end());
    const double m = median(acc);
    return m > 0 && m <= 1 ? m : 0.0;
}

ConvergenceModel history_convergence(const std::vector<RunRecord>& runs, const Workload& w, double target,
                                     int ref_batch, int epochs, const ConvergenceModel& prior,
                                     std::vector<std::string>* warnings, const std::string& optimizer) {
    if (target != 0) check_target(target);
    std::string note;
    const double goal = target > 0 ? target : reference_accuracy(runs, w, ref_batch, epochs);
    if (!(goal > 0)) return prior;
    ConvergenceModel m;
    try {
        m = convergence_from_history(runs, w, goal, prior, optimizer == "auto" ? "" : optimizer, &note);
    } catch (const Error& e) {  // a failed fit: plan with the prior rather than not at all
        if (warnings) warnings->push_back(std::string(e.what()) + "; the epochs follow B_noise " + prior.origin());
        return prior;
    }
    if (target > 0) {
        if (warnings && m.fit_batches < 2) warnings->push_back(note);
        return m;
    }
    if (m.fit_batches < 2) return prior;  // the requested epochs at the reference batch, B_noise as before
    m.e_min = m.e_min_low = m.e_min_high = 0;  // relative: the requested epochs at the reference batch
    return m;
}

}  // namespace tula
