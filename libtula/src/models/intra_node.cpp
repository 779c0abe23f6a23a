// libtula: the within-node allreduce among the ranks of one node (IntraNodeModel,
// intra_node_allreduce_seconds; models.hpp).
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

}  // namespace tula
