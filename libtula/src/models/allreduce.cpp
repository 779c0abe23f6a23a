// libtula: the across-node allreduce model and the hierarchical allreduce of one step
// (AllreduceModel, hierarchical_allreduce_seconds; models.hpp).
#include "tula/models.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "fit_util.hpp"
#include "tula/error.hpp"

namespace tula {

using namespace models_detail;

// One (nodes K, bytes n) point, measured one or more times (median t): alpha and beta cannot
// both be fitted, so the point is all bandwidth term (alpha = 0, beta = t / (2 (K-1)/K n)), or all
// latency term when n = 0 (beta = 0, alpha = t / (2 (K-1))). docs/models.md, "One message size".
static AllreduceModel fit_one_point(const std::vector<const AllreduceSample*>& use) {
    std::vector<double> ts;
    for (const auto* s : use) ts.push_back(s->seconds);
    const double K = use.front()->nodes, bytes = static_cast<double>(use.front()->bytes), t = median(ts);
    AllreduceModel m;
    if (bytes > 0) {
        m.beta = t / (2.0 * (K - 1.0) / K * bytes);
        m.note = "fitted from 1 (nodes, bytes) point: bandwidth term only (alpha = 0)";
    } else {
        m.alpha = t / (2.0 * (K - 1.0));
        m.note = "fitted from 1 (nodes, bytes) point of 0 bytes: latency term only (beta = 0)";
    }
    double ss = 0;
    for (double x : ts) ss += (x - t) * (x - t);
    m.rmse = std::sqrt(ss / static_cast<double>(ts.size()));
    m.samples = static_cast<int>(use.size());
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
        if (s.nodes < 2) continue;  // T(1, n) = 0 across nodes; nodes = 1 is the within-node profile
        if (s.ranks_per_node > 1) continue;  // several ranks per node: a two-level allreduce, not this model
        use.push_back(&s);
        points.insert({s.nodes, s.bytes});
    }
    if (use.empty()) throw Error("no allreduce profile with 2 or more nodes" + todo);
    const Eigen::Index n = static_cast<Eigen::Index>(use.size());
    if (points.size() == 1) return fit_one_point(use);
    std::set<int> node_counts;
    for (const auto* s : use) node_counts.insert(s->nodes);
    auto fit_alg = [&](Algorithm alg) {
        Eigen::MatrixXd A(n, 2);
        Eigen::VectorXd y(n);
        for (Eigen::Index i = 0; i < n; ++i) {
            const double K = use[static_cast<size_t>(i)]->nodes;
            A(i, 0) = alg == Algorithm::Ring ? 2.0 * (K - 1.0) : 2.0 * std::ceil(std::log2(K) - 1e-12);
            A(i, 1) = 2.0 * (K - 1.0) / K * static_cast<double>(use[static_cast<size_t>(i)]->bytes);
            y(i) = use[static_cast<size_t>(i)]->seconds;
        }
        const Eigen::VectorXd x = nnls_small(A, y);
        AllreduceModel m;
        m.alpha = x(0);
        m.beta = x(1);
        m.rmse = rmse_of(A, x, y);
        m.algorithm = alg;
        m.samples = static_cast<int>(n);
        return m;
    };
    AllreduceModel best = fit_alg(Algorithm::Ring);
    if (node_counts.size() >= 3) {
        const AllreduceModel rab = fit_alg(Algorithm::Rabenseifner);
        if (rab.rmse < best.rmse) best = rab;
    }
    // each node count's own measurements: the median seconds per message size
    std::map<int, std::map<double, std::vector<double>>> by_k;
    for (const auto* s : use) by_k[s->nodes][static_cast<double>(s->bytes)].push_back(s->seconds);
    for (auto& [k, sizes] : by_k) {
        if (sizes.size() < 2) continue;
        auto& pts = best.measured[k];
        for (auto& [bytes, ts] : sizes) pts.emplace_back(bytes, median(ts));
    }
    return best;
}

double bus_bandwidth_seconds(const BusBandwidthTable& table, int ranks, double bytes) {
    if (ranks <= 1 || !(bytes > 0) || table.empty()) return 0.0;
    const double share = 2.0 * (ranks - 1.0) / ranks;
    const auto& lo = table.front();
    if (!(bytes > lo.first)) return share * lo.first / lo.second;  // latency bound: the smallest's time
    const auto& hi = table.back();
    if (!(bytes < hi.first)) return share * bytes / hi.second;
    size_t i = 1;
    while (table[i].first < bytes) ++i;  // table[i-1].first < bytes <= table[i].first
    const auto& [s0, b0] = table[i - 1];
    const auto& [s1, b1] = table[i];
    const double w = std::log(bytes / s0) / std::log(s1 / s0);
    return share * bytes / (b0 + w * (b1 - b0));
}

