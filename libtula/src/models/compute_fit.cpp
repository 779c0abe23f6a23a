// libtula: fitting the compute model, ComputeModel::fit (see models.hpp): the linear and
// flat-then-linear least-squares forms and the leave-one-out choice of interpolation, in
// O(n log n) time for n one-rank samples.
//
// The samples are sorted by local batch once and grouped by distinct batch; prefix sums over
// the groups of (1, b, t, b^2, b t, t^2) (b local batch, t seconds, both shifted by their
// means) give the least-squares line of any range of groups in O(1), so every split of the
// segmented regression is scored in O(1) (a table, or a binary search, finds the batch where
// its line meets the floor). Expanded sums lose digits where a fit is nearly exact (an exact
// profile's residual comes out as rounding noise of the order of 1e-16 sum t^2), so the
// kSplitRecheck best-scored splits are refitted from the samples themselves with two-pass
// sums (means first, then centred sums) and their residuals summed directly, as a refit of
// every split would: the chosen split and every reported number come from those. A fit is
// then O(n) after the sort, and the leave-one-out choice at most ComputeModel::kLooKnots fits.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tula/error.hpp"
#include "tula/models.hpp"

namespace tula {
namespace {

constexpr size_t kNone = static_cast<size_t>(-1);
// How many of the best-scored splits are refitted directly from the samples (see above).
constexpr size_t kSplitRecheck = 4;

// Sums over some samples of 1, u, v, u^2, u v, v^2 with u = b - x shift, v = t - y shift.
struct Moments {
    double n = 0, u = 0, v = 0, uu = 0, uv = 0, vv = 0;
    Moments& operator-=(const Moments& o) {
        n -= o.n, u -= o.u, v -= o.v, uu -= o.uu, uv -= o.uv, vv -= o.vv;
        return *this;
    }
};

Moments operator-(Moments a, const Moments& b) { return a -= b; }

// A line t = t0 + t1 b with t0, t1 >= 0 and its residual sum of squares (seconds^2).
struct Line {
    double t0 = 0, t1 = 0, sse = 0;
};

// The one-rank samples sorted by local batch (ties in input order), grouped by distinct
// local batch, with prefix sums of their moments over the groups.
struct Profile {
    std::vector<double> x, y;   // local batch (examples), seconds per iteration; ascending in x
    std::vector<double> batch;  // the distinct local batches, ascending
    std::vector<size_t> start;  // group g is rows [start[g], start[g + 1]); start.back() = rows
    std::vector<Moments> pre;   // pre[g]: the moments of the groups before g
    double xs = 0, ys = 0;      // the shifts: mean local batch and mean seconds
    std::vector<size_t> first_at;  // first_at[v]: the first group with batch >= v (empty: too wide)

