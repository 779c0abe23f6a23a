// libtula: test accuracy vs the global batch from the run history (AccuracyModel; models.hpp).
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
