// libtula: the exchange across nodes measured by the runs of a hardware class's workloads, and
// what it says about another workload (class_exchange.hpp; docs/models.md, "Runs of other
// workloads on the class").
#include "tula/class_exchange.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "tula/models.hpp"

namespace tula {

std::vector<ClassExchange> class_exchange(const std::vector<RunRecord>& runs, const std::vector<Workload>& workloads) {
    std::map<std::string, const Workload*> known;
    for (const Workload& w : workloads) known[w.name] = &w;
    // (class, workload, K, R, b) -> the runs' steps, seconds
    using Key = std::tuple<std::string, std::string, int, int, double>;
    std::map<Key, std::vector<double>> steps;
    for (const RunRecord& r : runs) {
        const auto w = known.find(r.workload);
        if (w == known.end() || w->second->params <= 0 || !usable_run(r)) continue;
        const double n = steps_per_epoch(r.examples_per_epoch(static_cast<double>(w->second->train_examples)),
                                         r.global_batch, w->second->last_batch) * r.epochs;
        if (!(n > 0)) continue;
        steps[{r.hardware_class, r.workload, r.nodes, std::max(1, r.ranks_per_node), StepFit::batch_key(r.local_batch())}]
            .push_back(r.measured_seconds / n);
    }
    // (class, workload, K, R) -> per paired local batch, s(K) - s(1)
    std::map<std::tuple<std::string, std::string, int, int>, std::vector<double>> pairs;
    for (const auto& [key, s] : steps) {
        const auto& [cls, workload, K, R, b] = key;
        if (K < 2) continue;
        const auto one = steps.find({cls, workload, 1, R, b});
        if (one != steps.end()) pairs[{cls, workload, K, R}].push_back(median(s) - median(one->second));
    }
    std::vector<ClassExchange> out;
    for (const auto& [key, v] : pairs) {
        ClassExchange e;
        std::tie(e.hardware_class, e.workload, e.nodes, e.ranks_per_node) = key;
        e.bytes = 4.0 * static_cast<double>(known.at(e.workload)->params);
        e.exchange_seconds = median(v);
        e.batches = static_cast<int>(v.size());
        if (std::isfinite(e.exchange_seconds)) out.push_back(e);
    }
    return out;
}

std::vector<StepObservation> borrowed_exchange_observations(
    const std::vector<ClassExchange>& exchange, const Workload& self, const std::string* cls,
    const std::function<double(int)>& local_batch, const std::function<double(int, int, double)>& model_step,
    const std::function<double(int, double)>& across) {
    std::vector<StepObservation> out;
    if (self.params <= 0) return out;
    const double bytes = 4.0 * static_cast<double>(self.params);
    auto positive = [](double x) { return x > 0 && std::isfinite(x); };
    for (const ClassExchange& e : exchange) {
        if (e.workload == self.name || (cls && e.hardware_class != *cls) || e.nodes < 2) continue;
        const int R = std::max(1, e.ranks_per_node);
        const double b = local_batch(R);
        const double m1 = model_step(1, R, b), mK = model_step(e.nodes, R, b);
        const double theirs = across(e.nodes, e.bytes), ours = across(e.nodes, bytes);
        if (!positive(m1) || !positive(mK) || !positive(theirs) || !positive(ours)) continue;
        StepObservation o;
        o.nodes = e.nodes;
        o.ranks_per_node = R;
        o.local_batch = b;
        o.measured_seconds = m1 + std::max(0.0, e.exchange_seconds / theirs) * ours;
        o.model_seconds = mK;
        o.compute_seconds = 0;
        o.borrowed = true;
        out.push_back(o);
    }
    return out;
}

std::vector<AllreduceSample> allreduce_from_runs(const std::vector<ClassExchange>& own,
                                                 const std::vector<AllreduceSample>& profile) {
    auto served = [&](const std::string& cls) {
        for (const AllreduceSample& a : profile)
            if (a.nodes >= 2 && a.ranks_per_node == 1 && (a.hardware_class == cls || a.hardware_class.empty() || cls.empty()))
                return true;
        return false;
    };
    auto usable = [](const ClassExchange& e) {
        return e.exchange_seconds > 0 && std::isfinite(e.exchange_seconds) && e.bytes > 0;
    };
    std::map<std::string, int> fewest_ranks;  // per class without a profile: its fewest R with a usable row
    for (const ClassExchange& e : own) {
        if (!usable(e) || served(e.hardware_class)) continue;
        auto [it, added] = fewest_ranks.emplace(e.hardware_class, e.ranks_per_node);
        if (!added) it->second = std::min(it->second, e.ranks_per_node);
    }
    std::vector<AllreduceSample> out;
    for (const ClassExchange& e : own) {
        const auto it = fewest_ranks.find(e.hardware_class);
        if (it == fewest_ranks.end() || e.ranks_per_node != it->second || !usable(e)) continue;
        AllreduceSample a;
        a.host = "runs";
        a.nodes = e.nodes;
        a.ranks_per_node = 1;
        a.bytes = static_cast<int64_t>(std::llround(e.bytes));
        a.seconds = e.exchange_seconds;
        a.hardware_class = e.hardware_class;
        out.push_back(a);
    }
    return out;
}

}  // namespace tula