    size_t groups() const { return batch.size(); }
    // The first group whose batch b has t0 + t1 b >= tmin for the line `f` (t1 >= 0; the
    // floor holds before it), found from the batch where the line meets the floor: O(1)
    // with first_at, else a binary search. Rounding can place a batch whose line value is
    // within an ulp of tmin on the other side, which changes its residual by as little.
    size_t crossing(const Line& f, double tmin) const {
        if (!(f.t1 > 0)) return f.t0 >= tmin ? 0 : groups();
        const double b = (tmin - f.t0) / f.t1;
        if (!(b > batch.front())) return 0;
        if (!(b <= batch.back())) return groups();
        if (!first_at.empty()) return first_at[static_cast<size_t>(std::ceil(b))];
        return static_cast<size_t>(std::lower_bound(batch.begin(), batch.end(), b) - batch.begin());
    }
    size_t rows_of(size_t g) const { return start[g + 1] - start[g]; }
    // The moments of groups [a, c) without group `skip` (kNone: none left out).
    Moments range(size_t a, size_t c, size_t skip) const {
        Moments m = pre[c] - pre[a];
        if (skip != kNone && skip >= a && skip < c) m -= pre[skip + 1] - pre[skip];
        return m;
    }
};

Profile make_profile(const std::vector<ComputeSample>& samples) {
    std::vector<size_t> order(samples.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return samples[a].local_batch < samples[b].local_batch; });
    Profile p;
    for (size_t i : order) {
        p.x.push_back(samples[i].local_batch);
        p.y.push_back(samples[i].seconds_per_iter);
    }
    const size_t n = p.x.size();
    p.xs = Eigen::Map<const Eigen::ArrayXd>(p.x.data(), static_cast<Eigen::Index>(n)).mean();
    p.ys = Eigen::Map<const Eigen::ArrayXd>(p.y.data(), static_cast<Eigen::Index>(n)).mean();
    p.pre.push_back(Moments());
    Moments acc;
    for (size_t i = 0; i < n; ++i) {
        if (i == 0 || p.x[i] != p.x[i - 1]) {
            if (i > 0) p.pre.push_back(acc);
            p.batch.push_back(p.x[i]);
            p.start.push_back(i);
        }
        const double u = p.x[i] - p.xs, v = p.y[i] - p.ys;
        acc.n += 1, acc.u += u, acc.v += v, acc.uu += u * u, acc.uv += u * v, acc.vv += v * v;
    }
    p.pre.push_back(acc);
    p.start.push_back(n);
    // the lookup table of crossing(), when it is not much larger than the samples
    const double top = p.batch.back();
    if (top <= 16.0 * static_cast<double>(n) + 4096.0) {
        p.first_at.resize(static_cast<size_t>(top) + 1);
        size_t g = 0;
        for (size_t v = 0; v < p.first_at.size(); ++v) {
            while (p.batch[g] < static_cast<double>(v)) ++g;
            p.first_at[v] = g;
        }
    }
    return p;
}

// Non-negative least squares of two columns (1, b), as Lawson & Hanson (1974, ch. 23) reduce
// it: the optimum is the unconstrained fit on some subset of the columns that comes out
// non-negative, so the subsets are tried in the order both, b alone (through the origin), 1
// alone (the mean), starting from (0, 0), and a feasible one replaces the best so far when its
// residual is strictly smaller. `full`, `slope`, `mean`: each subset's fit with its residual.
Line choose_nnls(const Line& full, const Line& slope, const Line& mean, double sum_yy) {
    Line best;
    best.sse = sum_yy;
    const Line* order[] = {&full, &slope, &mean};
    for (const Line* l : order) {
        const bool feasible = std::isfinite(l->t0) && std::isfinite(l->t1) && std::isfinite(l->sse) && l->t0 >= 0 &&
                              l->t1 >= 0;
        if (feasible && l->sse < best.sse) best = *l;
    }
    return best;
}

// The non-negative line of the rows whose moments are `m` (about shifts xs, ys), from the
// sums alone: O(1), for scoring splits (see the file comment for its rounding).
Line line_from_moments(const Moments& m, double xs, double ys) {
    const double n = m.n;
    const double cuu = m.uu - m.u * m.u / n, cuv = m.uv - m.u * m.v / n, cvv = m.vv - m.v * m.v / n;
    const double mu = m.u / n, mv = m.v / n;
    Line full, slope, mean;
    full.t1 = cuu > 0 ? cuv / cuu : std::numeric_limits<double>::quiet_NaN();
    full.t0 = (mv + ys) - full.t1 * (mu + xs);
    full.sse = cvv - full.t1 * cuv;
    if (full.t0 >= 0 && full.t1 >= 0) return full;  // feasible: the optimum (NaN is not)
    // raw sums of b t, b^2, t^2 from the shifted ones
    const double sxy = m.uv + ys * m.u + xs * m.v + n * xs * ys;
    const double sxx = m.uu + 2 * xs * m.u + n * xs * xs;
    const double syy = m.vv + 2 * ys * m.v + n * ys * ys;
    slope.t1 = sxy / sxx;
    slope.sse = syy - slope.t1 * sxy;
    mean.t0 = mv + ys;
    mean.sse = cvv;
    return choose_nnls(full, slope, mean, syy);
}

// The non-negative line of x[0, n), y[0, n) (n >= 2, at least 2 distinct x) from the samples
// themselves: two-pass least squares (means first, then centred sums, as GSL's gsl_fit_linear
// computes it; Eigen expressions, one fused loop per sum) and residuals summed directly. The
// unconstrained fit, when feasible, is the optimum (no subset of the columns fits better), so
// the one-column fits are only computed when it is not.
Line line_direct(const double* x, const double* y, size_t n) {
    const Eigen::Map<const Eigen::ArrayXd> X(x, static_cast<Eigen::Index>(n)), Y(y, static_cast<Eigen::Index>(n));
    const double mx = X.mean(), my = Y.mean();
    const auto dx = X - mx;
    const auto dy = Y - my;
    Line full, slope, mean;
    full.t1 = (dx * dy).sum() / dx.square().sum();
    full.t0 = my - full.t1 * mx;
    full.sse = (dy - full.t1 * dx).square().sum();
    if (std::isfinite(full.t0) && std::isfinite(full.t1) && full.t0 >= 0 && full.t1 >= 0) return full;
    slope.t1 = (X * Y).sum() / X.square().sum();
    slope.sse = (Y - slope.t1 * X).square().sum();
    mean.t0 = my;
    mean.sse = dy.square().sum();
    return choose_nnls(full, slope, mean, Y.square().sum());
}

// The mean of y[0, n), n >= 1.
double mean_of(const double* y, size_t n) {
    return Eigen::Map<const Eigen::ArrayXd>(y, static_cast<Eigen::Index>(n)).mean();
}

// AIC = n ln(SSE/n) + 2k, with SSE floored so that an exact fit stays finite.
double aic(double sse, double n, int k, double scale) {
    const double floor = 1e-24 * scale * scale;
    return n * std::log(std::max(sse / n, floor)) + 2.0 * k;
}

// The residual sum of squares of max(tmin, t0 + t1 b) over all rows x, y [0, n), summed directly.
double flat_sse(const double* x, const double* y, size_t n, double tmin, const Line& tail) {
    const Eigen::Map<const Eigen::ArrayXd> X(x, static_cast<Eigen::Index>(n)), Y(y, static_cast<Eigen::Index>(n));
    return ((tail.t0 + tail.t1 * X).max(tmin) - Y).square().sum();
}

// The linear or flat-then-linear fit of ComputeModel (see models.hpp), without knots, of the
// profile's rows without group `skip` (kNone: all rows). `bx`, `by`: scratch space.
ComputeModel fit_parametric(const Profile& p, size_t skip, std::vector<double>* bx, std::vector<double>* by) {
    const size_t G = p.groups();
    bx->clear();
    by->clear();
    for (size_t g = 0; g < G; ++g) {
        if (g == skip) continue;
        bx->insert(bx->end(), p.x.begin() + p.start[g], p.x.begin() + p.start[g + 1]);
        by->insert(by->end(), p.y.begin() + p.start[g], p.y.begin() + p.start[g + 1]);
    }
    const double* x = bx->data();
    const double* y = by->data();
    const size_t n = bx->size();
    const size_t D = G - (skip == kNone ? 0 : 1);  // distinct batches of these rows
    auto full_index = [&](size_t s) { return skip == kNone || s < skip ? s : s + 1; };
    const double mean_t = mean_of(y, n);
    const Line lin = line_direct(x, y, n);

    ComputeModel m;
    m.min_batch = static_cast<int>(x[0]);
    m.max_batch = static_cast<int>(x[n - 1]);
    m.t0 = lin.t0;
    m.t1 = lin.t1;
    m.aic_linear = aic(lin.sse, static_cast<double>(n), 2, mean_t);
    m.aic_flat = std::numeric_limits<double>::infinity();
    double sse = lin.sse;
    int k = 2;
    size_t fit_from = 0;  // the linear part is fitted on rows [fit_from, n)

    // Segmented (flat-then-linear) candidate: every split of the sorted distinct batches into
    // a head (split batches, its mean the floor) and a tail (>= 2 batches, the line), scored
    // from the prefix sums; the best kSplitRecheck are refitted directly.
    if (D >= 4 && n >= 5) {
        const double d_front = x[0];
        const Moments all = p.range(0, G, skip);
        std::vector<std::pair<double, size_t>> top;  // (score, split), ascending in score
        for (size_t s = 1; s + 2 <= D; ++s) {
            const size_t g = full_index(s);  // the tail's first group
            const Moments head = p.range(0, g, skip);
            const double tmin = head.v / head.n + p.ys;
            const Line f = line_from_moments(all - head, p.xs, p.ys);
            if (!(tmin > f.t0 + f.t1 * d_front)) continue;  // the floor must be active
            // the line is non-decreasing in b: the floor holds on the groups before gs
            const size_t gs = p.crossing(f, tmin);
            const Moments lo = p.range(0, gs, skip), hi = all - lo;
            const double a = tmin - p.ys, c = f.t0 + f.t1 * p.xs - p.ys;
            const double score = (lo.n * a * a - 2 * a * lo.v + lo.vv) +
                                 (hi.n * c * c + f.t1 * f.t1 * hi.uu + hi.vv + 2 * c * f.t1 * hi.u - 2 * c * hi.v -
                                  2 * f.t1 * hi.uv);
            if (!std::isfinite(score)) continue;
            if (top.size() < kSplitRecheck || score < top.back().first) {
                if (top.size() == kSplitRecheck) top.pop_back();
                top.insert(std::upper_bound(top.begin(), top.end(), std::make_pair(score, s)), {score, s});
            }
        }
        // the refits in split order, the first of equal residuals kept (as a scan of all would)
        std::sort(top.begin(), top.end(), [](const auto& l, const auto& r) { return l.second < r.second; });
        double best_sse = std::numeric_limits<double>::infinity();
        Line best_tail;
        double best_tmin = 0;
        size_t best_from = 0;
        for (const auto& cand : top) {
            const size_t g = full_index(cand.second);
            const size_t h = p.start[g] - (skip != kNone && skip < g ? p.rows_of(skip) : 0);  // head rows
            const double tmin = mean_of(y, h);
            const Line f = line_direct(x + h, y + h, n - h);
            if (!(tmin > f.t0 + f.t1 * d_front)) continue;
            const double e = flat_sse(x, y, n, tmin, f);
            if (e < best_sse) {
                best_sse = e;
                best_tail = f;
                best_tmin = tmin;
                best_from = h;
            }
        }
        if (std::isfinite(best_sse)) {
            m.aic_flat = aic(best_sse, static_cast<double>(n), 4, mean_t);
            if (m.aic_flat < m.aic_linear - 2.0) {
                m.flat = true;
                m.t0 = best_tail.t0;
                m.t1 = best_tail.t1;
                m.t_min = best_tmin;
                sse = best_sse;
                k = 4;
                fit_from = best_from;
            }
        }
    }
    // (X'X)^-1 of the design [1, b] of the linear part, in centred form: [[1/n + xbar^2/Sxx,
    // -xbar/Sxx], [., 1/Sxx]] with Sxx = sum (b - xbar)^2 (the inverse of the 2x2 normal matrix).
    const size_t nl = n - fit_from;
    const double xbar = mean_of(x + fit_from, nl);
    const double sxx =
        (Eigen::Map<const Eigen::ArrayXd>(x + fit_from, static_cast<Eigen::Index>(nl)) - xbar).square().sum();
    if (sxx > 0) {
        m.xtx_inv[0] = 1.0 / static_cast<double>(nl) + xbar * xbar / sxx;
        m.xtx_inv[1] = -xbar / sxx;
        m.xtx_inv[2] = 1.0 / sxx;
    }
    m.rmse = std::sqrt(sse / static_cast<double>(n));
    m.dof = static_cast<int>(n) - k;
    m.sigma = m.dof > 0 ? std::sqrt(sse / m.dof) : 0.0;
    return m;
}

// Leave-one-out over the interior knots of `m` (Stone 1974): interpolation vs the parametric
// form refitted without each knot; sets the loo_* fields and `interpolated`. >= 3 knots, the
// groups of `p` in the same order. With more than ComputeModel::kLooKnots interior knots,
// kLooKnots of them evenly spaced in rank (the first and the last included).
void choose_interpolation(ComputeModel& m, const Profile& p) {
    const size_t interior = m.knots.size() - 2;
    const size_t used = std::min(interior, static_cast<size_t>(ComputeModel::kLooKnots));
    std::vector<double> bx, by;
    double e_int = 0, e_par = 0, e_int2 = 0;
    for (size_t r = 0; r < used; ++r) {
        const size_t j = used == interior ? r + 1 : 1 + (used > 1 ? r * (interior - 1) / (used - 1) : 0);
        const auto& a = m.knots[j - 1];
        const auto& c = m.knots[j + 1];
        const int b = m.knots[j].first;
        const double t = m.knots[j].second;
        const double w = (b - a.first) / static_cast<double>(c.first - a.first);
        const double rel = (a.second + w * (c.second - a.second)) / t - 1.0;
        e_int += std::fabs(rel);
        e_int2 += rel * rel;
        e_par += std::fabs(fit_parametric(p, j, &bx, &by).parametric(b) / t - 1.0);
    }
    const double k = static_cast<double>(used);
    m.loo_interpolated = 100.0 * e_int / k;
    m.loo_parametric = 100.0 * e_par / k;
    m.loo_rel_rms = std::sqrt(e_int2 / k);
    m.loo_points = static_cast<int>(used);
    m.interpolated = m.loo_interpolated < m.loo_parametric - 1e-6;  // ties keep the fitted curve
}

// The errors of ComputeModel::fit for the one-rank samples.
void check_samples(const std::vector<ComputeSample>& samples) {
    const std::string who = samples.empty() ? std::string("the workload") : samples.front().workload;
    const std::string todo = "; run `tula profile compute --workload " + who + "` with at least 2 batch sizes";
    if (samples.empty()) throw Error("no compute profile for " + who + todo);
    std::set<int> batches;
    for (const auto& s : samples) {
        if (s.local_batch < 1)
            throw Error("compute profile of " + who + " has a sample with local batch " + std::to_string(s.local_batch) +
                        "; it must be >= 1" + todo);
        if (!std::isfinite(s.seconds_per_iter) || s.seconds_per_iter <= 0)
            throw Error("compute profile of " + who + " has a sample with a non-positive or non-finite time at local batch " +
                        std::to_string(s.local_batch) + todo);
        batches.insert(s.local_batch);
    }
    if (batches.size() < 2)
        throw Error("compute profile of " + who + " has " + std::to_string(batches.size()) +
                    " distinct local batch size; need at least 2" + todo);
}

}  // namespace

