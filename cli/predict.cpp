// tula CLI: `tula predict` -- the predicted training time of one configuration (nodes, ranks
// per node, global batch, epochs) of a workload, from the same prediction the planner ranks
// candidates with (tula/predict.hpp). The report scripts read its JSON (tula(1), "tula predict").
#include <cmath>
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "format.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/predict.hpp"

namespace tula::cli {
namespace {

struct PredictOptions {
    CommonOptions common;
    std::string workload;
    std::string partition;  // "" : the first partition that can be predicted
    int nodes = 1;
    int ranks_per_node = 1;
    int global_batch = 0;
    int epochs = 1;
    EpochExamples examples;  // tula-train's --limit-train, --limit-test and --val-split; 0: absent
    std::string with;     // --with LIST: corrections switched on (Corrections::select)
    std::string without;      // corrections switched off (Corrections::without)
    std::string format = "json";
};

// The target of partition `name` in `m` ("" : the first without a reason to leave it out).
// Errors: tula::Error naming the partitions when there is none such.
const PartitionTarget& find_target(const TimeModels& m, const std::string& name) {
    std::string names;
    for (const PartitionTarget& t : m.targets) {
        if ((name.empty() || t.conf.name == name) && t.left_out.empty()) return t;
        if (!name.empty() && t.conf.name == name) throw Error("partition " + name + " cannot be predicted: " + t.left_out);
        names += (names.empty() ? "" : ", ") + (t.conf.name.empty() ? std::string("(implicit)") : t.conf.name);
    }
    throw Error(name.empty() ? "no partition of tula.conf can be predicted for " + m.workload.name
                             : "no partition " + name + " in tula.conf (its partitions: " + names + ")");
}

// The JSON of one prediction (tula(1), tula predict): the job's training, interval, evaluation,
// node-hours and cost, and the parts of its step.
Json prediction_json(const PredictOptions& o, const Predictor& pred, const JobPrediction& job, double examples,
                     const std::vector<std::string>& warnings) {
    const RunPrediction& p = job.run;
    const StepPrediction& s = p.step;
    const PartitionTarget& t = pred.target();
    Json j;
    j["status"] = "ok";
    j["workload"] = o.workload;
    j["partition"] = t.conf.name;
    j["nodes"] = o.nodes;
    j["ranks_per_node"] = o.ranks_per_node;
    j["global_batch"] = o.global_batch;
    j["local_batch"] = o.global_batch / (o.nodes * o.ranks_per_node);
    j["epochs"] = o.epochs;
    j["examples_per_epoch"] = static_cast<int64_t>(examples);
    j["steps_per_epoch"] = p.steps_per_epoch;
    j["predicted_seconds"] = p.seconds;
    j["lower_seconds"] = p.lower;
    j["upper_seconds"] = p.upper;
    j["evaluation_seconds"] = job.evaluation_seconds;
    j["job_seconds"] = job.seconds;
    j["node_hours"] = job.node_hours;
    j["cost"] = job.cost;
    j["interval_level"] = pred.level();
    j["has_interval"] = s.has_interval;
    j["step"] = {{"seconds", s.seconds},
                 {"compute_seconds", s.compute_seconds},
                 {"comm_seconds", s.comm_seconds},
                 {"exposed_comm_seconds", s.exposed_comm_seconds},
                 {"time_factor", s.time_factor},
                 {"synced_profile", s.synced_profile},
                 {"startup_seconds", s.startup_seconds},
                 {"run_fit_seconds", s.run_fit_seconds},
                 {"run_fit_runs", s.run_fit_runs}};
    j["with"] = o.with;
    j["without"] = o.without;
    Json w = Json::array();
    for (const auto& x : warnings) w.push_back(bare_message(x));
    j["warnings"] = std::move(w);
    return j;
}

int run_predict(const PredictOptions& o) {
    std::vector<std::string> warnings;
    if (!valid_workload_name(o.workload))
        throw UsageError("--workload '" + one_line(o.workload, 80) +
                         "' is not of the form MODEL@DATASET (letters, digits, _ . -), e.g. lenet5@fashion-mnist");
    const Corrections corrections = corrections_of(o.with, o.without);
    const LoadedConfig lc = load_cli_config(o.common);
    const std::vector<std::string> dbs = read_db_paths(o.common, lc.config, &warnings);
    const PlanData d = load_plan_data(dbs, o.workload, &warnings, corrections.class_runs);
    const Workload* w = &d.workload;
    TimeModels profile_models = fit_profile_models(lc.config, *w, d.compute, d.allreduce, corrections, &warnings);
    profile_models.fit_cache = &fit_cache();
    profile_models.class_exchange = d.class_exchange;
    const TimeModels m = fit_run_models(std::move(profile_models), d.runs, &warnings);
    const PartitionTarget& t = find_target(m, o.partition);
    if (o.nodes > 1 && !t.allreduce)
        throw Error("cannot predict " + std::to_string(o.nodes) + " nodes: " +
                    (m.allreduce_error.empty() ? std::string(kNoAllreduceProfile)
                                               : m.allreduce_error));
    const double examples = static_cast<double>(o.examples.trained(*w));
    if (!(examples >= 1))
        throw UsageError("--val-split " + std::to_string(o.examples.validation) + " holds out all " +
                         std::to_string(o.examples.limited_train(*w)) + " training examples of an epoch");
    Predictor pred(m, t);
    pred.set_evaluated_examples(o.examples.tested(*w), o.examples.held_out(*w));
    const JobPrediction job = pred.job(o.nodes, o.ranks_per_node, o.global_batch, o.epochs, examples);
    const RunPrediction& p = job.run;
    if (o.format == "json") {
        std::printf("%s\n", prediction_json(o, pred, job, examples, warnings).dump(2).c_str());
    } else {
        KeyValues kv = {{"status", "ok"},
                        {"workload", o.workload},
                        {"partition", t.conf.name},
                        {"predicted_seconds", format_number("%.6g", p.seconds)},
                        {"lower_seconds", format_number("%.6g", p.lower)},
                        {"upper_seconds", format_number("%.6g", p.upper)},
                        {"step_seconds", format_number("%.6g", p.step.seconds)},
                        {"evaluation_seconds", format_number("%.6g", job.evaluation_seconds)},
                        {"job_seconds", format_number("%.6g", job.seconds)},
                        {"node_hours", format_number("%.6g", job.node_hours)},
                        {"cost", format_number("%.6g", job.cost)}};
        for (const auto& x : warnings) kv.emplace_back("warning", bare_message(x));
        std::fputs(render_kv(kv).c_str(), stdout);
    }
    for (const auto& x : warnings) print_warning(x);
    return kExitOk;
}

}  // namespace

void add_predict_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<PredictOptions>();
    CLI::App* sub = app.add_subcommand(
        "predict", "predict the training time of one configuration (nodes, ranks per node, global batch, epochs)");
    sub->footer("The same prediction as tula plan's candidates (profiles, and the run history's overlap and time "
                "calibration), with its 95 % interval and the parts of one step. Exit status: 0 predicted, 1 error "
                "(unknown workload, a configuration the models cannot predict), 2 usage error. See tula(1).");
    add_common_options(sub, &o->common, false);
    sub->add_option("--workload", o->workload, "MODEL@DATASET")->type_name("W")->required();
    sub->add_option("--nodes", o->nodes, "nodes (default 1)")->type_name("K")->check(CLI::Range(1, 1000000));
    sub->add_option("--ranks-per-node", o->ranks_per_node, "ranks (Slurm tasks) per node (default 1)")
        ->type_name("R")
        ->check(CLI::Range(1, 1024));
    sub->add_option("--global-batch", o->global_batch, "examples per step over all ranks, a multiple of K x R")
        ->type_name("B")
        ->required()
        ->check(CLI::Range(1, 1 << 30));
    sub->add_option("--epochs", o->epochs, "epochs (default 1)")->type_name("E")->check(CLI::Range(1, 100000));
    sub->add_option("--limit-train", o->examples.train, "training examples per epoch (tula-train --limit-train; default all)")
        ->type_name("N")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
    sub->add_option("--limit-test", o->examples.test, "test examples evaluated after each epoch (tula-train --limit-test; default all)")
        ->type_name("N")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
    sub->add_option("--val-split", o->examples.validation,
                    "training examples held out and evaluated after each epoch (tula-train --val-split; default none)")
        ->type_name("N")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
    sub->add_option("--partition", o->partition, "the partition of tula.conf (default: the first that can be predicted)")
        ->type_name("NAME");
    add_corrections_options(sub, &o->with, &o->without);
    add_format_option(sub, &o->format, {"json", "kv"});
    sub->callback([o, action] { *action = [o] { return run_predict(*o); }; });
}

}  // namespace tula::cli
