// libtula: the SQLite profile database (see tula(1), "PROFILE DATABASE").
//
// Schema (PRAGMA user_version = kSchemaVersion; WAL journal on a local disk, rollback journal on
// a network file system; see db/guard.hpp in libtula/src for the hardening of every open):
//   workload(name PK, model, dataset, params, train_examples, test_examples, updated)
//   compute_profile(id, workload, host, local_batch, threads, seconds_per_iter, iters, created,
//                   ranks, startup_seconds, synced_seconds_per_iter, hardware_class,
//                   ranks_per_node, job_id)
//   allreduce_profile(id, host, nodes, bytes, seconds, created, hardware_class, ranks_per_node)
//   run(id, job_id, workload, nodes, global_batch, epochs, predicted_seconds,
//       measured_seconds, test_accuracy, created, noise_scale, noise_observations,
//       train_examples, optimizer, hardware_class, ranks_per_node, parts, part_seconds)
//   run_epoch(run_id, epoch, seconds, train_loss, test_accuracy)
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <limits>
#include <string>
#include <vector>

#include "tula/records.hpp"
#include "tula/workload.hpp"

struct sqlite3;

namespace tula {

namespace detail {
struct ConnGuard;  // per-connection deadline and lock-wait state (libtula/src/db/guard.hpp)
}

/// Schema version this build writes. History (each step is a migration that ProfileDb::open
/// applies, in one transaction, when it opens an older database read-write):
///   1: the first schema;
///   2: run.noise_scale (REAL, NULL = not measured) and run.noise_observations (INTEGER,
///      default 0), the gradient noise scale tula-train measured;
///   3: run.train_examples (INTEGER, default 0 = the workload's), examples per epoch;
///   4: compute_profile.ranks (INTEGER, default 1), ranks that ran the timed steps at once, and
///      compute_profile.startup_seconds (REAL, NULL = not measured), a fresh process's extra
///      seconds in its first steps;
///   5: compute_profile.synced_seconds_per_iter (REAL, NULL = not measured), the seconds of a
///      synchronized data-parallel step that ranks > 1 timed next to the compute part;
///   6: workload.activation_floats (INTEGER, default 0 = not known);
///   7: run.optimizer (TEXT, default '' = not recorded);
///   8: compute_profile.hardware_class, allreduce_profile.hardware_class and
///      run.hardware_class (TEXT, default '' = unknown class, planned as any class's), and
///      compute_profile.ranks_per_node and run.ranks_per_node (INTEGER, default 1);
///      run.nodes counts nodes, not ranks;
///   9: allreduce_profile.ranks_per_node (INTEGER, default 1): a row of nodes = 1 and
///      ranks_per_node >= 2 is a within-node allreduce (tula profile allreduce
///      --ranks-per-node);
///  10: run.parts (INTEGER, default 1) and run.part_seconds (TEXT: a JSON list of the
///      training seconds of each part, NULL when not known or with one part): a run stopped
///      and resumed is one run of several parts;
///  11: compute_profile.job_id (TEXT, default '' = not known): the Slurm job that measured
///      the point (a job's own measurement, TULA_PROFILE, or tula profile's).
/// A read-only connection reads a version-1 database as it is (its runs have no noise scale).
constexpr int kSchemaVersion = 11;
/// Oldest schema version this build still reads (and migrates when writing).
constexpr int kOldestSchemaVersion = 1;

/// An open profile database. Move-only; closes on destruction.
class ProfileDb {
public:
    enum class Mode { ReadOnly, ReadWrite };

