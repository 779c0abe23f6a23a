// libtula: device memory of one rank vs its local batch (MemoryModel; models.hpp).
#include "tula/models.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "fit_util.hpp"
#include "tula/error.hpp"

namespace tula {

using namespace models_detail;

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

}  // namespace tula
