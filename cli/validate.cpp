// tula CLI: `tula validate` -- leave-one-out validation of the models on the measured
// configurations of each workload (tula(1), "tula validate"): MAPE of epoch time and cost.
#include <cmath>
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "format.hpp"
#include "tula/error.hpp"
#include "tula/predict.hpp"
#include "tula/validate.hpp"

namespace tula::cli {
namespace {

struct ValidateOptions {
    CommonOptions common;
    std::string workload;  // "" = every workload with a profile
    bool partial = false;
    std::string with;     // --with LIST: corrections switched on (Corrections::select)
    std::string without;  // --without LIST: corrections switched off (Corrections::without)
    std::string format = "kv";
};

std::string pct(double v) { return std::isfinite(v) ? format_number("%.2f", v) : std::string("nan"); }

int run_validate(const ValidateOptions& o) {
    std::vector<std::string> warnings;
    const Corrections corrections = corrections_of(o.with, o.without);
    const LoadedConfig lc = load_cli_config(o.common);
    const std::vector<std::string> dbs = read_db_paths(o.common, lc.config, &warnings);
    const ProfileSet set = load_profiles(dbs, &warnings);
    std::vector<RunRecord> runs;
    for (const auto& path : dbs) {
        if (!file_exists(path)) continue;
        try {
            const ProfileDb db = ProfileDb::open(path, ProfileDb::Mode::ReadOnly);
            for (auto& r : db.runs()) runs.push_back(std::move(r));
        } catch (const std::exception&) {
            // load_profiles has already warned about an unreadable database
        }
    }
    std::vector<Workload> ws;
    if (!o.workload.empty()) {
        const auto w = set.find(o.workload);
        if (!w) throw Error("no profile for workload " + o.workload + "; run `tula profile compute --workload " + o.workload + "`");
        ws.push_back(*w);
    } else {
        ws = set.workloads;
    }
    if (ws.empty()) throw Error("no workload has a profile; run `tula profile compute` first");
    std::vector<ValidationResult> results;
    for (const auto& w : ws) {
        std::vector<RunRecord> mine;
        for (const auto& r : runs)
            if (r.workload == w.name) mine.push_back(r);
        try {
            results.push_back(validate_workload(lc.config, w, set.compute_for(w.name), set.allreduce, mine, o.partial,
                                                node_hour_price(lc.config.price_per_node_hour, lc.config.gpus_per_node,
                                                                lc.config.price_per_gpu_hour),
                                                corrections));
        } catch (const Error& e) {
            warnings.push_back(std::string("cannot validate ") + w.name + ": " + bare_message(e.what()));
        }
    }
    if (o.format == "json") {
        Json j;
        j["status"] = "ok";
        j["partial"] = o.partial;
        j["with"] = o.with;
        j["without"] = o.without;
        Json arr = Json::array();
        for (const auto& r : results) {
            Json x;
            x["workload"] = r.workload;
            x["points"] = r.points.size();
            if (std::isfinite(r.mape_epoch_time)) x["mape_epoch_time_percent"] = r.mape_epoch_time;
            else x["mape_epoch_time_percent"] = nullptr;
            if (std::isfinite(r.mape_cost)) x["mape_cost_percent"] = r.mape_cost;
            else x["mape_cost_percent"] = nullptr;
            Json pts = Json::array();
            for (const auto& p : r.points)
                pts.push_back({{"kind", p.kind},
                               {"nodes", p.nodes},
                               {"ranks_per_node", p.ranks_per_node},
                               {"global_batch", p.global_batch},
                               {"measured_epoch_seconds", p.measured_epoch_seconds},
                               {"predicted_epoch_seconds", p.predicted_epoch_seconds},
                               {"measured_cost", p.measured_cost},
                               {"predicted_cost", p.predicted_cost}});
            x["held_out"] = std::move(pts);
            x["notes"] = r.notes;
            arr.push_back(std::move(x));
        }
        j["workloads"] = std::move(arr);
        Json w = Json::array();
        for (const auto& s : warnings) w.push_back(bare_message(s));
        j["warnings"] = std::move(w);
        std::printf("%s\n", j.dump(2).c_str());
    } else {
        KeyValues kv = {{"status", "ok"}, {"partial", o.partial ? "yes" : "no"}};
        for (const auto& r : results) {
            kv.emplace_back("workload", r.workload);
            kv.emplace_back("points", std::to_string(r.points.size()));
            kv.emplace_back("mape_epoch_time", pct(r.mape_epoch_time));
            kv.emplace_back("mape_cost", pct(r.mape_cost));
            for (const auto& n : r.notes) kv.emplace_back("note", n);
        }
        for (const auto& s : warnings) kv.emplace_back("warning", bare_message(s));
        std::fputs(render_kv(kv).c_str(), stdout);
    }
    for (const auto& s : warnings) print_warning(s);
    return results.empty() ? kExitError : kExitOk;
}

}  // namespace

void add_validate_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<ValidateOptions>();
    CLI::App* sub = app.add_subcommand(
        "validate", "leave-one-out validation: predict each measured configuration from the rest, print MAPE");
    sub->footer("Held out: every profiled local batch size (1 node) and every finished run (nodes, global batch) "
                "in the run history. --partial fits on 2 local batch sizes and 2 node counts only. See tula(1).");
    add_common_options(sub, &o->common, false);
    sub->add_option("--workload", o->workload, "validate only this workload, MODEL@DATASET")->type_name("W");
    sub->add_flag("--partial", o->partial, "use only the smallest and largest profiled local batch and node count");
    add_corrections_options(sub, &o->with, &o->without);
    add_format_option(sub, &o->format, {"kv", "json"});
    sub->callback([o, action] { *action = [o] { return run_validate(*o); }; });
}

}  // namespace tula::cli
