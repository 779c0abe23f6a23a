// tula CLI: `tula explain JOBID` -- predicted vs measured for a finished job, from the run
// history tula-train writes to the profile database (tula(1), "tula explain").
#include <algorithm>
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common.hpp"
#include "format.hpp"
#include "tula/error.hpp"
#include "tula/planner.hpp"
#include "tula/stop.hpp"

namespace tula::cli {
namespace {

struct ExplainOptions {
    CommonOptions common;
    std::string job_id;
    std::string format = "table";
};

// "94.2 s", or "1234.5 s (20.6 min)" when minutes or hours read better.
std::string seconds_text(double s) {
    std::string t = format_number("%.1f s", s);
    if (s >= 120) t += " (" + format_duration(s) + ")";
    return t;
}

// The jobs that measured the compute samples of `r`'s workload on its hardware class (or of
// the unknown class '') in `dbs` (measuring_jobs); a database that cannot be read adds none.
std::vector<std::string> profile_jobs_of(const RunRecord& r, const std::vector<DbHandle>& dbs) {
    std::vector<ComputeSample> samples;
    for (const auto& h : dbs) {
        if (!h.db) continue;
        try {
            for (ComputeSample& c : h.db->compute_samples(r.workload))
                if (c.hardware_class.empty() || r.hardware_class.empty() || c.hardware_class == r.hardware_class)
                    samples.push_back(std::move(c));
        } catch (const std::exception&) {
        }
    }
    return measuring_jobs(samples);
}

void print_run(const RunRecord& r, const std::string& db_path, const std::optional<RunCheck>& check,
               const std::vector<std::string>& profile_jobs) {
    const bool colour = stdout_colour();
    const std::string per_node = r.ranks_per_node > 1 ? " x " + std::to_string(r.ranks_per_node) + " ranks" : "";
    std::printf("%s: %s on %s%s, global batch %d (local batch %d), %d epoch%s\n",
                bold("job " + r.job_id, colour).c_str(), r.workload.c_str(), nodes_phrase(r.nodes).c_str(),
                per_node.c_str(), r.global_batch, r.ranks() > 0 ? r.global_batch / r.ranks() : 0, r.epochs,
                r.epochs == 1 ? "" : "s");
    const auto e = error_percent(r.measured_seconds, r.predicted_seconds);
    Table t;
    t.right = {false, false};
    t.header = {"", ""};
    t.rows.push_back({"predicted training time",
                      r.predicted_seconds > 0
                          ? seconds_text(r.predicted_seconds)
                          : "none (the job was not planned by Tula, or it trained other epochs or another batch than the plan's)"});
    t.rows.push_back({"measured training time",
                      seconds_text(r.measured_seconds) + " (sum of epoch times, without evaluation)"});
    if (r.parts > 1) {  // stopped before a time limit (a backfill hole's, say) and requeued
        std::string each;
        for (size_t i = 0; i < r.part_seconds.size(); ++i)
            each += (i == 0 ? ": " : i + 1 == r.part_seconds.size() ? ", then the rest " : ", then ") +
                    format_duration(r.part_seconds[i]);
        t.rows.push_back({"parts", std::to_string(r.parts) + each +
                                       " of training (the job stopped before a time limit, such as a backfill "
                                       "hole's, checkpointed and was requeued)"});
    }
    t.rows.push_back({"prediction error", e ? format_number("%+.1f %%", *e) + " ((measured - predicted) / measured)" : "-"});
    if (const double slow = slower_than_planned(r.measured_seconds, r.predicted_seconds); slow > 0)
        t.rows.push_back({"slower than planned", format_number("%.2fx", slow) + " the predicted time per step" +
                                                     (r.parts > 1 ? " (its parts' time limits were set from the "
                                                                    "measured speed where Slurm allowed it)"
                                                                  : "")});
    t.rows.push_back({"final test accuracy", format_number("%.2f %%", r.test_accuracy * 100)});
    t.rows.push_back({"gradient noise scale",
                      r.noise_scale > 0 ? format_number("%.4g", r.noise_scale) + " examples (B_simple, " +
                                              std::to_string(r.noise_observations) + " observations)"
                                        : "not measured"});
    t.rows.push_back({"node-hours (measured)", format_number("%.4f", r.nodes * r.measured_seconds / 3600.0)});
    if (!profile_jobs.empty()) {
        const bool own = std::find(profile_jobs.begin(), profile_jobs.end(), r.job_id) != profile_jobs.end();
        t.rows.push_back({"compute profile", "measured by " + jobs_phrase(profile_jobs) +
                                                 (own ? " (this job measured its own steps first)" : "")});
    }
    t.rows.push_back({"refitted prediction", check ? run_check_line(*check) + (check->flagged ? " [flagged]" : "")
                                                   : "not checked (no profile or too few samples)"});
    if (check)
        t.rows.push_back({"its step", format_number("%.4g ms", check->compute_step_seconds * 1e3) + " compute + " +
                                          format_number("%.4g ms", check->exposed_comm_step_seconds * 1e3) +
                                          " exposed communication + " +
                                          format_number("%.4g ms", check->overhead_step_seconds * 1e3) +
                                          " start-up and evaluations spread over the steps"});
    const std::string when = format_time(r.created);
    if (!when.empty()) t.rows.push_back({"finished", when});
    t.rows.push_back({"database", db_path});
    std::vector<std::string> lines = render_table_lines(t);
    for (size_t i = 1; i < lines.size(); ++i) std::printf("%s\n", lines[i].c_str());

    const size_t n = r.epoch_seconds.size();
    if (n == 0) return;
    Table ep;
    ep.header = {"epoch", "seconds", "train loss", "test accuracy"};
    ep.right = {true, true, true, true};
    for (size_t i = 0; i < n; ++i)
        ep.rows.push_back({std::to_string(i + 1), format_number("%.2f", r.epoch_seconds[i]),
                           i < r.epoch_train_loss.size() ? format_number("%.4f", r.epoch_train_loss[i]) : "-",
                           i < r.epoch_test_accuracy.size() ? format_number("%.2f %%", r.epoch_test_accuracy[i] * 100)
                                                            : "-"});
    std::printf("\n");
    std::fputs(render_table(ep).c_str(), stdout);
}

int fail(const std::string& format, const std::string& message, int status) {
    if (format == "kv") {
        std::fputs(render_kv(error_kv(message)).c_str(), stdout);
    } else if (format == "json") {
        Json j;
        j["status"] = "error";
        j["message"] = one_line(bare_message(message), 4000);
        std::printf("%s\n", j.dump(2).c_str());
    }
    print_error(message);
    return status;
}

int run_explain(const ExplainOptions& o) {
    try {
        if (!valid_job_id(o.job_id))
            throw UsageError("'" + one_line(o.job_id, 80) + "' is not a Slurm job id (digits, e.g. 42, or 42_3 / 42+0)");
        const LoadedConfig lc = load_cli_config(o.common);
        std::vector<std::string> warnings;
        const std::vector<DbHandle> dbs = open_read_dbs(read_db_paths(o.common, lc.config, &warnings));
        std::optional<RunRecord> best;
        std::string best_db;
        for (const auto& h : dbs) {
            if (!h.error.empty()) warnings.push_back("skipping " + h.path + ": " + h.error);
            if (!o.common.dbs.empty() && h.missing) warnings.push_back("profile database " + h.path + " does not exist");
            if (!h.db) continue;
            try {
                auto r = h.db->run_by_job(o.job_id);
                if (r && (!best || r->created > best->created)) {
                    best = std::move(r);
                    best_db = h.path;
                }
            } catch (const std::exception& e) {
                warnings.push_back("skipping " + h.path + ": " + one_line(bare_message(e.what())));
            }
        }
        for (const auto& w : warnings) print_warning(w);
        if (!best) {
            std::string where;
            for (const auto& h : dbs) where += (where.empty() ? "" : ", ") + h.path;
            throw Error("no run with job id " + o.job_id + " in " + (where.empty() ? "any profile database" : where) +
                        " (tula-train records a run when the job finishes; is it finished, and did it write to one "
                        "of these databases? see --db)");
        }
        std::vector<std::string> ignored;  // databases were reported above
        const std::optional<RunCheck> check =
            check_recorded_run(lc.config, read_db_paths(o.common, lc.config, &ignored), *best, &ignored);
        const std::vector<std::string> jobs = profile_jobs_of(*best, dbs);
        if (o.format == "kv") {
            std::fputs(render_kv(explain_kv(*best, best_db, check, jobs)).c_str(), stdout);
        } else if (o.format == "json") {
            Json j = run_json(*best);
            j["status"] = "ok";
            j["database"] = best_db;
            j["check"] = check ? run_check_json(*check) : Json(nullptr);
            j["profile_jobs"] = jobs;
            std::printf("%s\n", j.dump(2).c_str());
        } else {
            print_run(*best, best_db, check, jobs);
        }
        return kExitOk;
    } catch (const UsageError& e) {
        return fail(o.format, e.what(), kExitUsage);
    } catch (const std::exception& e) {
        return fail(o.format, e.what(), kExitError);
    }
}

}  // namespace

void add_explain_command(CLI::App& app, Action* action) {
    auto o = std::make_shared<ExplainOptions>();
    CLI::App* sub = app.add_subcommand("explain", "predicted vs measured training time of a finished job");
    sub->footer("Error = (measured - predicted) / measured x 100 %. Exit status: 0, 1 when no database has a run "
                "with that job id, 2 usage error. See tula(1).");
    add_common_options(sub, &o->common, false);
    sub->add_option("jobid", o->job_id, "Slurm job id")->required()->type_name("JOBID");
    add_format_option(sub, &o->format, {"table", "kv", "json"});
    sub->callback([o, action] { *action = [o] { return run_explain(*o); }; });
}

}  // namespace tula::cli
