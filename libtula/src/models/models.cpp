// libtula: performance models fitted from profiles (see models.hpp).
#include "tula/models.hpp"

#include <Eigen/Dense>
#include <gsl/gsl_blas.h>
#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit_nlinear.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "tula/error.hpp"

namespace tula {

void numerics_never_abort() { gsl_set_error_handler_off(); }
namespace {

// Ordinary least squares min ||A x - y||_2 by column-pivoted Householder QR (Eigen). Columns
// are scaled to unit norm first so that features of very different magnitude (steps vs
// bytes) do not upset the rank decision; an all-zero column gets coefficient 0.
Eigen::VectorXd lstsq(const Eigen::MatrixXd& A, const Eigen::VectorXd& y) {
    Eigen::VectorXd scale(A.cols());
    Eigen::MatrixXd As = A;
    for (Eigen::Index j = 0; j < A.cols(); ++j) {
        const double n = A.col(j).norm();
        scale(j) = n > 0 ? n : 1.0;
        As.col(j) /= scale(j);
    }
    Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(As);
    Eigen::VectorXd x = qr.solve(y);
    for (Eigen::Index j = 0; j < A.cols(); ++j) {
        x(j) = std::isfinite(x(j)) ? x(j) / scale(j) : 0.0;
    }
    return x;
}

// Non-negative least squares min ||A x - y||_2 subject to x >= 0, for a handful of columns:
// the optimum is the unconstrained least-squares solution on some subset S of the columns
// (x = 0 outside S) that comes out non-negative (Lawson & Hanson 1974, ch. 23, KKT
// conditions), so every subset is tried and the feasible one with the smallest residual
// wins. That is "refit with a negative coefficient fixed at 0", done exhaustively.
Eigen::VectorXd nnls_small(const Eigen::MatrixXd& A, const Eigen::VectorXd& y) {
    const int n = static_cast<int>(A.cols());
    Eigen::VectorXd best = Eigen::VectorXd::Zero(n);
    double best_res = y.squaredNorm();
    for (int mask = (1 << n) - 1; mask >= 1; --mask) {  // the full set first: it wins ties
        std::vector<int> cols;
        for (int j = 0; j < n; ++j)
            if (mask & (1 << j)) cols.push_back(j);
        Eigen::MatrixXd S(A.rows(), static_cast<Eigen::Index>(cols.size()));
        for (size_t k = 0; k < cols.size(); ++k) S.col(static_cast<Eigen::Index>(k)) = A.col(cols[k]);
        const Eigen::VectorXd xs = lstsq(S, y);
        if ((xs.array() < 0).any()) continue;
        Eigen::VectorXd x = Eigen::VectorXd::Zero(n);
        for (size_t k = 0; k < cols.size(); ++k) x(cols[k]) = xs(static_cast<Eigen::Index>(k));
        const double res = (A * x - y).squaredNorm();
        if (res < best_res) {
            best_res = res;
            best = x;
        }
    }
    return best;
}

double rmse_of(const Eigen::MatrixXd& A, const Eigen::VectorXd& x, const Eigen::VectorXd& y) {
    return std::sqrt((A * x - y).squaredNorm() / static_cast<double>(y.size()));
}

}  // namespace

namespace {

// Linear interpolation between the knots a and c at b (a.first < b < c.first).
double lerp_knots(const std::pair<int, double>& a, const std::pair<int, double>& c, double b) {
    const double w = (b - a.first) / static_cast<double>(c.first - a.first);
    return a.second + w * (c.second - a.second);
}

// The index i >= 1 of the first knot at or after x, so that knots[i - 1] and knots[i] bracket
// x; knots ascending in .first, at least 2, x > knots.front().first; the last knot's index
// when x is beyond it (its segment then extends the line). Shared by the compute knots, the
// allreduce measurements and the time calibration curve.
template <class Key>
size_t knot_segment(const std::vector<std::pair<Key, double>>& knots, double x) {
    const auto it = std::lower_bound(knots.begin() + 1, knots.end() - 1, x,
                                     [](const std::pair<Key, double>& k, double v) { return k.first < v; });
    return static_cast<size_t>(it - knots.begin());
}

}  // namespace

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

AllreduceModel AllreduceModel::fit(const std::vector<AllreduceSample>& samples) {
    const std::string todo = "; run `tula profile allreduce` on 2 or more nodes";
    std::vector<const AllreduceSample*> use;
    std::set<std::pair<int, int64_t>> points;
    for (const auto& s : samples) {
        if (s.nodes < 1 || s.bytes < 0 || !std::isfinite(s.seconds) || s.seconds < 0)
            throw Error("allreduce profile has an invalid sample (" + std::to_string(s.nodes) + " nodes, " +
                        std::to_string(s.bytes) + " bytes, " + std::to_string(s.seconds) + " s)" + todo);
        if (s.nodes < 2) continue;  // T(1, n) = 0 across nodes; nodes = 1 is the within-node profile
        if (s.ranks_per_node > 1) continue;  // several ranks per node: a two-level allreduce, not this model
        use.push_back(&s);
        points.insert({s.nodes, s.bytes});
    }
    if (use.empty()) throw Error("no allreduce profile with 2 or more nodes" + todo);
    if (points.size() < 2)
        throw Error("allreduce profile has only 1 distinct (nodes, bytes) point; need at least 2" + todo +
                    " with 2 node counts or 2 message sizes");
    const Eigen::Index n = static_cast<Eigen::Index>(use.size());
    std::set<int> node_counts;
    for (const auto* s : use) node_counts.insert(s->nodes);
    auto fit_alg = [&](Algorithm alg) {
        Eigen::MatrixXd A(n, 2);
        Eigen::VectorXd y(n);
        for (Eigen::Index i = 0; i < n; ++i) {
            const double K = use[static_cast<size_t>(i)]->nodes;
            A(i, 0) = alg == Algorithm::Ring ? 2.0 * (K - 1.0) : 2.0 * std::ceil(std::log2(K) - 1e-12);
            A(i, 1) = 2.0 * (K - 1.0) / K * static_cast<double>(use[static_cast<size_t>(i)]->bytes);
            y(i) = use[static_cast<size_t>(i)]->seconds;
        }
        const Eigen::VectorXd x = nnls_small(A, y);
        AllreduceModel m;
        m.alpha = x(0);
        m.beta = x(1);
        m.rmse = rmse_of(A, x, y);
        m.algorithm = alg;
        return m;
    };
    AllreduceModel best = fit_alg(Algorithm::Ring);
    if (node_counts.size() >= 3) {
        const AllreduceModel rab = fit_alg(Algorithm::Rabenseifner);
        if (rab.rmse < best.rmse) best = rab;
    }
    // each node count's own measurements: the median seconds per message size
    std::map<int, std::map<double, std::vector<double>>> by_k;
    for (const auto* s : use) by_k[s->nodes][static_cast<double>(s->bytes)].push_back(s->seconds);
    for (auto& [k, sizes] : by_k) {
        if (sizes.size() < 2) continue;
        auto& pts = best.measured[k];
        for (auto& [bytes, ts] : sizes) pts.emplace_back(bytes, median(ts));
    }
    return best;
}

double AllreduceModel::seconds(int nodes, double bytes) const {
    if (nodes <= 1) return 0.0;
    const auto it = measured.find(nodes);
    if (it == measured.end()) return modelled_seconds(nodes, bytes);  // fit() keeps >= 2 sizes
    const auto& p = it->second;
    if (!(bytes > p.front().first)) return p.front().second;
    const size_t i = knot_segment(p, bytes);
    const auto& [n0, t0] = p[i - 1];
    const auto& [n1, t1] = p[i];
    const double slope = (t1 - t0) / (n1 - n0);
    if (bytes > n1) return t1 + std::max(0.0, slope) * (bytes - n1);  // beyond the largest size
    return t0 + slope * (bytes - n0);
}

std::string AllreduceModel::measured_nodes() const {
    std::string ks;
    for (const auto& kv : measured) ks += (ks.empty() ? "" : ",") + std::to_string(kv.first);
    return ks;
}

double AllreduceModel::modelled_seconds(int nodes, double bytes) const {
    if (nodes <= 1) return 0.0;
    const double K = nodes;
    const double steps = algorithm == Algorithm::Ring ? 2.0 * (K - 1.0) : 2.0 * std::ceil(std::log2(K) - 1e-12);
    return steps * alpha + 2.0 * (K - 1.0) / K * bytes * beta;
}

bool AllreduceModel::has_inter_node(const std::vector<AllreduceSample>& samples) {
    return std::any_of(samples.begin(), samples.end(),
                       [](const AllreduceSample& s) { return s.nodes >= 2 && s.ranks_per_node <= 1; });
}

bool IntraNodeModel::has_samples(const std::vector<AllreduceSample>& samples) {
    return std::any_of(samples.begin(), samples.end(),
                       [](const AllreduceSample& s) { return s.nodes == 1 && s.ranks_per_node >= 2; });
}

IntraNodeModel IntraNodeModel::fit(const std::vector<AllreduceSample>& samples) {
    const std::string todo = "; run `tula profile allreduce --ranks-per-node R` (R >= 2 ranks on one node)";
    std::vector<double> x, y;
    std::set<int64_t> sizes;
    std::set<int> ranks;
    for (const auto& s : samples) {
        if (s.nodes != 1 || s.ranks_per_node < 2) continue;
        if (s.bytes < 1 || !std::isfinite(s.seconds) || s.seconds < 0)
            throw Error("within-node allreduce profile has an invalid sample (" + std::to_string(s.ranks_per_node) +
                        " ranks, " + std::to_string(s.bytes) + " bytes, " + std::to_string(s.seconds) + " s)" + todo);
        const double r = s.ranks_per_node;
        x.push_back(2.0 * (r - 1.0) / r * static_cast<double>(s.bytes));
        y.push_back(s.seconds);
        sizes.insert(s.bytes);
        ranks.insert(s.ranks_per_node);
    }
    if (x.empty()) throw Error("no within-node allreduce profile" + todo);
    if (sizes.size() < 2)
        throw Error("within-node allreduce profile has " + std::to_string(sizes.size()) +
                    " distinct message size; need at least 2 to fit a bandwidth" + todo);
    // ordinary least squares of y = a + x / bw (closed form): slope = Sxy / Sxx
    const double n = static_cast<double>(x.size());
    double mx = 0, my = 0;
    for (size_t i = 0; i < x.size(); ++i) mx += x[i], my += y[i];
    mx /= n;
    my /= n;
    double sxx = 0, sxy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sxx += (x[i] - mx) * (x[i] - mx);
        sxy += (x[i] - mx) * (y[i] - my);
    }
    const double slope = sxx > 0 ? sxy / sxx : 0.0;
    if (!(slope > 0) || !std::isfinite(1.0 / slope))
        throw Error("within-node allreduce profile: the time does not grow with the message size (slope " +
                    std::to_string(slope) + " s/byte), so no bandwidth can be fitted" + todo + " with larger messages");
    IntraNodeModel m;
    m.bandwidth = 1.0 / slope;
    m.latency = my - slope * mx;
    double sse = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double e = y[i] - (m.latency + slope * x[i]);
        sse += e * e;
    }
    m.rmse = std::sqrt(sse / n);
    m.samples = static_cast<int>(x.size());
    m.sizes = static_cast<int>(sizes.size());
    m.ranks.assign(ranks.begin(), ranks.end());
    return m;
}

