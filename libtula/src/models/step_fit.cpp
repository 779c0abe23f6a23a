// libtula: the step model fitted to the finished runs (StepFit, step_fit.hpp; docs/models.md,
// "The step fitted to the runs").
#include "tula/step_fit.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <limits>
#include <tuple>

namespace tula {

namespace {

bool usable(const StepObservation& o) {
    return o.measured_seconds > 0 && o.model_seconds > 0 && std::isfinite(o.measured_seconds) &&
           std::isfinite(o.model_seconds) && std::isfinite(o.local_batch) &&
           (o.borrowed || (o.compute_seconds > 0 && std::isfinite(o.compute_seconds)));
}

// The columns of one form: theta_0, phi_0, then (theta'_R, phi'_R) per R of `ranks`, then
// theta''_{R,b} per (R, b) of `batches` (empty: the form without them). A row has at most five
// nonzero entries: c for each theta, psi(K, R) u for each phi.
struct Design {
    std::vector<int> ranks;                        // ascending
    std::vector<StepFit::BatchKey> batches;        // ascending
    Eigen::Index size() const { return 2 + 2 * static_cast<Eigen::Index>(ranks.size()) + static_cast<Eigen::Index>(batches.size()); }
    // The nonzero entries of the row of (K, R, b) at compute part c: their count, indices and values.
    int row(int K, int R, double b, double c, double u, Eigen::Index idx[5], double x[5]) const {
        const double e = StepFit::psi(K, R) * u;
        int nz = 0;
        auto put = [&](Eigen::Index j) { idx[nz] = j, x[nz] = c, idx[nz + 1] = j + 1, x[nz + 1] = e, nz += 2; };
        put(0);
        const auto r = std::lower_bound(ranks.begin(), ranks.end(), R);
        if (r != ranks.end() && *r == R) put(2 + 2 * (r - ranks.begin()));
        const StepFit::BatchKey key{R, StepFit::batch_key(b)};
        const auto g = std::lower_bound(batches.begin(), batches.end(), key);
        if (g != batches.end() && *g == key) {
            idx[nz] = 2 + 2 * static_cast<Eigen::Index>(ranks.size()) + (g - batches.begin()), x[nz] = c;
            ++nz;
        }
        return nz;
    }
    Eigen::VectorXd prior_precision() const {
        Eigen::VectorXd d(size());
        d(0) = 1.0 / (StepFit::kPriorPooled * StepFit::kPriorPooled);
        d(1) = 1.0 / (StepFit::kPriorExchangePooled * StepFit::kPriorExchangePooled);
        const Eigen::Index per_batch = 2 + 2 * static_cast<Eigen::Index>(ranks.size());
        for (Eigen::Index j = 2; j < per_batch; j += 2) {
            d(j) = 1.0 / (StepFit::kPriorPerRanks * StepFit::kPriorPerRanks);
            d(j + 1) = 1.0 / (StepFit::kPriorExchangePerRanks * StepFit::kPriorExchangePerRanks);
        }
        for (Eigen::Index j = per_batch; j < size(); ++j) d(j) = 1.0 / (StepFit::kPriorPerBatch * StepFit::kPriorPerBatch);
        return d;
    }
};

// The usable runs as sparse rows of a Design, with y = s - m and weight 1 / s^2 (the residual
// relative to s), and their placements (K, R, b) for leaving placements out. Borrowed
// observations (`use` holds only those, or none of them) have c = 0 and weight
// 1 / (kBorrowedNoise s)^2.
struct Rows {
    std::vector<std::array<Eigen::Index, 5>> idx;
    std::vector<std::array<double, 5>> x;
    std::vector<int> nz;
    std::vector<double> y, w;
    std::vector<size_t> placement;  // index into the sorted distinct placements
    size_t placements = 0;
};

Rows rows_of(const std::vector<const StepObservation*>& use, const Design& d, double u) {
    Rows rs;
    std::vector<std::tuple<int, int, double>> keys;
    for (const StepObservation* o : use) keys.emplace_back(o->nodes, std::max(1, o->ranks_per_node), StepFit::batch_key(o->local_batch));
    std::vector<std::tuple<int, int, double>> distinct = keys;
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    rs.placements = distinct.size();
    for (size_t i = 0; i < use.size(); ++i) {
        const StepObservation& o = *use[i];
        std::array<Eigen::Index, 5> idx{};
        std::array<double, 5> x{};
        const double c = o.borrowed ? 0.0 : o.compute_seconds;
        rs.nz.push_back(d.row(o.nodes, std::max(1, o.ranks_per_node), o.local_batch, c, u, idx.data(), x.data()));
        rs.idx.push_back(idx);
        rs.x.push_back(x);
        rs.y.push_back(o.measured_seconds - o.model_seconds);
        const double sd = (o.borrowed ? StepFit::kBorrowedNoise : 1.0) * o.measured_seconds;
        rs.w.push_back(1.0 / (sd * sd));
        rs.placement.push_back(static_cast<size_t>(std::lower_bound(distinct.begin(), distinct.end(), keys[i]) - distinct.begin()));
    }
    return rs;
}

// Adds `sign` times row i's weighted outer product and right-hand side to (A, r).
void accumulate(const Rows& rs, size_t i, double sign, Eigen::MatrixXd& A, Eigen::VectorXd& r) {
    for (int a = 0; a < rs.nz[i]; ++a) {
        r(rs.idx[i][a]) += sign * rs.w[i] * rs.x[i][a] * rs.y[i];
        for (int b = 0; b < rs.nz[i]; ++b) A(rs.idx[i][a], rs.idx[i][b]) += sign * rs.w[i] * rs.x[i][a] * rs.x[i][b];
    }
}

double residual2(const Rows& rs, size_t i, const Eigen::VectorXd& beta) {
    double fitted = 0;
    for (int a = 0; a < rs.nz[i]; ++a) fitted += rs.x[i][a] * beta(rs.idx[i][a]);
    return rs.w[i] * (rs.y[i] - fitted) * (rs.y[i] - fitted);
}

// The weighted normal equations of one form: A0 = sum w x x', r0 = sum w x y over the
// workload's own runs (scaled by 1 / sigma^2 in the posterior), and Ab, rb over the borrowed
// observations (at their own noise, kBorrowedNoise: a prior on phi from the class's other
// workloads). The prior precision is added to Ab.
struct Normal {
    Eigen::MatrixXd A0, Ab;
    Eigen::VectorXd r0, rb;
};

Normal normal_equations(const Rows& rs, const Rows& borrowed, const Design& d) {
    const Eigen::Index p = d.size();
    Normal n{Eigen::MatrixXd::Zero(p, p), Eigen::MatrixXd::Zero(p, p), Eigen::VectorXd::Zero(p), Eigen::VectorXd::Zero(p)};
    for (size_t i = 0; i < rs.y.size(); ++i) accumulate(rs, i, 1.0, n.A0, n.r0);
    for (size_t i = 0; i < borrowed.y.size(); ++i) accumulate(borrowed, i, 1.0, n.Ab, n.rb);
    n.Ab.diagonal() += d.prior_precision();
    return n;
}

// The posterior of one form: coefficients, covariance and the relative noise sigma (two passes:
// at the prior noise, then at the noise the residuals show, pooled with the prior's pseudo-runs).
struct Posterior {
    Eigen::VectorXd beta;
    Eigen::MatrixXd cov;
    double sigma = StepFit::kNoisePrior;
};

Posterior posterior(const Rows& rs, const Design& d, const Normal& n) {
    const Eigen::Index p = d.size();
    Posterior post;
    for (int pass = 0; pass < 2; ++pass) {
        const double s2 = post.sigma * post.sigma;
        const Eigen::MatrixXd A = n.A0 / s2 + n.Ab;
        const Eigen::LDLT<Eigen::MatrixXd> ldlt(A);
        post.beta = ldlt.solve(n.r0 / s2 + n.rb);
        post.cov = ldlt.solve(Eigen::MatrixXd::Identity(p, p));
        post.cov = 0.5 * (post.cov + post.cov.transpose()).eval();  // symmetric to the last bit
        double rss = 0;
        for (size_t i = 0; i < rs.y.size(); ++i) rss += residual2(rs, i, post.beta);
        post.sigma = std::sqrt((StepFit::kNoisePriorWeight * StepFit::kNoisePrior * StepFit::kNoisePrior + rss) /
                               (StepFit::kNoisePriorWeight + static_cast<double>(rs.y.size())));
    }
    return post;
}

// The squared relative errors of the runs' steps (in the order of rs) predicted with their
// placements left out: the placements (ascending) in min(count, kFolds) folds, placement j in
// fold j mod folds, each fold's runs predicted by the posterior mean of the others at the full
// fit's noise sigma (`n`: the normal equations of all rows, from which each fold's are taken).
std::vector<double> placements_left_out(const Rows& rs, const Design& d, const Normal& n, double sigma) {
    const size_t folds = std::min(rs.placements, static_cast<size_t>(StepFit::kFolds));
    const double s2 = sigma * sigma;
    std::vector<double> e2(rs.y.size(), 0.0);
    for (size_t f = 0; f < folds; ++f) {
        Eigen::MatrixXd A = n.A0;
        Eigen::VectorXd r = n.r0;
        for (size_t i = 0; i < rs.y.size(); ++i)
            if (rs.placement[i] % folds == f) accumulate(rs, i, -1.0, A, r);
        A = A / s2 + n.Ab;
        const Eigen::VectorXd beta = A.ldlt().solve(r / s2 + n.rb);
        for (size_t i = 0; i < rs.y.size(); ++i)
            if (rs.placement[i] % folds == f) e2[i] = residual2(rs, i, beta);
    }
    return e2;
}

}  // namespace

StepFit StepFit::fit(const std::vector<StepObservation>& obs) {
    StepFit f = fit_coefficients(obs);
    if (f.runs > 0) f.extrapolation = extrapolation_from(obs, f.max_nodes);
    return f;
}

double StepFit::extrapolation_from(const std::vector<StepObservation>& obs, int max_nodes) {
    // the runs on fewer nodes than the largest count predict the runs on it, as a plan predicts
    // beyond the runs: the mean squared relative error beyond the left-out fit's noise sigma^2,
    // over the doublings squared. Its coefficients' own variance is not taken off: on the node count
    // it never saw, that is the prior's (phi'_R's 0.5), as wide as the form's error itself.
    std::vector<StepObservation> inside;  // borrowed observations stay in: not the workload's runs
    for (const StepObservation& o : obs)
        if (usable(o) && (o.borrowed || o.nodes < max_nodes)) inside.push_back(o);
    if (inside.empty()) return kExtrapolation;
    const StepFit sub = fit_coefficients(inside);
    if (sub.runs == 0 || sub.max_nodes < 1) return kExtrapolation;
    const double d = std::log2(static_cast<double>(max_nodes) / sub.max_nodes);
    double excess = 0;
    int n = 0;
    for (const StepObservation& o : obs) {
        if (!usable(o) || o.borrowed || o.nodes != max_nodes) continue;
        const double tau = sub.seconds(o.nodes, o.ranks_per_node, o.local_batch, o.model_seconds, o.compute_seconds);
        excess += std::pow((o.measured_seconds - tau) / tau, 2) - sub.sigma * sub.sigma;
        ++n;
    }
    if (n == 0 || !(d > 0)) return kExtrapolation;
    const double per_doubling = std::sqrt(std::max(0.0, excess / n)) / d;
    return std::isfinite(per_doubling) ? std::max(kExtrapolation, per_doubling) : kExtrapolation;
}

StepFit StepFit::fit_coefficients(const std::vector<StepObservation>& obs) {
    StepFit f;
    std::vector<const StepObservation*> use, borrowed;
    Design global, per_batch;
    for (const StepObservation& o : obs) {
        if (!usable(o)) continue;
        const int r = std::max(1, o.ranks_per_node);
        global.ranks.push_back(r);
        if (o.borrowed) {
            borrowed.push_back(&o);
            continue;
        }
        use.push_back(&o);
        per_batch.batches.push_back({r, batch_key(o.local_batch)});
    }
    if (use.empty()) return f;
    std::sort(global.ranks.begin(), global.ranks.end());
    global.ranks.erase(std::unique(global.ranks.begin(), global.ranks.end()), global.ranks.end());
    std::sort(per_batch.batches.begin(), per_batch.batches.end());
    per_batch.batches.erase(std::unique(per_batch.batches.begin(), per_batch.batches.end()), per_batch.batches.end());
    per_batch.ranks = global.ranks;
    // u: the median compute part of the runs, the exchange term's scale (seconds)
    std::vector<double> cs;
    for (const StepObservation* o : use) cs.push_back(o->compute_seconds);
    std::nth_element(cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(cs.size() / 2), cs.end());
    const double u = cs[cs.size() / 2];
    const Rows rows = rows_of(use, global, u);
    const Normal normal = normal_equations(rows, rows_of(borrowed, global, u), global);
    Posterior post = posterior(rows, global, normal);
    Design chosen = global;
    if (rows.placements >= 2) {
        // the per-batch form unless the runs, their placements left out, say it predicts worse:
        // the mean paired difference of the squared errors above its standard error
        const Rows rows_b = rows_of(use, per_batch, u);
        const Normal normal_b = normal_equations(rows_b, rows_of(borrowed, per_batch, u), per_batch);
        const Posterior post_b = posterior(rows_b, per_batch, normal_b);
        const std::vector<double> e2 = placements_left_out(rows, global, normal, post.sigma);
        const std::vector<double> e2_b = placements_left_out(rows_b, per_batch, normal_b, post_b.sigma);
        const double n = static_cast<double>(e2.size());
        double sum = 0, sum_b = 0, diff = 0, diff2 = 0;
        for (size_t i = 0; i < e2.size(); ++i) {
            sum += e2[i], sum_b += e2_b[i];
            diff += e2_b[i] - e2[i], diff2 += (e2_b[i] - e2[i]) * (e2_b[i] - e2[i]);
        }
        f.left_out_error = std::sqrt(sum / n);
        f.left_out_error_per_batch = std::sqrt(sum_b / n);
        const double mean = diff / n, var = n > 1 ? std::max(0.0, (diff2 - n * mean * mean) / (n - 1)) : 0.0;
        if (!(mean > std::sqrt(var / n))) {
            post = post_b;
            chosen = per_batch;
        }
    }
    f.runs = static_cast<int>(use.size());
    f.borrowed = static_cast<int>(borrowed.size());
    for (const StepObservation* o : use) f.max_nodes = std::max(f.max_nodes, o->nodes);
    f.scale_seconds = u;
    f.theta0 = post.beta(0);
    f.phi0 = post.beta(1);
    for (size_t k = 0; k < chosen.ranks.size(); ++k) {
        const Eigen::Index j = 2 + 2 * static_cast<Eigen::Index>(k);
        f.per_ranks[chosen.ranks[k]] = {post.beta(j), post.beta(j + 1)};
    }
    for (size_t k = 0; k < chosen.batches.size(); ++k)
        f.per_batch[chosen.batches[k]] = post.beta(2 + 2 * static_cast<Eigen::Index>(chosen.ranks.size()) + static_cast<Eigen::Index>(k));
    f.covariance.assign(post.cov.data(), post.cov.data() + post.cov.size());  // symmetric: row-major = column-major
    f.sigma = post.sigma;
    return f;
}

double StepFit::batch_key(double local_batch) { return std::round(local_batch * 1e3) / 1e3; }

namespace {

// theta and phi at (K, R, b), and with `variance` x' Sigma x of the feature row there (compute
// part c; else 0), from one lookup of R and one of (R, b). The columns: theta_0 and phi_0, then
// theta'_R and phi'_R when R was run, then theta''_{R,b} when (R, b) has a term (in the order of
// per_ranks, then per_batch).
struct At {
    double theta = 0, phi = 0, variance = 0;
};

At at(const StepFit& f, int nodes, int ranks_per_node, double local_batch, double c, bool variance = true) {
    At a;
    a.theta = f.theta0, a.phi = f.phi0;
    const int R = std::max(1, ranks_per_node);
    const double e = StepFit::psi(nodes, R) * f.scale_seconds;
    const size_t p = 2 + 2 * f.per_ranks.size() + f.per_batch.size();
    const bool cov = variance && f.covariance.size() == p * p;
    size_t idx[5] = {0, 1, 0, 0, 0};
    double x[5] = {c, e, c, e, c};
    size_t nz = 2;
    const auto r = f.per_ranks.find(R);
    if (r != f.per_ranks.end()) {
        a.theta += r->second.first, a.phi += r->second.second;
        if (cov) idx[nz] = 2 + 2 * static_cast<size_t>(std::distance(f.per_ranks.begin(), r)), idx[nz + 1] = idx[nz] + 1;
        nz += 2;
    }
    const auto g = f.per_batch.empty() ? f.per_batch.end() : f.per_batch.find({R, StepFit::batch_key(local_batch)});
    if (g != f.per_batch.end()) {
        a.theta += g->second;
        if (cov) idx[nz] = 2 + 2 * f.per_ranks.size() + static_cast<size_t>(std::distance(f.per_batch.begin(), g));
        ++nz;
    }
    if (!cov) {
        a.variance = variance ? std::numeric_limits<double>::quiet_NaN() : 0.0;
        return a;
    }
    for (size_t i = 0; i < nz; ++i)
        for (size_t j = 0; j < nz; ++j) a.variance += x[i] * x[j] * f.covariance[idx[i] * p + idx[j]];
    return a;
}

// tau = max(kFloor m, c (1 + theta), m + c theta + psi(K, R) u phi) for the terms `a` at (K, R).
double tau_at(const StepFit& f, const At& a, int nodes, int ranks_per_node, double m, double c) {
    return std::max({StepFit::kFloor * m, c + c * a.theta,
                     m + c * a.theta + StepFit::psi(nodes, ranks_per_node) * f.scale_seconds * a.phi});
}

// The sd of a new run at K with prediction tau, given x' Sigma x (NaN: no covariance, sigma tau).
double sd_at(const StepFit& f, double variance, int nodes, double tau) {
    if (std::isnan(variance)) return f.sigma * tau;
    const double d = nodes > f.max_nodes && f.max_nodes > 0 ? std::log2(static_cast<double>(nodes) / f.max_nodes) : 0.0;
    // a new run's relative sd: the residuals' sigma, or the error of the runs predicted with their
    // placements left out where that is larger
    const double left_out = f.per_batch.empty() ? f.left_out_error : f.left_out_error_per_batch;
    const double run_sd = !(left_out > f.sigma) ? f.sigma : left_out;
    return std::sqrt(std::max(0.0, variance) + std::pow(run_sd * tau, 2) + std::pow(f.extrapolation * d * tau, 2));
}

}  // namespace

std::pair<double, double> StepFit::terms(int ranks_per_node, double local_batch) const {
    const At a = at(*this, 1, ranks_per_node, local_batch, 0.0, false);
    return {a.theta, a.phi};
}

double StepFit::correction(int nodes, int ranks_per_node, double local_batch, double compute_seconds) const {
    if (runs == 0) return 0.0;
    const At a = at(*this, nodes, ranks_per_node, local_batch, compute_seconds, false);
    return compute_seconds * a.theta + psi(nodes, ranks_per_node) * scale_seconds * a.phi;
}

double StepFit::compute_correction(int ranks_per_node, double local_batch, double compute_seconds) const {
    if (runs == 0) return 0.0;
    return compute_seconds * terms(ranks_per_node, local_batch).first;
}

double StepFit::seconds(int nodes, int ranks_per_node, double local_batch, double model_seconds,
                        double compute_seconds) const {
    if (runs == 0) return model_seconds;
    const At a = at(*this, nodes, ranks_per_node, local_batch, compute_seconds, false);
    return tau_at(*this, a, nodes, ranks_per_node, model_seconds, compute_seconds);
}

double StepFit::sd(int nodes, int ranks_per_node, double local_batch, double tau, double compute_seconds) const {
    if (runs == 0) return 0.0;
    return sd_at(*this, at(*this, nodes, ranks_per_node, local_batch, compute_seconds).variance, nodes, tau);
}

StepFit::Prediction StepFit::predict(int nodes, int ranks_per_node, double local_batch, double model_seconds,
                                     double compute_seconds) const {
    Prediction out;
    out.seconds = model_seconds;
    if (runs == 0) return out;
    const At a = at(*this, nodes, ranks_per_node, local_batch, compute_seconds);
    out.compute_correction = compute_seconds * a.theta;
    // at least the compute part with the share the runs add: an exchange cannot make a step shorter
    out.seconds = tau_at(*this, a, nodes, ranks_per_node, model_seconds, compute_seconds);
    out.sd = sd_at(*this, a.variance, nodes, out.seconds);
    return out;
}

}  // namespace tula
