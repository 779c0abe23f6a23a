// libtula: the SQLite profile database (see tula(1), "PROFILE DATABASE").
//
// Schema version 1 (PRAGMA user_version = 1), WAL journal, busy timeout:
//   workload(name PK, model, dataset, params, train_examples, test_examples, updated)
//   compute_profile(id, workload, host, local_batch, threads, seconds_per_iter, iters, created)
//   allreduce_profile(id, host, nodes, bytes, seconds, created)
//   run(id, job_id, workload, nodes, global_batch, epochs, predicted_seconds,
//       measured_seconds, test_accuracy, created)
//   run_epoch(run_id, epoch, seconds, train_loss, test_accuracy)
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tula/workload.hpp"

struct sqlite3;

namespace tula {

/// Schema version this build reads and writes.
constexpr int kSchemaVersion = 1;

/// One profiled compute point: mean time of one training iteration (forward, backward,
/// optimizer step; no allreduce) at local batch `local_batch` on one node.
struct ComputeSample {
    std::string workload;
    std::string host;          ///< hostname it was measured on
    int local_batch = 0;       ///< examples per rank per iteration
    int threads = 1;           ///< compute threads per rank
    double seconds_per_iter = 0;  ///< seconds
    int iters = 0;             ///< iterations averaged
};

/// One allreduce measurement: mean seconds of MPI_Allreduce(SUM, float32) of `bytes`
/// bytes across `nodes` ranks, one rank per node.
struct AllreduceSample {
    std::string host;          ///< host of rank 0
    int nodes = 0;
    int64_t bytes = 0;
    double seconds = 0;
};

/// A finished training run, written by tula-train at its end (the feedback loop).
struct RunRecord {
    int64_t id = 0;
    std::string job_id;        ///< SLURM_JOB_ID, or "" outside Slurm
    std::string workload;
    int nodes = 0;             ///< ranks (one per node)
    int global_batch = 0;
    int epochs = 0;
    double predicted_seconds = 0;  ///< Tula's prediction of measured_seconds, 0 when none
    double measured_seconds = 0;   ///< training time (sum of epoch times, no evaluation), seconds
    double test_accuracy = 0;      ///< final test accuracy, fraction in [0, 1]
    double created = 0;            ///< Unix time, seconds
    std::vector<double> epoch_seconds;        ///< (epochs,) seconds per epoch
    std::vector<double> epoch_train_loss;     ///< (epochs,)
    std::vector<double> epoch_test_accuracy;  ///< (epochs,) fraction
};

/// An open profile database. Move-only; closes on destruction.
class ProfileDb {
public:
    enum class Mode { ReadOnly, ReadWrite };

    /// Opens `path`. ReadWrite creates the file (and its parent directory, mode 0700)
    /// and the schema when missing, sets WAL mode. Both modes set a busy timeout of
    /// `busy_timeout_ms` milliseconds.
    /// Errors (tula::Error, message names the path): missing file in ReadOnly mode,
    /// not a database / corrupt, schema newer than kSchemaVersion ("upgrade tula"),
    /// locked longer than the timeout, permission denied.
    static ProfileDb open(const std::string& path, Mode mode, int busy_timeout_ms = 1000);

    ProfileDb(ProfileDb&&) noexcept;
    ProfileDb& operator=(ProfileDb&&) noexcept;
    ~ProfileDb();

    const std::string& path() const { return path_; }

    /// Inserts or replaces the workload row. Errors: tula::Error on SQLite failure.
    void upsert_workload(const Workload& w);
    std::optional<Workload> workload(const std::string& name) const;
    std::vector<Workload> workloads() const;

    void add_compute(const ComputeSample& s);
    /// All compute samples of `workload`, oldest first.
    std::vector<ComputeSample> compute_samples(const std::string& workload) const;

    void add_allreduce(const AllreduceSample& s);
    std::vector<AllreduceSample> allreduce_samples() const;

    /// Inserts the run and its per-epoch rows in one transaction; returns its id.
    int64_t add_run(const RunRecord& r);
    /// Runs, newest first; only those of `workload` when it is non-empty.
    std::vector<RunRecord> runs(const std::string& workload = "") const;
    /// The newest run with this job id, with its epochs.
    std::optional<RunRecord> run_by_job(const std::string& job_id) const;

private:
    ProfileDb(sqlite3* db, std::string path);
    sqlite3* db_ = nullptr;
    std::string path_;
};

/// Profiles merged from several databases (system first, then the user's).
struct ProfileSet {
    std::vector<Workload> workloads;          ///< by name; a later database overrides an earlier one
    std::vector<ComputeSample> compute;       ///< all databases' samples
    std::vector<AllreduceSample> allreduce;   ///< all databases' samples
    std::optional<Workload> find(const std::string& name) const;
    std::vector<ComputeSample> compute_for(const std::string& workload) const;
};

/// Reads every database in `paths` that exists, read-only. A database that is missing
/// is skipped silently; one that cannot be read (corrupt, locked, newer schema,
/// permission) is skipped and its one-line reason appended to `warnings` (if non-null).
/// Never throws for a bad database.
ProfileSet load_profiles(const std::vector<std::string>& paths, std::vector<std::string>* warnings);

}  // namespace tula
