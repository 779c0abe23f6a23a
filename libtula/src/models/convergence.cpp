// libtula: epochs to a target vs the global batch from the gradient noise scale
// (ConvergenceModel; McCandlish et al. 2018; the B_crit fit is in convergence_fit.cpp).
#include "tula/models.hpp"


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

}  // namespace tula