ComputeModel ComputeModel::fit(const std::vector<ComputeSample>& all) {
    std::vector<ComputeSample> samples, together;  // one rank alone; several ranks at once
    for (const auto& s : all) (s.ranks > 1 ? together : samples).push_back(s);
    check_samples(samples);
    const Profile p = make_profile(samples);
    std::vector<double> bx, by;
    ComputeModel m = fit_parametric(p, kNone, &bx, &by);
    // the knots: the median time of each group (the rows of a group are contiguous in p.y)
    for (size_t g = 0; g < p.groups(); ++g)
        m.knots.emplace_back(static_cast<int>(p.batch[g]),
                             median(std::vector<double>(p.y.begin() + p.start[g], p.y.begin() + p.start[g + 1])));
    m.loo_interpolated = m.loo_parametric = std::numeric_limits<double>::quiet_NaN();
    std::map<int, std::vector<double>> startup;
    for (const auto& s : samples)
        if (std::isfinite(s.startup_seconds) && s.startup_seconds >= 0) startup[s.local_batch].push_back(s.startup_seconds);
    for (const auto& [b, v] : startup) m.startup_knots.emplace_back(b, median(v));
    for (const auto& s : all)
        if (!s.job_id.empty()) m.measured_jobs.insert(s.job_id);
    if (m.knots.size() >= 3) choose_interpolation(m, p);
    m.fit_concurrent(together);  // its ratios are against the form chosen here
    return m;
}

}  // namespace tula