    /// Opens `path`. ReadWrite creates the file (and its parent directory, mode 0700)
    /// and the schema when missing, migrates an older schema (kOldestSchemaVersion ..
    /// kSchemaVersion - 1) to kSchemaVersion in one transaction, and picks the journal by the
    /// file system of the directory (journal_mode_for: WAL on a local disk; on a network or
    /// cluster file system a rollback journal, and a database found in WAL mode there is switched
    /// back when no other process holds it). `busy_timeout_ms` is how long one statement waits for
    /// another process's lock; a negative value means the mode's default: kReadBusyTimeoutMs
    /// for ReadOnly, kWriteBusyTimeoutMs for ReadWrite (writers back off with random jitter and
    /// retry BEGIN IMMEDIATE / COMMIT on SQLITE_BUSY until it is spent, so that many runs ending
    /// together all land). A ReadOnly connection in addition draws every wait from the
    /// process-wide read lock budget (set_read_lock_budget), so that all read-only opens of one
    /// process (e.g. one `tula plan` at submission) together wait at most that long.
    ///
    /// Every open is hardened against a hostile file before anything is read (see tula(1),
    /// PROFILE DATABASE): defensive mode, no views, triggers or untrusted schema functions, no
    /// memory map, tight SQLite limits (a value of at most kMaxValueBytes, no ATTACH), a
    /// ReadOnly connection is query_only and interrupted once it has run read_deadline_ms()
    /// milliseconds (lock waits not counted); then the schema is checked against an allow-list:
    /// exactly the tables and indexes that schema version (PRAGMA user_version) has, with the
    /// same columns, plus SQLite's own sqlite_stat1/sqlite_stat4/sqlite_sequence tables.
    /// Errors (tula::Error, message names the path): missing file in ReadOnly mode,
    /// not a database / corrupt, schema newer than kSchemaVersion ("upgrade tula"),
    /// a schema object Tula never creates (names it: "contains view 'workload', which Tula
    /// never creates"), a table with other columns, a failed migration of an older schema
    /// (ReadWrite; the database is left unchanged), a read past its deadline, a value over
    /// kMaxValueBytes, locked longer than the timeout or the budget ("held by another process
    /// ... not read"; a locked database is never read as immutable), permission denied.
    static ProfileDb open(const std::string& path, Mode mode, int busy_timeout_ms = -1);

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

    /// Inserts the run and its per-epoch rows in one transaction; returns its id. Errors:
    /// tula::Error for per-epoch vectors of different lengths, parts < 1, or part_seconds
    /// neither empty nor (parts,) of finite values >= 0 (nothing is written).
    int64_t add_run(const RunRecord& r);
    /// The same, and with `workload` non-null also upsert_workload(*workload), all in one
    /// transaction: both rows or neither. Returns the run's id. Errors: tula::Error (nothing
    /// is written).
    int64_t add_run(const RunRecord& r, const Workload* workload);
    /// Runs, newest first; only those of `workload` when it is non-empty; with their per-epoch
    /// rows unless `epochs` is false.
    std::vector<RunRecord> runs(const std::string& workload = "", bool epochs = true) const;
    /// The newest run with this job id, with its epochs.
    std::optional<RunRecord> run_by_job(const std::string& job_id) const;

    /// Every row (or only those of `workload` when non-empty: its workload row, compute
    /// samples and runs; allreduce samples, which belong to no workload, are then left out)
    /// as one JSON document (UTF-8 text) in the exchange format of tula(1), "tula db export":
    ///   {"format": "tula-profiles", "schema_version": 1, "exported": UNIX_SECONDS,
    ///    "workloads": [{name, model, dataset, params, train_examples, test_examples}],
    ///    "compute": [{workload, host, local_batch, threads, seconds_per_iter, iters, created,
    ///                 ranks, startup_seconds, synced_seconds_per_iter, hardware_class,
    ///                 ranks_per_node, job_id}],
    ///    "allreduce": [{host, nodes, bytes, seconds, created, hardware_class,
    ///                   ranks_per_node}],
    ///    "runs": [{job_id, workload, nodes, global_batch, epochs, predicted_seconds,
    ///              measured_seconds, test_accuracy, created, noise_scale, noise_observations,
    ///              train_examples, optimizer, hardware_class, ranks_per_node, parts,
    ///              part_seconds (a list of seconds, or null when not known),
    ///              "epoch_rows": [{epoch, seconds, train_loss, test_accuracy}]}]}
    /// "schema_version" is kSchemaVersion. Times are Unix seconds, durations seconds,
    /// sizes bytes, noise_scale examples; a per-epoch value or noise scale that was not
    /// recorded is null. Errors: tula::Error on a read failure.
    std::string export_json(const std::string& workload = "") const;

    /// What import_json added (rows identical to one already present, `created` included,
    /// are skipped and counted in `skipped`; workload rows are inserted or replaced).
    struct ImportCounts {
        size_t workloads = 0, compute = 0, allreduce = 0, runs = 0, skipped = 0;
    };
    /// Validates the whole document first (format name, kOldestSchemaVersion <=
    /// schema_version <= kSchemaVersion (newer: "upgrade tula"; a version-1 document has no
    /// noise-scale fields; in a version-2 document a run's noise_scale is null or a finite
    /// number > 0 and noise_observations an integer >= 0, both optional), every field's JSON type, counts >= 1, durations/sizes finite and > 0 (allreduce
    /// seconds >= 0), test accuracy in [0, 1]), then adds every row in one transaction, so
    /// a bad file adds nothing. `source` names the file in messages. Errors: tula::Error
    /// "SOURCE: ..." naming the section and row number (1-based), e.g. "compute row 3:
    /// seconds_per_iter must be a finite number > 0"; corrupt JSON names the byte offset.
    ImportCounts import_json(const std::string& text, const std::string& source);

