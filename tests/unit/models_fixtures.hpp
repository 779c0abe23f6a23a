// Helpers of the models unit tests (test_libtula_models.cpp, test_libtula_calibration.cpp,
// test_libtula_step_fit.cpp and test_libtula_validate.cpp), written once.
#pragma once
#include <cppunit/extensions/HelperMacros.h>
#include <gsl/gsl_cdf.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>
#include "tula/error.hpp"
#include "tula/models.hpp"

namespace models_test {

template <class F>
bool throws(F f) {
    try {
        f();
    } catch (const tula::Error&) {
        return true;
    }
    return false;
}

// Least squares y = b x through the origin: b = sum(x y) / sum(x^2), the reference.
inline double slope_through_origin(const std::vector<double>& x, const std::vector<double>& y) {
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sxy += x[i] * y[i];
        sxx += x[i] * x[i];
    }
    return sxy / sxx;
}

// Closed-form ordinary least squares y = a + b x (normal equations), the reference.
inline void ols_line(const std::vector<double>& x, const std::vector<double>& y, double* a, double* b) {
    const double n = static_cast<double>(x.size());
    double sx = 0, sy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sx += x[i];
        sy += y[i];
    }
    const double mx = sx / n, my = sy / n;
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
    }
    *b = sxy / sxx;
    *a = my - *b * mx;
}

// Closed-form least squares y = p u + q v without intercept (2x2 normal equations, Cramer).
inline void ols_two(const std::vector<double>& u, const std::vector<double>& v, const std::vector<double>& y, double* p,
             double* q) {
    double uu = 0, uv = 0, vv = 0, uy = 0, vy = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        uu += u[i] * u[i];
        uv += u[i] * v[i];
        vv += v[i] * v[i];
        uy += u[i] * y[i];
        vy += v[i] * y[i];
    }
    const double det = uu * vv - uv * uv;
    *p = (uy * vv - vy * uv) / det;
    *q = (uu * vy - uv * uy) / det;
}

inline tula::ComputeSample cs(int b, double t) {
    tula::ComputeSample s;
    s.workload = "w@d";
    s.local_batch = b;
    s.seconds_per_iter = t;
    s.iters = 20;
    return s;
}

// ---- A straightforward reference of ComputeModel::fit's documented one-rank fit: every split
// and every left-out knot refitted from scratch (O(n^3)), least squares by the normal equations.

// Non-negative least squares of t = t0 + t1 b: the unconstrained line when both coefficients
// are >= 0, else the better of t1 alone (through the origin) and t0 alone (the mean).
inline void ref_nnls(const std::vector<double>& x, const std::vector<double>& y, double* t0, double* t1) {
    ols_line(x, y, t0, t1);
    if (*t0 >= 0 && *t1 >= 0) return;
    double sxy = 0, sxx = 0, m = 0;
    for (size_t i = 0; i < x.size(); ++i) sxy += x[i] * y[i], sxx += x[i] * x[i], m += y[i] / x.size();
    double rs = 0, rm = 0;
    for (size_t i = 0; i < x.size(); ++i) rs += std::pow(y[i] - sxy / sxx * x[i], 2), rm += std::pow(y[i] - m, 2);
    *t0 = rs < rm ? 0 : m;
    *t1 = rs < rm ? sxy / sxx : 0;
}

struct RefModel {
    double t0 = 0, t1 = 0, t_min = 0, aic_linear = 0, aic_flat = 0, rmse = 0;
    double loo_interpolated = NAN, loo_parametric = NAN, loo_rel_rms = 0;
    bool flat = false, interpolated = false;
    double at(double b) const { return flat ? std::max(t_min, t0 + t1 * b) : t0 + t1 * b; }
};

inline double ref_aic(double sse, double n, int k, double mean_t) {
    return n * std::log(std::max(sse / n, 1e-24 * mean_t * mean_t)) + 2.0 * k;
}