double intra_node_allreduce_seconds(int ranks, double bytes, double bandwidth) {
    if (ranks <= 1 || !(bandwidth > 0)) return 0.0;
    const double r = ranks;
    return 2.0 * (r - 1.0) / r * bytes / bandwidth;
}

double hierarchical_allreduce_seconds(const AllreduceModel* across, int nodes, int ranks_per_node, double bytes,
                                      double intra_bandwidth) {
    const double inter = across && nodes > 1 ? across->seconds(nodes, bytes) : 0.0;
    return intra_node_allreduce_seconds(ranks_per_node, bytes, intra_bandwidth) + inter;
}

// ---- overlap (Pollux) -------------------------------------------------------------------
namespace {

double gamma_of(double u) { return 1.0 + 9.0 / (1.0 + std::exp(-u)); }

// (a^g + b^g)^(1/g) computed as M (1 + (m/M)^g)^(1/g) to avoid overflow.
double pnorm(double a, double b, double g) {
    const double M = std::max(a, b), m = std::min(a, b);
    if (!(M > 0)) return 0.0;
    return M * std::pow(1.0 + std::pow(m / M, g), 1.0 / g);
}

struct OverlapData {
    const std::vector<IterationSample>* s;
};

int overlap_f(const gsl_vector* x, void* params, gsl_vector* f) {
    const auto* d = static_cast<const OverlapData*>(params);
    const double g = gamma_of(gsl_vector_get(x, 0));
    for (size_t i = 0; i < d->s->size(); ++i) {
        const IterationSample& q = (*d->s)[i];
        gsl_vector_set(f, i, (pnorm(q.compute_seconds, q.comm_seconds, g) - q.measured_seconds) / q.measured_seconds);
    }
    return GSL_SUCCESS;
}

}  // namespace

