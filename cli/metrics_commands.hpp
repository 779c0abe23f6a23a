// tula CLI: the commands that read metrics files of the job contract (tula-jobs(7)):
// `tula db record --metrics FILE` (cli/db_record.cpp) and `tula profile compute --command CMD`
// (cli/profile_command.cpp). The parts below take plain values, so the unit tests call them.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "profile_jobs.hpp"
#include "tula/metrics.hpp"
#include "tula/records.hpp"

namespace tula::cli {

/// What record_metrics_file wrote.
struct RecordedRun {
    int64_t id = 0;       ///< the run's row id in the database
    RunRecord run;        ///< the run as stored
    bool workload_row = false;  ///< the workload row was inserted or replaced from the header
};

/// Reads the run file `file` (tula::read_metrics_run_file) and adds the run to the database
/// at `db` (created when missing) in one transaction, with the workload row from the header
/// when it gives params and train_examples. job_id: `job`, else the header's, else
/// $SLURM_JOB_ID; predicted_seconds: the header's, else $TULA_PREDICTED_SECONDS, else
/// $SLURM_SPANK_TULA_PREDICTED_SECONDS (a value that is not a number of seconds >= 0 is
/// ignored with a warning); hardware_class: the header's, else tula::hardware_class_from_env.
/// Warnings (one line each) are appended to `warnings`. Errors: tula::Error "FILE:LINE: ..."
/// for a bad file, and when the database does not know the workload and the header lacks
/// params or train_examples (naming them); nothing is written then.
RecordedRun record_metrics_file(const std::string& file, const std::string& job, const std::string& db,
                                std::vector<std::string>* warnings);

/// "tula: recorded run N of WORKLOAD (K nodes x R ranks, global batch B, E epochs, S s) in DB".
std::string recorded_line(const RecordedRun& r, const std::string& db);

/// What record_profile_file wrote.
struct RecordedProfile {
    MetricsKind kind = MetricsKind::Profile;  ///< Profile or Allreduce
    std::string workload;                     ///< the compute profile's workload ("" for allreduce)
    int nodes = 1, ranks = 1;                 ///< the header's shape
    size_t samples = 0;                       ///< compute or allreduce samples stored
};

/// Adds the samples of a profile file of the job contract (metrics_file_kind Profile or
/// Allreduce; e.g. tula-train --profile-compute|--profile-allreduce --metrics FILE) to the
/// database at `db`: compute samples as profile_samples gives them (with
/// the header's workload row), or one tula::AllreduceSample per "allreduce" line (the
/// header's nodes and ranks per node, bytes, seconds, host). The hardware class: the header's,
/// else tula::hardware_class_from_env (its warning appended to `warnings`). The compute
/// samples' job (ComputeSample::job_id): `job`, else the header's job_id, else
/// $SLURM_JOB_ID, as for a run. Errors: tula::Error for a bad file or an unwritable
/// database; nothing is written then.
RecordedProfile record_profile_file(const std::string& file, const std::string& job, const std::string& db,
                                    std::vector<std::string>* warnings);

/// Adds `tula db record` to the `db` subcommand.
void add_db_record_command(CLI::App* db, Action* action);

/// A compute profile taken by running a command of the job contract on this node.
struct CommandProfile {
    std::string workload;          ///< MODEL@DATASET; the header's workload must equal it
    std::string command;           ///< run with /bin/sh -c in the current directory
    std::vector<int> batch_sizes;  ///< local batch sizes (TULA_PROFILE_BATCHES), each must be timed
    double min_seconds = 1.0;      ///< TULA_PROFILE_MIN_SECONDS, seconds > 0
    int rounds = 1;                ///< runs of the command, each timing every batch size
    std::string hardware_class;    ///< the class the samples are recorded under
};

/// Runs p.command p.rounds times (TULA_PROFILE_BATCHES, TULA_PROFILE_MIN_SECONDS,
/// TULA_WORKLOAD, TULA_METRICS = a temporary file; its output goes to ours), reads each
/// run's profile lines (tula::read_metrics_profile_file), and then, when every run succeeded
/// and timed every batch size, stores one tula::ComputeSample per profile line of a wanted
/// batch size in the database at `db`: seconds_per_iter = the line's seconds, iters = its
/// steps, this host, 1 thread, ranks 1, ranks per node 1, p.hardware_class; and the workload
/// row when the header gives params and train_examples. Returns the samples stored.
/// Errors: tula::Error when the command fails (exit status, signal), writes no profile line,
/// misses a batch size, writes another workload or a bad file; nothing is stored then.
std::vector<ComputeSample> profile_with_command(const CommandProfile& p, const std::string& db);

/// The compute samples of a profile file's lines, in file order: the header's workload, ranks
/// and ranks per node; each line's local batch, seconds, steps, threads, start-up and
/// synchronized seconds; host: the header's, else `host`; hardware class: `cls` when given,
/// else the header's. Pure.
std::vector<ComputeSample> profile_samples(const MetricsProfile& m, const std::string& host,
                                           const std::optional<std::string>& cls);

/// Writes `samples` and the workload row `w` (when given; a known row's activation floats are
/// kept when `w` has none) into the database at `db`. Errors: tula::Error.
void store_compute_profile(const std::string& db, const std::vector<ComputeSample>& samples,
                           const std::optional<Workload>& w);

/// The samples of ranks that timed the same batch sizes at once, one profile per rank: per
/// batch size the slowest rank's seconds and the fewest steps (as tula-train --profile-compute
/// under mpirun records the slowest rank), with ranks = profiles.size() and ranks_per_node.
/// Errors: tula::Error naming the rank whose profile lacks a batch size.
std::vector<ComputeSample> combine_rank_profiles(const std::vector<std::vector<ComputeSample>>& profiles,
                                                 int ranks_per_node);

/// `tula profile compute --command CMD --nodes K,...`: for each K one Slurm job (sbatch
/// --wait -N K --ntasks-per-node=R, watched as run_job watches) that runs `srun /bin/sh -c
/// CMD`; every rank writes its own profile (TULA_METRICS holds "%r", which the writer replaces
/// by SLURM_PROCID) into the job output directory, and the ranks' profiles are stored combined
/// (combine_rank_profiles) in the database of `common`. Prints a line per job. Errors:
/// tula::Error when a job fails or is cancelled, or a rank's file is missing or bad (that
/// job's samples are not stored).
int run_command_jobs(const CommonOptions& common, const JobOptions& jo, const CommandProfile& p,
                     const std::vector<int>& nodes, int per_node);

}  // namespace tula::cli
