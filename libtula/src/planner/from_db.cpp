// libtula: the planner's entry points that start from profile databases. They read what a plan
// needs (load_plan_data) and hand it to the pure planner (plan_node_counts) or to check_runs;
// nothing else in the planner opens a database.
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tula/class_exchange.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/planner.hpp"
#include "tula/predict.hpp"
#include "tula/validate.hpp"

namespace tula {

namespace {

// A class of the workload's runs without an across-node allreduce profile takes the exchange
// its multi-node runs measured (allreduce_from_runs), with a warning per class.
void add_allreduce_from_runs(PlanData* d, std::vector<std::string>* warn) {
    const std::vector<AllreduceSample> add = allreduce_from_runs(class_exchange(d->runs, {d->workload}), d->allreduce);
    std::map<std::string, std::set<int>> nodes;  // per class, the node counts
    for (const AllreduceSample& a : add) nodes[a.hardware_class].insert(a.nodes);
    for (const auto& [cls, ks] : nodes) {
        std::string list;
        for (int k : ks) list += (list.empty() ? "" : ", ") + std::to_string(k);
        warn->push_back("no across-node allreduce profile" + (cls.empty() ? std::string() : " of class " + cls) +
                        ": the allreduce is taken from the exchange the runs of " + d->workload.name +
                        " measured on " + list + " nodes (their step less the step on one node); `tula profile "
                        "allreduce` measures it apart");
    }
    d->allreduce.insert(d->allreduce.end(), add.begin(), add.end());
}

}  // namespace

PlanData load_plan_data(const std::vector<std::string>& db_paths, const std::string& workload,
                        std::vector<std::string>* warnings, bool class_exchange_runs) {
    std::vector<std::string> local;
    std::vector<std::string>* warn = warnings ? warnings : &local;
    const size_t warned = warn->size();
    PlanData d;
    // Only this workload's compute samples (a site database may hold many workloads' rows),
    // and its run history (finished runs) through the same connections, and when asked the
    // exchange across nodes that the other workloads' runs measured.
    std::vector<RunRecord> others;  // the other workloads' runs, for the exchange of their classes
    const ProfileSet set = load_profiles(db_paths, warn, workload, &d.runs, class_exchange_runs ? &others : nullptr);
    d.class_exchange = class_exchange(others, set.workloads);
    const std::optional<Workload> w = set.find(workload);
    d.compute = set.compute_for(workload);
    d.allreduce = set.allreduce;
    if (w && !d.compute.empty()) {
        d.workload = *w;
        add_allreduce_from_runs(&d, warn);
        return d;
    }
    // no compute profile: the runs are the profile (throws the "run tula profile compute"
    // message when they cannot be). It is a workload without a profile (NoProfileError) only
    // when every database was read and one holds something; else the databases are the problem.
    ProfileFromRuns p;
    try {
        p = profile_from_runs(workload, w, d.runs);
    } catch (const NoProfileError& e) {
        const bool any = !set.workloads.empty() || !set.allreduce.empty() || !d.runs.empty();
        if (warn->size() != warned || !any) throw Error(e.what());
        throw;
    }
    d.workload = std::move(p.workload);
    d.compute = std::move(p.compute);
    d.profile_runs = p.runs;
    warn->push_back("workload " + workload + " has no compute profile: planned from its " + std::to_string(p.runs) +
                    " finished run(s), the compute part from the " + std::to_string(d.compute.size()) + " on " +
                    std::to_string(p.nodes) + " node(s) x " + std::to_string(p.ranks_per_node) +
                    " rank(s) per node; `tula profile compute --workload " + workload + "` measures it apart");
    add_allreduce_from_runs(&d, warn);
    return d;
}

Plan plan_workload(const Config& cfg, const std::vector<std::string>& db_paths, const std::string& workload, int epochs,
                   int max_nodes, int fixed_nodes, Policy policy, std::vector<std::string>* warnings,
                   const EpochExamples& examples) {
    PolicySpec spec;
    spec.policy = policy;
    return plan_workload(cfg, db_paths, workload, epochs, max_nodes, fixed_nodes, spec, warnings, examples);
}

Plan plan_workload(const Config& cfg, const std::vector<std::string>& db_paths, const std::string& workload, int epochs,
                   int max_nodes, int fixed_nodes, const PolicySpec& policy, std::vector<std::string>* warnings,
                   const EpochExamples& examples) {
    const PlanData d = load_plan_data(db_paths, workload, warnings);
    return plan_node_counts(cfg, d, epochs, max_nodes, {fixed_nodes}, policy, warnings, examples).front();
}

std::optional<RunCheck> check_recorded_run(const Config& cfg, const std::vector<std::string>& db_paths, const RunRecord& run,
                                           std::vector<std::string>* warnings) {
    std::vector<std::string> local;
    std::vector<RunRecord> runs;
    const ProfileSet set = load_profiles(db_paths, warnings ? warnings : &local, run.workload, &runs);
    const std::optional<Workload> w = set.find(run.workload);
    if (!w) return std::nullopt;
    try {
        const TimeModels models =
            fit_profile_models(cfg, *w, set.compute_for(run.workload), set.allreduce, Corrections{}, nullptr);
        // Only the run's own job id is checked; the newest such run is the one asked for
        // unless `run` itself is older (then it is matched by its creation time).
        for (auto& c : check_runs(models, runs, runs.size(), 0.95, run.job_id))
            if (c.created == run.created) return c;
    } catch (const Error&) {
        return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace tula
