// libtula private: the least-squares solvers of fit_util.hpp, compiled once (Eigen's QR is
// instantiated here only).
#include "fit_util.hpp"

#include <Eigen/Dense>

namespace tula {
namespace models_detail {

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

// Lawson & Hanson 1974, ch. 23: every subset of the columns, the full set first (it wins ties).
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

}  // namespace models_detail
}  // namespace tula
