// libtula: a workload with finished runs but no compute profile, profiled by its runs
// (predict.hpp, ProfileFromRuns; docs/models.md, "A workload planned from its runs").
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "tula/error.hpp"
#include "tula/models.hpp"
#include "tula/predict.hpp"

namespace tula {

ProfileFromRuns profile_from_runs(const std::string& name, const std::optional<Workload>& known,
                                  const std::vector<RunRecord>& runs) {
    ProfileFromRuns p;
    if (known) {
        p.workload = *known;
    } else {
        p.workload.name = name;
        const size_t at = name.find('@');
        p.workload.model = name.substr(0, at);
        p.workload.dataset = at == std::string::npos ? std::string() : name.substr(at + 1);
    }
    std::vector<const RunRecord*> mine;
    for (const RunRecord& r : runs)
        if (r.workload == name && usable_run(r)) {
            mine.push_back(&r);
            if (!known) p.workload.train_examples = std::max(p.workload.train_examples, r.train_examples);
        }
    const std::string todo = "; run `tula profile compute --workload " + name +
                             "`, or submit it with sbatch --tula: its first job measures itself";
    if (mine.empty()) throw NoProfileError("no profile for workload " + name + todo, name);
    if (p.workload.train_examples <= 0)
        throw NoProfileError("workload " + name + " has no profile, and its runs do not record the examples of an epoch" + todo,
                             name);
    p.runs = static_cast<int>(mine.size());
    p.nodes = mine.front()->nodes;
    for (const RunRecord* r : mine) p.nodes = std::min(p.nodes, r->nodes);
    p.ranks_per_node = 0;
    for (const RunRecord* r : mine)
        if (r->nodes == p.nodes) {
            const int R = std::max(1, r->ranks_per_node);
            p.ranks_per_node = p.ranks_per_node == 0 ? R : std::min(p.ranks_per_node, R);
        }
    std::set<int> batches;
    for (const RunRecord* r : mine) {
        if (r->nodes != p.nodes || std::max(1, r->ranks_per_node) != p.ranks_per_node) continue;
        const double steps = steps_per_epoch(r->examples_per_epoch(static_cast<double>(p.workload.train_examples)),
                                             r->global_batch, p.workload.last_batch) *
                             r->epochs;
        const double b = r->local_batch();
        if (!(steps >= 1) || std::fabs(b - std::round(b)) > 1e-9) continue;  // a local batch the ranks split unevenly
        ComputeSample s;
        s.workload = name;
        s.local_batch = static_cast<int>(std::lround(b));
        s.seconds_per_iter = r->measured_seconds / steps;
        s.iters = static_cast<int>(std::min(steps, 1e9));
        s.hardware_class = r->hardware_class;
        p.compute.push_back(s);
        batches.insert(s.local_batch);
    }
    if (batches.size() < 2)
        throw NoProfileError("workload " + name + " has no profile, and its runs on " + std::to_string(p.nodes) + " node(s) x " +
                    std::to_string(p.ranks_per_node) + " rank(s) per node are at " + std::to_string(batches.size()) +
                    " local batch size(s); planning from runs needs at least 2" + todo,
                             name);
    return p;
}

}  // namespace tula
