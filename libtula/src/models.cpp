// libtula: performance models fitted from profiles (see models.hpp).
#include "tula/models.hpp"

#include <Eigen/Dense>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "tula/error.hpp"

namespace tula {
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

ComputeModel ComputeModel::fit(const std::vector<ComputeSample>& samples) {
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
    const Eigen::Index n = static_cast<Eigen::Index>(samples.size());
    Eigen::MatrixXd A(n, 2);
    Eigen::VectorXd y(n);
    for (Eigen::Index i = 0; i < n; ++i) {
        A(i, 0) = 1.0;
        A(i, 1) = samples[static_cast<size_t>(i)].local_batch;
        y(i) = samples[static_cast<size_t>(i)].seconds_per_iter;
    }
    const Eigen::VectorXd x = nnls_small(A, y);
    ComputeModel m;
    m.t0 = x(0);
    m.t1 = x(1);
    m.min_batch = *batches.begin();
    m.max_batch = *batches.rbegin();
    m.rmse = rmse_of(A, x, y);
    return m;
}

AllreduceModel AllreduceModel::fit(const std::vector<AllreduceSample>& samples) {
    const std::string todo = "; run `tula profile allreduce` on 2 or more nodes";
    std::vector<const AllreduceSample*> use;
    std::set<std::pair<int, int64_t>> points;
    for (const auto& s : samples) {
        if (s.nodes < 1 || s.bytes < 0 || !std::isfinite(s.seconds) || s.seconds < 0)
            throw Error("allreduce profile has an invalid sample (" + std::to_string(s.nodes) + " nodes, " +
                        std::to_string(s.bytes) + " bytes, " + std::to_string(s.seconds) + " s)" + todo);
        if (s.nodes < 2) continue;  // T(1, n) = 0 by definition: carries no information
        use.push_back(&s);
        points.insert({s.nodes, s.bytes});
    }
    if (use.empty()) throw Error("no allreduce profile with 2 or more nodes" + todo);
    if (points.size() < 2)
        throw Error("allreduce profile has only 1 distinct (nodes, bytes) point; need at least 2" + todo +
                    " with 2 node counts or 2 message sizes");
    const Eigen::Index n = static_cast<Eigen::Index>(use.size());
    Eigen::MatrixXd A(n, 2);
    Eigen::VectorXd y(n);
    for (Eigen::Index i = 0; i < n; ++i) {
        const double K = use[static_cast<size_t>(i)]->nodes;
        A(i, 0) = 2.0 * (K - 1.0);
        A(i, 1) = 2.0 * (K - 1.0) / K * static_cast<double>(use[static_cast<size_t>(i)]->bytes);
        y(i) = use[static_cast<size_t>(i)]->seconds;
    }
    const Eigen::VectorXd x = nnls_small(A, y);
    AllreduceModel m;
    m.alpha = x(0);
    m.beta = x(1);
    m.rmse = rmse_of(A, x, y);
    return m;
}

double AllreduceModel::seconds(int nodes, double bytes) const {
    if (nodes <= 1) return 0.0;
    const double K = nodes;
    return 2.0 * (K - 1.0) * alpha + 2.0 * (K - 1.0) / K * bytes * beta;
}

}  // namespace tula