    /// What prune removed.
    struct PruneCounts {
        size_t workloads = 0, compute = 0, allreduce = 0, runs = 0;
        size_t total() const { return workloads + compute + allreduce + runs; }
    };
    /// Deletes, in one transaction, the rows that match every filter given: created before
    /// `before` (Unix seconds; 0 = no age limit); of `workload` when it is non-empty (its
    /// workload row too when no compute sample or run of it is left); measured on more than
    /// `above_nodes` nodes when it is > 0 (a run on more nodes, an allreduce sample across more
    /// nodes, a compute sample timed by the ranks of more nodes at once: ranks > above_nodes x
    /// ranks_per_node). Allreduce samples are pruned only when `workload` is empty. A run's
    /// per-epoch rows go with it. Errors: tula::Error on a write failure or when no filter is
    /// given (refuses to empty the database by accident).
    PruneCounts prune(double before, const std::string& workload, int above_nodes = 0);

    /// Schema version of the open database: kSchemaVersion, or an older one read read-only.
    int schema_version() const { return schema_; }

private:
    ProfileDb(sqlite3* db, std::string path, int schema, std::unique_ptr<detail::ConnGuard> guard);
    /// The lock-wait limit of this connection's write transactions, milliseconds.
    int write_timeout_ms() const;
    sqlite3* db_ = nullptr;
    std::string path_;
    int schema_ = kSchemaVersion;
    std::unique_ptr<detail::ConnGuard> guard_;  ///< read by SQLite's handlers; outlives db_
};

/// Default busy timeout of a ReadOnly open, milliseconds.
constexpr int kReadBusyTimeoutMs = 1000;
/// Default busy timeout of a ReadWrite open, milliseconds: long enough for the end-of-run
/// writes of many jobs that end at the same moment (each holds the lock a few milliseconds).
constexpr int kWriteBusyTimeoutMs = 60000;
/// Default read deadline of a ReadOnly connection, milliseconds (set_read_deadline).
constexpr int kDefaultReadDeadlineMs = 2000;
/// Largest value (text or blob) SQLite may hold on a connection: SQLITE_LIMIT_LENGTH, bytes.
/// A longer value in a file fails the read ("string or blob too big").
constexpr int kMaxValueBytes = 1 << 20;
/// Largest text value a reader copies out of a row, bytes (names, hosts, job ids; the same
/// bound as `tula db import`): a longer one is an error naming the table and column.
constexpr int kMaxTextBytes = 4096;
/// Most rows one SELECT reads from a table (one table of one database): more is an error that
/// names the table and the database is not read. A site's database holds thousands.
constexpr int64_t kMaxRowsPerTable = 1000000;

/// Sets the deadline of every later ReadOnly open in this process: the milliseconds its
/// statements may run in all (SQLite's progress handler checks a monotonic clock every 1000
/// virtual-machine steps; waits for another process's lock do not count), clamped to
/// [1, 600000]. A read past it fails with "interrupted". Thread-safe.
void set_read_deadline(int ms);
/// The read deadline in force, milliseconds.
int read_deadline_ms();

/// Test hook: forces the journal mode ReadWrite opens choose ("wal" or "delete"; "" or null
/// restores the choice by file system, journal_mode_for). Only a program linking libtula can
/// call it; no file, option or environment variable reaches it.
void set_journal_mode_for_testing(const char* mode);

/// Name of a network or cluster file system by its statfs(2) f_type magic number, or nullptr
/// for any other (a local disk, tmpfs, overlay ...): NFS (0x6969), Lustre (0x0BD00BD0), GPFS
/// (0x47504653), CIFS (0xFF534D42), SMB2 (0xFE534D42), SMB (0x517B), FUSE (0x65735546), Ceph
/// (0x00C36400), AFS (0x5346414F), 9P (0x01021997), BeeGFS (0x19830326), PanFS (0xAAD7AAEA).
/// SQLite's WAL mode needs shared memory that these do not keep coherent between hosts (SQLite,
/// "Write-Ahead Logging", section "Disadvantages"). Pure function.
const char* network_fs_name(unsigned long f_type);
/// The journal mode a ReadWrite open sets for a database at `db_path`: "delete" when
/// statfs(2) of its directory gives a network_fs_name, else "wal" (also when statfs fails).
std::string journal_mode_for(const std::string& db_path);

/// Why the system database at `path` must not be trusted, or "" when it may be read: it does
/// not exist (readers skip it silently), or the file, its directory and its -wal, -shm and
/// -journal files (those present) are owned by root or `admin_uid` and none is group- or
/// world-writable, and neither the file nor a side file is a symbolic link (lstat(2); the
/// directory is stat(2)ed). A path that is not a regular file is left to ProfileDb::open,
/// which refuses it. The reason is one line for a warning, e.g. "tula: system database
/// /var/lib/tula/profiles.db is group-writable (mode 0664); skipped: only its administrator
/// may write it (chmod g-w,o-w /var/lib/tula/profiles.db)".
std::string system_db_distrust(const std::string& path, uid_t admin_uid);

/// A database file published atomically (what `tula profile` does to the system database, so
/// that readers see the old file or the new one, never a half-written one): begin() copies the
/// target (SQLite backup API; an empty file when there is none) into a new temporary file
/// .NAME.tula-XXXXXX in the same directory, which writers then fill through path();
/// publish() turns it into a single file with a rollback journal, fsyncs it, gives it the
/// target's mode without group/other write (0644 for a new one), renames it over the target and
/// fsyncs the directory. Missing directories of the target are created with mode 0755 (not
/// the umask's), so that users can reach a new system database. Destroying a StagedDb that
/// was not published removes the temporary file. Move-only.
class StagedDb {
public:
    /// Errors: tula::Error naming the path (cannot create the directory or the temporary file,
    /// the target cannot be read as an SQLite database).
    static StagedDb begin(const std::string& target);
    StagedDb(StagedDb&&) noexcept;
    StagedDb& operator=(StagedDb&&) noexcept;
    ~StagedDb();
    /// The temporary file; "" once published.
    const std::string& path() const { return tmp_; }
    const std::string& target() const { return target_; }
    /// Errors: tula::Error (the temporary file is not a tula profile database, the target is
    /// held in WAL mode by another process, fsync or rename failed); the target is then
    /// unchanged.
    void publish();

private:
    StagedDb(std::string target, std::string tmp) : target_(std::move(target)), tmp_(std::move(tmp)) {}
    void discard() noexcept;
    std::string target_, tmp_;
};

/// Default process-wide read lock budget, milliseconds (see set_read_lock_budget).
constexpr int kDefaultReadLockBudgetMs = 1000;
/// Largest read lock budget accepted, milliseconds.
constexpr int kMaxReadLockBudgetMs = 600000;

/// Sets the process-wide read lock budget: the total milliseconds that all ReadOnly
/// connections of this process may wait for other processes' locks (a writer holding the
/// database), clamped to [0, kMaxReadLockBudgetMs], and restarts its count. Without a call,
/// the first wait reads $TULA_DB_LOCK_WAIT_MS (decimal milliseconds, 0 .. kMaxReadLockBudgetMs;
/// anything else is ignored), else uses kDefaultReadLockBudgetMs. Thread-safe.
void set_read_lock_budget(int ms);
/// The read lock budget in force, milliseconds.
int read_lock_budget_ms();
/// Milliseconds ReadOnly connections of this process have waited for locks so far.
long long read_lock_waited_ms();

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

/// The same with only the compute samples of `workload` (MODEL@DATASET; "" = every
/// workload's): what a planner of one workload needs. Workload rows and allreduce samples
/// are all read as above. Reads through the compute_profile(workload) index, so a site
/// database with many workloads costs a planning only its own rows.
/// With `runs` non-null, also appends the finished runs of `workload` (ProfileDb::runs; ""
/// = all) of every database it could open, in the order of `paths`, through the same
/// connection (one open per database at each submission instead of two). Runs that cannot be
/// read add nothing and no warning, and do not drop that database's profiles; a database whose
/// profiles cannot be read still gives its runs. With `other_runs` non-null (and `workload`
/// non-empty), also appends the runs of every other workload the same way, without their
/// per-epoch rows (ProfileDb::runs with epochs false).
ProfileSet load_profiles(const std::vector<std::string>& paths, std::vector<std::string>* warnings,
                         const std::string& workload, std::vector<RunRecord>* runs = nullptr,
                         std::vector<RunRecord>* other_runs = nullptr);

}  // namespace tula
