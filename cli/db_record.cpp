// tula CLI: `tula db record --metrics FILE` -- adds a finished run, or a compute or allreduce
// profile, from a file of the job contract (tula-jobs(7)) to the user's profile database; the
// one way tula-train's runs and profiles reach a database (tula(1), "tula db record").
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include <CLI/CLI.hpp>

#include "metrics_commands.hpp"
#include "text.hpp"
#include "tula/conf.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "tula/metrics.hpp"

namespace tula::cli {
namespace {

// The first non-empty of the environment variables `names`; "" when none is set.
std::string first_env(std::initializer_list<const char*> names, const char** which) {
    for (const char* n : names) {
        const char* v = std::getenv(n);
        if (v && *v) {
            *which = n;
            return v;
        }
    }
    return "";
}

struct RecordOptions {
    CommonOptions common;
    std::string metrics;
    std::string job;
};

// "tula: recorded N compute samples of W (K nodes x R ranks) in DB", or of allreduce.
std::string recorded_profile_line(const RecordedProfile& p, const std::string& db) {
    const int per_node = p.nodes > 0 ? p.ranks / p.nodes : p.ranks;
    return "tula: recorded " + std::to_string(p.samples) +
           (p.kind == MetricsKind::Profile ? " compute sample" : " allreduce sample") + (p.samples == 1 ? "" : "s") +
           (p.workload.empty() ? "" : " of " + p.workload) + " (" + nodes_phrase(p.nodes) + " x " +
           std::to_string(per_node) + " rank" + (per_node == 1 ? "" : "s") + ") in " + db;
}

int run_record(const RecordOptions& o) {
    if (o.metrics == "-") throw UsageError("--metrics: give the metrics file's path (standard input is not read)");
    if (!o.job.empty() && !valid_job_id(o.job))
        throw UsageError("--job '" + one_line(o.job, 80) + "' is not a Slurm job id (1 to 64 letters, digits, _ . + -)");
    const std::string db = write_db_path(o.common);
    std::vector<std::string> warnings;
    if (metrics_file_kind(o.metrics) != MetricsKind::Run) {
        const RecordedProfile p = record_profile_file(o.metrics, o.job, db, &warnings);
        for (const auto& w : warnings) print_warning(w);
        std::printf("%s\n", recorded_profile_line(p, db).c_str());
        return kExitOk;
    }
    const RecordedRun r = record_metrics_file(o.metrics, o.job, db, &warnings);
    for (const auto& w : warnings) print_warning(w);
    std::printf("%s\n", recorded_line(r, db).c_str());
    return kExitOk;
}

}  // namespace

namespace {

// The job a recorded file is for: `job` (--job), else the header's job_id, else $SLURM_JOB_ID.
std::string recorded_job_id(const std::string& job, const MetricsHeader& h) {
    const char* which = nullptr;
    return !job.empty() ? job : !h.job_id.empty() ? h.job_id : first_env({"SLURM_JOB_ID"}, &which);
}

}  // namespace

RecordedRun record_metrics_file(const std::string& file, const std::string& job, const std::string& db,
                                std::vector<std::string>* warnings) {
    const MetricsRun m = read_metrics_run_file(file);
    const MetricsHeader& h = m.header;
    RecordedRun out;
    RunRecord& r = out.run;
    r = m.run;
    const char* which = nullptr;
    r.job_id = recorded_job_id(job, h);
    if (h.predicted_seconds < 0) {
        const std::string p = first_env({"TULA_PREDICTED_SECONDS", "SLURM_SPANK_TULA_PREDICTED_SECONDS"}, &which);
        // the plan's prediction is for its row: kept only when the run trained that global batch
        // and those epochs (TULA_BATCH_SIZE, TULA_EPOCHS), not when the script fixed others
        const std::string pb = first_env({"TULA_BATCH_SIZE", "SLURM_SPANK_TULA_BATCH_SIZE"}, &which);
        const std::string pe = first_env({"TULA_EPOCHS", "SLURM_SPANK_TULA_EPOCHS"}, &which);
        const bool other_row = (!pb.empty() && pb != std::to_string(r.global_batch)) ||
                               (!pe.empty() && pe != std::to_string(r.epochs));
        if (!p.empty() && other_row) {
            warnings->push_back("not recording the plan's prediction: it is for global batch " + one_line(pb, 12) + " and " +
                                one_line(pe, 12) + " epochs, the run trained " + std::to_string(r.global_batch) + " and " +
                                std::to_string(r.epochs));
        } else if (!p.empty()) {
            char* end = nullptr;
            const double v = std::strtod(p.c_str(), &end);
            if (end && *end == '\0' && std::isfinite(v) && v >= 0) r.predicted_seconds = v;
            else warnings->push_back(std::string("ignoring ") + which + "='" + one_line(p, 40) + "' (not a number of seconds)");
        }
    }
    if (!h.has_hardware_class) {
        std::string why;
        r.hardware_class = hardware_class_from_env(&why);
        if (!why.empty()) warnings->push_back(why);
    }
    const std::optional<Workload> row = h.workload_row();
    if (!row) {
        // the database must know the workload already; look without creating the file
        std::optional<Workload> known;
        if (file_exists(db)) known = ProfileDb::open(db, ProfileDb::Mode::ReadOnly).workload(r.workload);
        if (!known) {
            std::string missing = h.params > 0 ? "" : "\"params\"";
            if (h.train_examples <= 0) missing += std::string(missing.empty() ? "" : " and ") + "\"train_examples\"";
            throw Error(file + ":1: the profile database " + db + " does not know workload " + r.workload +
                        " and the \"run\" header has no " + missing +
                        " (add them to the header: the model's parameter count and the training examples per epoch)");
        }
    }
    ProfileDb d = ProfileDb::open(db, ProfileDb::Mode::ReadWrite);
    // The workload row: written when the database does not know the workload, or when the
    // header gives the data set's sizes explicitly (dataset_train_examples); a run on part of
    // the data set (train_examples alone) never shrinks a known workload.
    Workload w;
    const std::optional<Workload> known = d.workload(r.workload);
    const bool write_row = row && (!known || h.dataset_train_examples > 0);
    if (write_row) {
        w = *row;
        if (known) w.activation_floats = known->activation_floats;  // keeps what the header does not give
        if (w.test_examples <= 0 && known) w.test_examples = known->test_examples;
        out.workload_row = true;
    }
    out.id = d.add_run(r, write_row ? &w : nullptr);
    return out;
}

RecordedProfile record_profile_file(const std::string& file, const std::string& job, const std::string& db,
                                    std::vector<std::string>* warnings) {
    RecordedProfile out;
    out.kind = metrics_file_kind(file);
    if (out.kind == MetricsKind::Run) throw Error(file + ": a run file, not a profile (tula db record reads it as a run)");
    const MetricsProfile m =
        out.kind == MetricsKind::Profile ? read_metrics_profile_file(file) : read_metrics_allreduce_file(file);
    const MetricsHeader& h = m.header;
    out.workload = h.workload;
    out.nodes = h.nodes;
    out.ranks = h.ranks;
    std::optional<std::string> cls;
    if (!h.has_hardware_class) {
        std::string why;
        cls = hardware_class_from_env(&why);
        if (!why.empty()) warnings->push_back(why);
    }
    if (out.kind == MetricsKind::Profile) {
        std::vector<ComputeSample> got = profile_samples(m, this_host(), cls);
        const std::string id = recorded_job_id(job, h);
        for (ComputeSample& c : got) c.job_id = id;
        store_compute_profile(db, got, h.workload_row());
        out.samples = got.size();
        return out;
    }
    ProfileDb d = ProfileDb::open(db, ProfileDb::Mode::ReadWrite);
    for (const AllreduceLine& l : m.allreduce) {
        AllreduceSample a;
        a.host = h.host.empty() ? this_host() : h.host;
        a.nodes = h.nodes;
        a.ranks_per_node = h.ranks_per_node();
        a.bytes = l.bytes;
        a.seconds = l.seconds;
        a.hardware_class = cls ? *cls : h.hardware_class;
        d.add_allreduce(a);
    }
    out.samples = m.allreduce.size();
    return out;
}

std::string recorded_line(const RecordedRun& r, const std::string& db) {
    const RunRecord& x = r.run;
    return "tula: recorded run " + std::to_string(r.id) + " of " + x.workload + " (" + nodes_phrase(x.nodes) + " x " +
           std::to_string(x.ranks_per_node) + " rank" + (x.ranks_per_node == 1 ? "" : "s") + ", global batch " +
           std::to_string(x.global_batch) + ", " + std::to_string(x.epochs) + " epoch" + (x.epochs == 1 ? "" : "s") +
           ", " + format_number("%.2f", x.measured_seconds) + " s) in " + db;
}

void add_db_record_command(CLI::App* db, Action* action) {
    auto o = std::make_shared<RecordOptions>();
    CLI::App* rec = db->add_subcommand("record", "add a finished run, or a profile, from a file of the job contract (tula-jobs(7))");
    rec->footer("Writes --db PATH (default: the user's database): a run file's run and its epochs in one transaction; a "
                "profile file's compute or allreduce samples. "
                "Exit status: 0, 1 when the file is not a valid run file (the message names the line) or the "
                "database cannot be written, 2 usage error.");
    add_common_options(rec, &o->common, true);
    rec->add_option("--metrics", o->metrics, "the metrics file (JSON lines: a \"run\" header, then >= 1 \"epoch\" line, or \"profile\" or \"allreduce\" lines)")
        ->type_name("FILE")
        ->required();
    rec->add_option("--job", o->job, "the Slurm job id to record (default: the header's job_id, else $SLURM_JOB_ID)")
        ->type_name("ID");
    rec->callback([o, action] { *action = [o] { return run_record(*o); }; });
}

}  // namespace tula::cli