// The linear or flat-then-linear form (models.hpp): AIC choice, every split tried.
inline RefModel ref_parametric(const std::vector<double>& x, const std::vector<double>& y) {
    const size_t n = x.size();
    std::vector<double> d(x);
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
    double mean_t = 0, sse = 0;
    for (double t : y) mean_t += t / n;
    RefModel m;
    ref_nnls(x, y, &m.t0, &m.t1);
    for (size_t i = 0; i < n; ++i) sse += std::pow(m.t0 + m.t1 * x[i] - y[i], 2);
    m.aic_linear = ref_aic(sse, n, 2, mean_t);
    m.aic_flat = INFINITY;
    double best = INFINITY, bt0 = 0, bt1 = 0, btmin = 0;
    for (size_t split = 1; d.size() >= 4 && n >= 5 && split + 2 <= d.size(); ++split) {
        std::vector<double> tx, ty;
        double tmin = 0, head = 0;
        for (size_t i = 0; i < n; ++i) {
            if (x[i] < d[split]) tmin += y[i], head += 1;
            else tx.push_back(x[i]), ty.push_back(y[i]);
        }
        tmin /= head;
        double a = 0, b = 0, e = 0;
        ref_nnls(tx, ty, &a, &b);
        if (!(tmin > a + b * d[0])) continue;
        for (size_t i = 0; i < n; ++i) e += std::pow(std::max(tmin, a + b * x[i]) - y[i], 2);
        if (e < best) best = e, bt0 = a, bt1 = b, btmin = tmin;
    }
    if (std::isfinite(best)) {
        m.aic_flat = ref_aic(best, n, 4, mean_t);
        if (m.aic_flat < m.aic_linear - 2) m.flat = true, m.t0 = bt0, m.t1 = bt1, m.t_min = btmin, sse = best;
    }
    m.rmse = std::sqrt(sse / n);
    return m;
}

// The whole one-rank fit: parametric form, then leave-one-out over the interior knots (at most
// kLooKnots of them: knot 1 + floor(r (I - 1) / (kLooKnots - 1)) of I interior ones).
inline RefModel ref_fit(const std::vector<double>& x, const std::vector<double>& y) {
    RefModel m = ref_parametric(x, y);
    std::map<double, std::vector<double>> by;
    for (size_t i = 0; i < x.size(); ++i) by[x[i]].push_back(y[i]);
    std::vector<std::pair<double, double>> k;
    for (auto& [b, ts] : by) {
        std::sort(ts.begin(), ts.end());
        const size_t c = ts.size();
        k.emplace_back(b, c % 2 ? ts[c / 2] : (ts[c / 2 - 1] + ts[c / 2]) / 2);
    }
    if (k.size() < 3) return m;
    const size_t I = k.size() - 2, used = std::min<size_t>(I, tula::ComputeModel::kLooKnots);
    double ei = 0, ep = 0, ei2 = 0;
    for (size_t r = 0; r < used; ++r) {
        const size_t j = used == I ? r + 1 : 1 + r * (I - 1) / (used - 1);
        const double b = k[j].first, t = k[j].second;
        const double lerp = k[j - 1].second + (b - k[j - 1].first) / (k[j + 1].first - k[j - 1].first) *
                                                  (k[j + 1].second - k[j - 1].second);
        std::vector<double> rx, ry;
        for (size_t i = 0; i < x.size(); ++i)
            if (x[i] != b) rx.push_back(x[i]), ry.push_back(y[i]);
        ei += std::fabs(lerp / t - 1), ei2 += std::pow(lerp / t - 1, 2);
        ep += std::fabs(ref_parametric(rx, ry).at(b) / t - 1);
    }
    m.loo_interpolated = 100 * ei / used;
    m.loo_parametric = 100 * ep / used;
    m.loo_rel_rms = std::sqrt(ei2 / used);
    m.interpolated = m.loo_interpolated < m.loo_parametric - 1e-6;
    return m;
}

inline tula::AllreduceSample as(int k, int64_t n, double t) {
    tula::AllreduceSample s;
    s.nodes = k;
    s.bytes = n;
    s.seconds = t;
    return s;
}

// A small workload "w@d" (lenet5's name, 1,000 parameters, 6,000 training examples) whose
// compute samples cs() gives.
inline tula::Workload wl() {
    tula::Workload w;
    w.name = "w@d";
    w.model = "lenet5";
    w.params = 1000;
    w.train_examples = 6000;
    return w;
}

// Exact ring allreduce samples on 2 and 4 nodes of 1,000 and 100,000 bytes:
// 2 (K - 1) alpha + 2 (K - 1) / K n beta seconds.
inline std::vector<tula::AllreduceSample> ring_samples(double alpha, double beta) {
    std::vector<tula::AllreduceSample> a;
    for (int k : {2, 4})
        for (int64_t n : {int64_t(1000), int64_t(100000)})
            a.push_back(as(k, n, 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * static_cast<double>(n) * beta));
    return a;
}

}  // namespace models_test
