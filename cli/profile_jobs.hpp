// tula CLI: the measuring runs of `tula profile` shared by its commands (cli/profile.cpp,
// cli/profile_command.cpp): Slurm jobs run with sbatch --wait and watched, their output
// directory, the database they write (staged for the system database) and its checks.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "process.hpp"
#include "tula/db.hpp"

namespace tula::cli {

/// Where and how long the measuring Slurm jobs run (tula profile allreduce, and tula profile
/// compute --nodes).
struct JobOptions {
    std::string partition;
    std::string time = "10";     // Slurm time limit of each measuring job
    std::string output_dir;      // where job output files go (default: a temporary directory)
    int timeout = 600;           // seconds each job may take from submission to its end
    std::string hardware_class;  // --hardware-class: the class tula-train records
    bool class_given = false;    // --hardware-class was given
};

/// The hardware class tula-train records its samples under (its TULA_HARDWARE_CLASS): --hardware-class;
/// else the class of the partition the measuring runs are in, looked up in tula.conf's sections
/// (partition_class): for the jobs their --partition when it names one partition, for the runs
/// on this node this job's $SLURM_JOB_PARTITION ("" outside Slurm). nullopt: the jobs run in
/// the cluster's default partition, which tula-train looks up from its own $SLURM_JOB_PARTITION.
/// Errors: UsageError for a --hardware-class that is not a class name; tula::Error when tula.conf
/// cannot be read.
std::optional<std::string> profile_class(const JobOptions& jo, const CommonOptions& common, bool jobs);

/// The environment of a tula-train run that records hardware class `cls` (none: inherited).
EnvSet class_env(const std::optional<std::string>& cls);

/// Opens `db` read-only when it exists and is not empty (nullopt otherwise: a missing file, or
/// the empty staged copy of a system database that did not exist yet, which no job has written
/// so far). Errors: tula::Error when it has content that cannot be read.
std::optional<ProfileDb> open_existing(const std::string& db);

/// This host's name as tula-train records it with its samples (gethostname).
std::string this_host();

/// True when `db` (absolute) is the system database of the configuration (--conf, $TULA_CONF,
/// /etc/slurm/tula.conf): the same path, or the same file. An explicit --conf must be valid
/// (tula::Error otherwise); a default one that cannot be read counts as the built-in defaults.
bool is_system_db(const std::string& db, const CommonOptions& common);

/// Where the measuring runs write: the database itself, or, for the system database, which
/// every user's planner reads at each submission, a staged copy (tula::StagedDb: a new file in
/// the same directory) that done() publishes atomically after each successful step; so readers
/// never see a half-written system database, and an interrupted profile keeps the steps it
/// finished (it resumes from the published file). A step that fails leaves the target unchanged.
class DbWriter {
public:
    DbWriter(std::string target, bool staged) : target_(std::move(target)), staged_(staged) {}
    /// The file the next step writes. Errors: tula::Error (StagedDb::begin).
    std::string path() {
        if (!staged_) return target_;
        if (!stage_) stage_.emplace(StagedDb::begin(target_));
        return stage_->path();
    }
    /// The step succeeded: publish what it wrote. Errors: tula::Error (StagedDb::publish).
    void done() {
        if (!stage_) return;
        stage_->publish();
        stage_.reset();
    }

private:
    std::string target_;
    bool staged_;
    std::optional<StagedDb> stage_;
};

/// The directory of `db` must exist or be creatable by tula-train; say so early when its
/// parent cannot be written. A staged database (the system one) also needs its directory
/// writable, for the new file that replaces it.
void check_db_writable(const std::string& db, bool staged);

/// What run_job saw.
struct JobOutcome {
    ProcessResult result;  // of sbatch --wait
    std::string why;       // set when this command cancelled the job: why
};

/// Runs `sbatch --wait ...` (argv) for a job named `name`; watches it with squeue every few
/// seconds and cancels it (scancel -n) when it pends for a reason that never clears or runs
/// longer than `timeout` seconds. `env` is set for sbatch (and so for the job) besides TULA_MODE=off.
JobOutcome run_job(const std::vector<std::string>& argv, const std::string& name, int nodes, int timeout,
                   const EnvSet& env);

/// Lines of a job output file, each prefixed; at most the last `max_lines`.
std::string job_output(const std::string& file, const std::string& prefix, size_t max_lines);

/// The options of the measuring jobs (JobOptions).
void add_job_options(CLI::App* app, JobOptions* j);

}  // namespace tula::cli