OverlapModel OverlapModel::fit(const std::vector<IterationSample>& samples) {
    gsl_set_error_handler_off();
    std::vector<IterationSample> use;
    for (const auto& q : samples) {
        if (!std::isfinite(q.compute_seconds) || !std::isfinite(q.comm_seconds) || !std::isfinite(q.measured_seconds) ||
            q.compute_seconds < 0 || q.comm_seconds < 0 || q.measured_seconds < 0)
            throw Error("iteration sample with a negative or non-finite time; check the run history in the profile database");
        if (q.comm_seconds > 0 && q.compute_seconds > 0 && q.measured_seconds > 0) use.push_back(q);
    }
    OverlapModel m;
    if (use.empty()) return m;
    OverlapData data{&use};
    gsl_multifit_nlinear_fdf fdf;
    fdf.f = overlap_f;
    fdf.df = nullptr;  // finite-difference Jacobian
    fdf.fvv = nullptr;
    fdf.n = use.size();
    fdf.p = 1;
    fdf.params = &data;
    gsl_multifit_nlinear_parameters par = gsl_multifit_nlinear_default_parameters();
    double best_cost = std::numeric_limits<double>::infinity(), best_u = -50;  // gamma = 1
    // The cost is flat where the sigmoid saturates: start from several points, keep the best.
    for (double u0 : {-4.0, -1.5, 0.0, 1.5, 4.0}) {
        gsl_multifit_nlinear_workspace* w =
            gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &par, use.size(), 1);
        if (!w) throw Error("out of memory in the overlap fit");
        gsl_vector* x = gsl_vector_alloc(1);
        gsl_vector_set(x, 0, u0);
        int info = 0;
        int st = gsl_multifit_nlinear_init(x, &fdf, w);
        if (st == GSL_SUCCESS) st = gsl_multifit_nlinear_driver(200, 1e-10, 1e-10, 1e-12, nullptr, nullptr, &info, w);
        if (st == GSL_SUCCESS || st == GSL_EMAXITER) {
            const double u = gsl_vector_get(gsl_multifit_nlinear_position(w), 0);
            gsl_vector* f = gsl_multifit_nlinear_residual(w);
            double cost = 0;
            gsl_blas_ddot(f, f, &cost);
            if (std::isfinite(cost) && std::isfinite(u) && cost < best_cost) {
                best_cost = cost;
                best_u = u;
            }
        }
        gsl_vector_free(x);
        gsl_multifit_nlinear_free(w);
    }
    if (!std::isfinite(best_cost)) throw Error("the overlap (gamma) fit failed to converge; planning with gamma = 1");
    m.gamma = gamma_of(best_u);
    m.samples = static_cast<int>(use.size());
    m.rmse_rel = std::sqrt(best_cost / static_cast<double>(use.size()));
    return m;
}

