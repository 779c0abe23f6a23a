// libtula private: the numerical helpers the model fits share (least squares, knots). Not
// installed; only models/*.cpp include it.
#pragma once
#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace tula {
namespace models_detail {


// Ordinary least squares min ||A x - y||_2 by column-pivoted Householder QR (Eigen). Columns
// are scaled to unit norm first so that features of very different magnitude (steps vs
// bytes) do not upset the rank decision; an all-zero column gets coefficient 0.
inline Eigen::VectorXd lstsq(const Eigen::MatrixXd& A, const Eigen::VectorXd& y) {
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
inline Eigen::VectorXd nnls_small(const Eigen::MatrixXd& A, const Eigen::VectorXd& y) {
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

inline double rmse_of(const Eigen::MatrixXd& A, const Eigen::VectorXd& x, const Eigen::VectorXd& y) {
    return std::sqrt((A * x - y).squaredNorm() / static_cast<double>(y.size()));
}

// Linear interpolation between the knots a and c at b (a.first < b < c.first).
inline double lerp_knots(const std::pair<int, double>& a, const std::pair<int, double>& c, double b) {
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

}  // namespace models_detail
}  // namespace tula