namespace {

// The measured seconds of `p` (one node count's (bytes, median seconds), ascending, >= 2 sizes)
// at `bytes`: interpolated linearly, the smallest size's value below it, the last two sizes'
// slope (at least 0) above the largest.
double measured_at(const std::vector<std::pair<double, double>>& p, double bytes) {
    if (!(bytes > p.front().first)) return p.front().second;
    const size_t i = knot_segment(p, bytes);
    const auto& [n0, t0] = p[i - 1];
    const auto& [n1, t1] = p[i];
    const double slope = (t1 - t0) / (n1 - n0);
    if (bytes > n1) return t1 + std::max(0.0, slope) * (bytes - n1);  // beyond the largest size
    return t0 + slope * (bytes - n0);
}

}  // namespace

double AllreduceModel::seconds(int nodes, double bytes) const {
    if (nodes <= 1) return 0.0;
    const auto it = measured.find(nodes);
    if (it == measured.end() && !bus_bandwidth.empty()) {
        const int g = std::max(1, devices_per_node);
        const double local = intra_bus_bandwidth.empty() ? intra_node_allreduce_seconds(g, bytes, intra_bandwidth)
                                                         : bus_bandwidth_seconds(intra_bus_bandwidth, g, bytes);
        const double whole = bus_bandwidth_seconds(bus_bandwidth, static_cast<int>(std::min<double>(
                                                                       double(nodes) * g, 2e9)), bytes);
        return std::max(0.0, whole - local);
    }
    if (it != measured.end()) return measured_at(it->second, bytes);
    // another node count: the formula, at least what the most nodes measured below it took (an
    // allreduce over more nodes sends no less and takes no fewer steps)
    const double model = modelled_seconds(nodes, bytes);
    const auto below = measured.lower_bound(nodes);
    return below == measured.begin() ? model : std::max(model, measured_at(std::prev(below)->second, bytes));
}

std::string AllreduceModel::measured_nodes() const {
    std::string ks;
    for (const auto& kv : measured) ks += (ks.empty() ? "" : ",") + std::to_string(kv.first);
    return ks;
}

double AllreduceModel::modelled_seconds(int nodes, double bytes) const {
    if (nodes <= 1) return 0.0;
    const double K = nodes;
    const double steps = algorithm == Algorithm::Ring ? 2.0 * (K - 1.0) : 2.0 * std::ceil(std::log2(K) - 1e-12);
    return steps * alpha + 2.0 * (K - 1.0) / K * bytes * beta;
}

bool AllreduceModel::has_inter_node(const std::vector<AllreduceSample>& samples) {
    return std::any_of(samples.begin(), samples.end(),
                       [](const AllreduceSample& s) { return s.nodes >= 2 && s.ranks_per_node <= 1; });
}

double hierarchical_allreduce_seconds(const AllreduceModel* across, int nodes, int ranks_per_node, double bytes,
                                      double intra_bandwidth) {
    const double inter = across && nodes > 1 ? across->seconds(nodes, bytes) : 0.0;
    return intra_node_allreduce_seconds(ranks_per_node, bytes, intra_bandwidth) + inter;
}

GradientAllreduce bucketed_allreduce(const AllreduceModel* across, int nodes, int ranks_per_node, double bytes,
                                     double intra_bandwidth, double bucket_bytes) {
    GradientAllreduce g;
    g.seconds = hierarchical_allreduce_seconds(across, nodes, ranks_per_node, bytes, intra_bandwidth);
    if (!(bucket_bytes > 0) || !(bucket_bytes < bytes)) {
        g.last_seconds = g.seconds;
        return g;
    }
    const double k = std::floor(bytes / bucket_bytes);
    g.full_buckets = static_cast<int>(std::min(k, 1e9));
    g.bucket_fraction = bucket_bytes / bytes;
    g.bucket_seconds = hierarchical_allreduce_seconds(across, nodes, ranks_per_node, bucket_bytes, intra_bandwidth);
    const double last = bytes - k * bucket_bytes;
    g.last_seconds = last > 0 ? hierarchical_allreduce_seconds(across, nodes, ranks_per_node, last, intra_bandwidth) : 0.0;
    return g;
}

double GradientAllreduce::exposed_seconds(double backward_seconds) const {
    const double w = std::max(0.0, backward_seconds);
    if (full_buckets <= 0) return last_seconds;
    const double k = full_buckets, tau = bucket_seconds, s = bucket_fraction;
    const double full_end = std::max(w * s + k * tau, w * k * s + tau);
    const double end = last_seconds > 0 ? std::max(full_end, w) + last_seconds : full_end;
    return std::max(0.0, end - w);
}

}  // namespace tula