bool usable_run(const RunRecord& run) {
    return run.nodes >= 1 && run.global_batch >= run.ranks() && run.epochs >= 1 && run.measured_seconds > 0 &&
           std::isfinite(run.measured_seconds);
}

double steady_seconds(const RunRecord& r, const ComputeModel& compute) {
    if (r.ranks() < 1) return r.measured_seconds;
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
            std::floor(r->examples_per_epoch(static_cast<double>(w.train_examples)) / r->global_batch) * r->epochs;
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

double OverlapModel::combine(double compute_seconds, double comm_seconds) const {
    if (gamma <= 1.0) return compute_seconds + comm_seconds;
    return pnorm(compute_seconds, comm_seconds, gamma);
}

// ---- memory, convergence, accuracy ------------------------------------------------------
MemoryModel MemoryModel::from_workload(const Workload& w) {
    const int64_t act = w.activation_floats;
    if (act <= 0 || w.params <= 0)
        throw Error("no memory model for " + w.name + ": its activation size is not known");
    MemoryModel m;
    m.static_bytes = 4.0 * 4.0 * static_cast<double>(w.params);
    m.per_example_bytes = 2.0 * 4.0 * static_cast<double>(act);
    return m;
}

MemoryModel MemoryModel::fit(const std::vector<std::pair<int, double>>& samples) {
    std::set<int> batches;
    for (const auto& [b, bytes] : samples) {
        if (b < 1 || !std::isfinite(bytes) || bytes < 0)
            throw Error("memory sample with local batch " + std::to_string(b) + " and a negative or non-finite size");
        batches.insert(b);
    }
    if (batches.size() < 2) throw Error("memory samples cover fewer than 2 distinct local batches; need at least 2");
    const Eigen::Index n = static_cast<Eigen::Index>(samples.size());
    Eigen::MatrixXd A(n, 2);
    Eigen::VectorXd y(n);
    for (Eigen::Index i = 0; i < n; ++i) {
        A(i, 0) = 1.0;
        A(i, 1) = samples[static_cast<size_t>(i)].first;
        y(i) = samples[static_cast<size_t>(i)].second;
    }
    const Eigen::VectorXd x = nnls_small(A, y);
    MemoryModel m;
    m.static_bytes = x(0);
    m.per_example_bytes = x(1);
    return m;
}

int MemoryModel::max_local_batch(double device_bytes) const {
    constexpr int kMax = std::numeric_limits<int>::max();
    if (!(device_bytes > 0)) return kMax;
    if (static_bytes + per_example_bytes > device_bytes) return 0;
    if (!(per_example_bytes > 0)) return kMax;
    const double b = std::floor((device_bytes - static_bytes) / per_example_bytes);
    return b >= kMax ? kMax : static_cast<int>(b);
}

double ConvergenceModel::epochs_at(double noise_scale, double B, double epochs_ref, double B_ref) {
    const double bn = noise_scale > 0 ? noise_scale : kDefaultNoiseScale;
    return epochs_ref * (1.0 + B / bn) / (1.0 + B_ref / bn);
}

double median(std::vector<double> v) {
    if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
    const size_t n = v.size();
    std::sort(v.begin(), v.end());
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

ConvergenceModel ConvergenceModel::from_runs(const std::vector<RunRecord>& runs, double fallback) {
    ConvergenceModel m;
    m.noise_scale = std::isfinite(fallback) && fallback > 0 ? fallback : kDefaultNoiseScale;
    m.noise_scale_low = m.noise_scale_high = m.noise_scale;
    std::vector<std::pair<double, double>> measured;  // (created, noise scale)
    for (const auto& r : runs)
        if (std::isfinite(r.noise_scale) && r.noise_scale > 0) measured.push_back({r.created, r.noise_scale});
    if (measured.empty()) return m;
    // newest first; the databases' lists are each newest first but not merged in order
    std::stable_sort(measured.begin(), measured.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    if (measured.size() > kNoiseRuns) measured.resize(kNoiseRuns);
    std::vector<double> v;
    for (const auto& x : measured) v.push_back(x.second);
    m.measured_runs = static_cast<int>(v.size());
    const auto mm = std::minmax_element(v.begin(), v.end());
    m.noise_scale_low = m.noise_scale_high = m.noise_scale = median(v);
    if (v.size() >= 2) {
        m.noise_scale_low = *mm.first;
        m.noise_scale_high = *mm.second;
        m.confidence = 1.0 - 2.0 * std::pow(0.5, static_cast<double>(v.size()));
    }
    return m;
}

std::string ConvergenceModel::origin() const {
    if (e_min > 0 || fit_batches >= 2)
        return (fit_batches >= 2 ? "fitted to " : "E_min from ") + std::to_string(fit_runs) +
               (fit_runs == 1 ? " run" : " runs") + " at " + std::to_string(fit_batches) +
               (fit_batches == 1 ? " batch" : " batches") + " (optimizer " +
               (fit_optimizer.empty() ? std::string("not recorded") : fit_optimizer) + ")" +
               (fit_batches >= 2 ? "" : measured_runs > 0 ? ", B_noise measured in " + std::to_string(measured_runs) +
                                                                (measured_runs == 1 ? " run" : " runs")
                                                          : std::string(", B_noise from ") + source);
    if (measured_runs > 0)
        return "measured in " + std::to_string(measured_runs) + (measured_runs == 1 ? " run" : " runs");
    return source ? source : "tula.conf";
}

AccuracyModel AccuracyModel::fit(const std::vector<RunRecord>& runs) {
    AccuracyModel m;
    std::vector<std::pair<double, double>> pts;
    std::set<int> batches;
    double best = 0;
    for (const auto& r : runs)
        if (r.global_batch >= 1 && r.test_accuracy > 0 && r.test_accuracy <= 1) best = std::max(best, r.test_accuracy);
    for (const auto& r : runs) {
        if (r.global_batch < 1 || !(r.test_accuracy > 0 && r.test_accuracy <= 1)) continue;
        if (r.test_accuracy < kDivergedFraction * best) {  // diverged: an optimizer failure, not a batch effect
            ++m.diverged;
            continue;
        }
        pts.push_back({std::log2(static_cast<double>(r.global_batch)), r.test_accuracy});
        batches.insert(r.global_batch);
    }
    if (pts.empty()) return m;
    m.runs = static_cast<int>(pts.size());
    m.min_batch = *batches.begin();
    m.max_batch = *batches.rbegin();
    if (batches.size() < 2) {
        for (const auto& p : pts) m.a += p.second / static_cast<double>(pts.size());
        return m;
    }
    Eigen::MatrixXd A(static_cast<Eigen::Index>(pts.size()), 2);
    Eigen::VectorXd y(static_cast<Eigen::Index>(pts.size()));
    for (size_t i = 0; i < pts.size(); ++i) {
        A(static_cast<Eigen::Index>(i), 0) = 1.0;
        A(static_cast<Eigen::Index>(i), 1) = pts[i].first;
        y(static_cast<Eigen::Index>(i)) = pts[i].second;
    }
    const Eigen::VectorXd x = lstsq(A, y);
    m.a = x(0);
    m.c = x(1);
    return m;
}

AccuracyModel AccuracyModel::fit(const std::vector<RunRecord>& runs, int epochs, int64_t examples,
                                 int64_t workload_examples) {
    std::vector<RunRecord> same;
    for (const auto& r : runs) {
        if (epochs < 1 || r.examples_per_epoch(static_cast<double>(workload_examples)) != static_cast<double>(examples))
            continue;
        RunRecord c;
        c.global_batch = r.global_batch;
        if (r.epoch_test_accuracy.size() >= static_cast<size_t>(epochs))
            c.test_accuracy = r.epoch_test_accuracy[static_cast<size_t>(epochs) - 1];
        else if (r.epoch_test_accuracy.empty() && r.epochs == epochs)
            c.test_accuracy = r.test_accuracy;
        else
            continue;
        same.push_back(c);
    }
    return fit(same);
}

double AccuracyModel::at(double B) const {
    if (!known()) return std::numeric_limits<double>::quiet_NaN();
    // No extrapolation: outside the batches of the history the nearest end's value.
    if (max_batch > 0) B = std::min(static_cast<double>(max_batch), std::max(static_cast<double>(min_batch), B));
    const double v = a + c * std::log2(std::max(1.0, B));
    return std::min(1.0, std::max(0.0, v));
}

}  // namespace tula
