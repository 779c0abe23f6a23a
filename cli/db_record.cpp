// tula CLI: `tula db record --metrics FILE` -- adds a finished run from a metrics file of the
// job contract (tula-jobs(7)) to the user's profile database, as tula-train records its own
// runs (tula(1), "tula db record").
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>

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

int run_record(const RecordOptions& o) {
    if (o.metrics == "-") throw UsageError("--metrics: give the metrics file's path (standard input is not read)");
    if (!o.job.empty() && !valid_job_id(o.job))
        throw UsageError("--job '" + one_line(o.job, 80) + "' is not a Slurm job id (1 to 64 letters, digits, _ . + -)");
    const std::string db = write_db_path(o.common);
    std::vector<std::string> warnings;
    const RecordedRun r = record_metrics_file(o.metrics, o.job, db, &warnings);
    for (const auto& w : warnings) print_warning(w);
    std::printf("%s\n", recorded_line(r, db).c_str());
    return kExitOk;
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
    r.job_id = !job.empty() ? job : !h.job_id.empty() ? h.job_id : first_env({"SLURM_JOB_ID"}, &which);
    if (h.predicted_seconds < 0) {
        const std::string p = first_env({"TULA_PREDICTED_SECONDS", "SLURM_SPANK_TULA_PREDICTED_SECONDS"}, &which);
        if (!p.empty()) {
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

std::string recorded_line(const RecordedRun& r, const std::string& db) {
    const RunRecord& x = r.run;
    return "tula: recorded run " + std::to_string(r.id) + " of " + x.workload + " (" + nodes_phrase(x.nodes) + " x " +
           std::to_string(x.ranks_per_node) + " rank" + (x.ranks_per_node == 1 ? "" : "s") + ", global batch " +
           std::to_string(x.global_batch) + ", " + std::to_string(x.epochs) + " epoch" + (x.epochs == 1 ? "" : "s") +
           ", " + format_number("%.2f", x.measured_seconds) + " s) in " + db;
}

void add_db_record_command(CLI::App* db, Action* action) {
    auto o = std::make_shared<RecordOptions>();
    CLI::App* rec = db->add_subcommand("record", "add a finished run from a metrics file of the job contract (tula-jobs(7))");
    rec->footer("Writes --db PATH (default: the user's database), the run and its epochs in one transaction. "
                "Exit status: 0, 1 when the file is not a valid run file (the message names the line) or the "
                "database cannot be written, 2 usage error.");
    add_common_options(rec, &o->common, true);
    rec->add_option("--metrics", o->metrics, "the metrics file (JSON lines: a \"run\" header and >= 1 \"epoch\" line)")
        ->type_name("FILE")
        ->required();
    rec->add_option("--job", o->job, "the Slurm job id to record (default: the header's job_id, else $SLURM_JOB_ID)")
        ->type_name("ID");
    rec->callback([o, action] { *action = [o] { return run_record(*o); }; });
}

}  // namespace tula::cli
