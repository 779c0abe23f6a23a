// libtula: the step model fitted to the finished runs (StepFit, step_fit.hpp; docs/models.md,
// "The step fitted to the runs").
#include "tula/step_fit.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <iterator>

namespace tula {

namespace {

// psi(K) = 2 (K - 1) / K: the ring allreduce's bandwidth term relative to 2 nodes.
double psi(int nodes) { return nodes <= 1 ? 0.0 : 2.0 * (nodes - 1) / nodes; }

bool usable(const StepObservation& o) {
    return o.measured_seconds > 0 && o.model_seconds > 0 && o.compute_seconds > 0 && std::isfinite(o.measured_seconds) &&
           std::isfinite(o.model_seconds) && std::isfinite(o.compute_seconds);
}

// The feature row (seconds) of (K, R) at compute part c over the coefficients theta_0, phi_0,
// then (theta'_R, phi'_R) per R in `ranks` order: c for theta, psi(K) u for phi; an R not in
// `ranks` gets the pooled terms only.
Eigen::RowVectorXd features(const std::vector<int>& ranks, int nodes, int ranks_per_node, double c, double u) {
    Eigen::RowVectorXd x = Eigen::RowVectorXd::Zero(2 + 2 * static_cast<Eigen::Index>(ranks.size()));
    x(0) = c;
    x(1) = psi(nodes) * u;
    const auto it = std::find(ranks.begin(), ranks.end(), ranks_per_node);
    if (it != ranks.end()) {
        const Eigen::Index j = 2 + 2 * (it - ranks.begin());
        x(j) = x(0);
        x(j + 1) = x(1);
    }
    return x;
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
    std::vector<StepObservation> inside;
    for (const StepObservation& o : obs)
        if (usable(o) && o.nodes < max_nodes) inside.push_back(o);
    if (inside.empty()) return kExtrapolation;
    const StepFit sub = fit_coefficients(inside);
    if (sub.runs == 0 || sub.max_nodes < 1) return kExtrapolation;
    const double d = std::log2(static_cast<double>(max_nodes) / sub.max_nodes);
    double excess = 0;
    int n = 0;
    for (const StepObservation& o : obs) {
        if (!usable(o) || o.nodes != max_nodes) continue;
        const double tau = sub.seconds(o.nodes, o.ranks_per_node, o.model_seconds, o.compute_seconds);
        excess += std::pow((o.measured_seconds - tau) / tau, 2) - sub.sigma * sub.sigma;
        ++n;
    }
    if (n == 0 || !(d > 0)) return kExtrapolation;
    const double per_doubling = std::sqrt(std::max(0.0, excess / n)) / d;
    return std::isfinite(per_doubling) ? std::max(kExtrapolation, per_doubling) : kExtrapolation;
}

StepFit StepFit::fit_coefficients(const std::vector<StepObservation>& obs) {
    StepFit f;
    std::vector<const StepObservation*> use;
    std::vector<int> ranks;
    for (const StepObservation& o : obs) {
        if (!usable(o)) continue;
        use.push_back(&o);
        const int r = std::max(1, o.ranks_per_node);
        if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) ranks.push_back(r);
    }
    if (use.empty()) return f;
    std::sort(ranks.begin(), ranks.end());
    // u: the median compute part of the runs, the exchange term's scale (seconds)
    std::vector<double> cs;
    for (const StepObservation* o : use) cs.push_back(o->compute_seconds);
    std::nth_element(cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(cs.size() / 2), cs.end());
    const double u = cs[cs.size() / 2];
    const Eigen::Index n = static_cast<Eigen::Index>(use.size()), p = 2 + 2 * static_cast<Eigen::Index>(ranks.size());
    // y = s - m with weight 1 / s^2: the residual relative to s
    Eigen::MatrixXd X(n, p);
    Eigen::VectorXd y(n), w(n);
    for (Eigen::Index i = 0; i < n; ++i) {
        const StepObservation& o = *use[static_cast<size_t>(i)];
        X.row(i) = features(ranks, o.nodes, std::max(1, o.ranks_per_node), o.compute_seconds, u);
        y(i) = o.measured_seconds - o.model_seconds;
        w(i) = 1.0 / (o.measured_seconds * o.measured_seconds);
    }
    Eigen::VectorXd prior_precision(p);
    prior_precision(0) = 1.0 / (kPriorPooled * kPriorPooled);
    prior_precision(1) = 1.0 / (kPriorExchangePooled * kPriorExchangePooled);
    for (Eigen::Index j = 2; j < p; j += 2) {
        prior_precision(j) = 1.0 / (kPriorPerRanks * kPriorPerRanks);
        prior_precision(j + 1) = 1.0 / (kPriorExchangePerRanks * kPriorExchangePerRanks);
    }
    const Eigen::MatrixXd XtW = X.transpose() * w.asDiagonal();
    double sigma = kNoisePrior;
    Eigen::VectorXd beta;
    Eigen::MatrixXd cov;
    // two passes: the posterior at the prior noise, then at the noise its residuals show
    for (int pass = 0; pass < 2; ++pass) {
        const double s2 = sigma * sigma;
        Eigen::MatrixXd A = XtW * X / s2;
        A.diagonal() += prior_precision;
        const Eigen::LDLT<Eigen::MatrixXd> ldlt(A);
        beta = ldlt.solve(XtW * y / s2);
        cov = ldlt.solve(Eigen::MatrixXd::Identity(p, p));
        // relative residuals of the measured steps, pooled with the prior's pseudo-runs
        double rss = 0;
        for (Eigen::Index i = 0; i < n; ++i) rss += w(i) * std::pow(y(i) - X.row(i).dot(beta), 2);
        sigma = std::sqrt((kNoisePriorWeight * kNoisePrior * kNoisePrior + rss) / (kNoisePriorWeight + static_cast<double>(n)));
    }
    f.runs = static_cast<int>(n);
    for (const StepObservation* o : use) f.max_nodes = std::max(f.max_nodes, o->nodes);
    f.scale_seconds = u;
    f.theta0 = beta(0);
    f.phi0 = beta(1);
    for (size_t k = 0; k < ranks.size(); ++k) {
        const Eigen::Index j = 2 + 2 * static_cast<Eigen::Index>(k);
        f.per_ranks[ranks[k]] = {beta(j), beta(j + 1)};
    }
    f.covariance.assign(cov.data(), cov.data() + cov.size());  // symmetric: row-major = column-major
    f.sigma = sigma;
    return f;
}

double StepFit::correction(int nodes, int ranks_per_node, double compute_seconds) const {
    if (runs == 0) return 0.0;
    double theta = theta0, phi = phi0;
    const auto it = per_ranks.find(std::max(1, ranks_per_node));
    if (it != per_ranks.end()) theta += it->second.first, phi += it->second.second;
    return compute_seconds * theta + psi(nodes) * scale_seconds * phi;
}

double StepFit::compute_correction(int ranks_per_node, double compute_seconds) const {
    if (runs == 0) return 0.0;
    double theta = theta0;
    const auto it = per_ranks.find(std::max(1, ranks_per_node));
    if (it != per_ranks.end()) theta += it->second.first;
    return compute_seconds * theta;
}

double StepFit::seconds(int nodes, int ranks_per_node, double model_seconds, double compute_seconds) const {
    return std::max(kFloor * model_seconds, model_seconds + correction(nodes, ranks_per_node, compute_seconds));
}

double StepFit::sd(int nodes, int ranks_per_node, double tau, double compute_seconds) const {
    return sd(nodes, ranks_per_node, tau, compute_seconds, extrapolation);
}

double StepFit::sd(int nodes, int ranks_per_node, double tau, double compute_seconds, double per_doubling) const {
    if (runs == 0) return 0.0;
    const size_t p = 2 + 2 * per_ranks.size();
    if (covariance.size() != p * p) return sigma * tau;
    // x' Sigma x over the (at most four) nonzero entries of the feature row: theta_0 and phi_0,
    // then theta'_R and phi'_R when R was run (features() in the order of per_ranks)
    size_t idx[4] = {0, 1, 0, 0};
    double x[4] = {compute_seconds, psi(nodes) * scale_seconds, 0, 0};
    size_t nz = 2;
    const auto it = per_ranks.find(std::max(1, ranks_per_node));
    if (it != per_ranks.end()) {
        const size_t j = 2 + 2 * static_cast<size_t>(std::distance(per_ranks.begin(), it));
        idx[2] = j, idx[3] = j + 1, x[2] = x[0], x[3] = x[1];
        nz = 4;
    }
    double v = 0;
    for (size_t a = 0; a < nz; ++a)
        for (size_t b = 0; b < nz; ++b) v += x[a] * x[b] * covariance[idx[a] * p + idx[b]];
    const double d = nodes > max_nodes && max_nodes > 0 ? std::log2(static_cast<double>(nodes) / max_nodes) : 0.0;
    return std::sqrt(std::max(0.0, v) + std::pow(sigma * tau, 2) + std::pow(per_doubling * d * tau, 2));
}

}  // namespace tula
