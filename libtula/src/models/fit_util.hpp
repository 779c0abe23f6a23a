// libtula private: the numerical helpers the model fits share (least squares, knots). Not
// installed; only models/*.cpp include it.
#pragma once
// Eigen/Core only: the solvers are compiled once, in fit_util.cpp.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>
#include <vector>

namespace tula {
namespace models_detail {


// Ordinary least squares min ||A x - y||_2 by column-pivoted Householder QR (Eigen). A is
// (rows, k), y (rows); returns x (k). Columns are scaled to unit norm first so that features of
// very different magnitude (steps vs bytes) do not upset the rank decision; an all-zero column
// gets coefficient 0.
Eigen::VectorXd lstsq(const Eigen::MatrixXd& A, const Eigen::VectorXd& y);

// Non-negative least squares min ||A x - y||_2 subject to x >= 0, for a handful of columns
// (k <= about 6: every subset is tried): the optimum is the unconstrained least-squares solution
// on some subset S of the columns (x = 0 outside S) that comes out non-negative (Lawson & Hanson
// 1974, ch. 23, KKT conditions); the feasible subset with the smallest residual wins.
Eigen::VectorXd nnls_small(const Eigen::MatrixXd& A, const Eigen::VectorXd& y);

// The root mean square of A x - y, in y's unit.
double rmse_of(const Eigen::MatrixXd& A, const Eigen::VectorXd& x, const Eigen::VectorXd& y);

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
