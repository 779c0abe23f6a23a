// libtula: the SQLite profile database (see db.hpp for the schema and tula(1)).
//
// Every SQLite call's return code is checked; failures become one-line tula::Error
// messages that name the database path and say what to do.
#include "tula/db.hpp"

#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "db_guard.hpp"
#include "tula/error.hpp"

namespace tula {
namespace {

// Schema version 1. Times are Unix seconds (REAL); sizes in bytes; durations in seconds.
constexpr const char* kSchemaV1 = R"SQL(
CREATE TABLE workload(
    name TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    dataset TEXT NOT NULL,
    params INTEGER NOT NULL,
    train_examples INTEGER NOT NULL,
    test_examples INTEGER NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE compute_profile(
    id INTEGER PRIMARY KEY,
    workload TEXT NOT NULL,
    host TEXT NOT NULL,
    local_batch INTEGER NOT NULL,
    threads INTEGER NOT NULL,
    seconds_per_iter REAL NOT NULL,
    iters INTEGER NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX compute_profile_workload ON compute_profile(workload);
CREATE TABLE allreduce_profile(
    id INTEGER PRIMARY KEY,
    host TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    seconds REAL NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE run(
    id INTEGER PRIMARY KEY,
    job_id TEXT NOT NULL,
    workload TEXT NOT NULL,
    nodes INTEGER NOT NULL,
    global_batch INTEGER NOT NULL,
    epochs INTEGER NOT NULL,
    predicted_seconds REAL NOT NULL,
    measured_seconds REAL NOT NULL,
    test_accuracy REAL NOT NULL,
    created REAL NOT NULL
);
CREATE INDEX run_job ON run(job_id);
CREATE INDEX run_workload ON run(workload);
CREATE TABLE run_epoch(
    run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE,
    epoch INTEGER NOT NULL,
    seconds REAL,
    train_loss REAL,
    test_accuracy REAL,
    PRIMARY KEY(run_id, epoch)
);
PRAGMA user_version = 1;
)SQL";

// Migration 1 -> 2: the gradient noise scale tula-train measured (RunRecord::noise_scale,
// examples; NULL = not measured) and its observation count. ALTER TABLE ADD COLUMN keeps every
// row; the old rows get NULL and 0.
constexpr const char* kMigrateV1toV2 = R"SQL(
ALTER TABLE run ADD COLUMN noise_scale REAL;
ALTER TABLE run ADD COLUMN noise_observations INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 2;
)SQL";

// Migration 2 -> 3: each run's training examples per epoch (RunRecord::train_examples; a run
// with --limit-train sees fewer than the workload has). Old rows get 0 = the workload's.
constexpr const char* kMigrateV2toV3 = R"SQL(
ALTER TABLE run ADD COLUMN train_examples INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 3;
)SQL";

// Migration 3 -> 4: how many ranks of a multi-node job timed a compute point at once
// (ComputeSample::ranks; old rows were measured by one rank alone: 1) and the start-up
// seconds of a fresh process (ComputeSample::startup_seconds; old rows: NULL, not measured).
constexpr const char* kMigrateV3toV4 = R"SQL(
ALTER TABLE compute_profile ADD COLUMN ranks INTEGER NOT NULL DEFAULT 1;
ALTER TABLE compute_profile ADD COLUMN startup_seconds REAL;
PRAGMA user_version = 4;
)SQL";

// Migration 4 -> 5: the seconds of a synchronized data-parallel step that ranks > 1 timed
// next to the compute part (ComputeSample::synced_seconds_per_iter; old rows: NULL).
constexpr const char* kMigrateV4toV5 = R"SQL(
ALTER TABLE compute_profile ADD COLUMN synced_seconds_per_iter REAL;
PRAGMA user_version = 5;
)SQL";

// kMigrations[v - 1] takes schema version v to v + 1. A new database is created as version 1
// and migrated, so that a new database and a migrated one have the same schema.
constexpr const char* kMigrations[] = {kMigrateV1toV2, kMigrateV2toV3, kMigrateV3toV4, kMigrateV4toV5};
static_assert(sizeof kMigrations / sizeof kMigrations[0] == kSchemaVersion - 1, "one migration per schema step");

double now_seconds() {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return static_cast<double>(std::time(nullptr));
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// What to tell the user for a failed SQLite call, by primary result code.
std::string advice(int rc) {
    switch (rc & 0xff) {
        case SQLITE_NOTADB:
            return "it is not an SQLite database; move it aside (tula creates a new one) or restore it";
        case SQLITE_CORRUPT: return "the database is corrupt; move it aside (tula creates a new one) or restore it";
        case SQLITE_BUSY:
        case SQLITE_LOCKED: return "the database is locked by another process; retry later";
        case SQLITE_PERM:
        case SQLITE_AUTH:
        case SQLITE_READONLY: return "permission denied; check the file's owner and mode";
        case SQLITE_CANTOPEN: return "cannot open the file; check that it and its directory exist and are accessible";
        case SQLITE_FULL: return "the disk is full";
        case SQLITE_IOERR: return "an I/O error occurred";
        case SQLITE_INTERRUPT:
            return "reading it took longer than the " + std::to_string(read_deadline_ms()) +
                   " ms a read may take; it is too large, or built to make its readers spin";
        case SQLITE_TOOBIG:
            return "it holds a value larger than " + std::to_string(kMaxValueBytes) +
                   " bytes, which Tula never writes; it is not a tula profile database or was altered";
        default: return "";
    }
}

[[noreturn]] void fail(sqlite3* db, int rc, const std::string& path, const std::string& what) {
    std::string m = "profile database " + path + ": " + what + ": ";
    m += db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    const std::string a = advice(rc);
    if (!a.empty()) m += "; " + a;
    throw Error(m);
}

// A prepared statement; finalized on destruction. Every bind and step is checked.
class Stmt {
public:
    Stmt(sqlite3* db, const std::string& path, const char* sql) : db_(db), path_(path), sql_(sql) {
        const int rc = sqlite3_prepare_v2(db, sql, -1, &st_, nullptr);
        if (rc != SQLITE_OK) fail(db_, rc, path_, std::string("cannot prepare `") + sql + "`");
    }
    ~Stmt() { sqlite3_finalize(st_); }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;

    void bind(int i, const std::string& v) {
        check(sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), "bind");
    }
    void bind(int i, int64_t v) { check(sqlite3_bind_int64(st_, i, static_cast<sqlite3_int64>(v)), "bind"); }
    void bind(int i, int v) { check(sqlite3_bind_int64(st_, i, v), "bind"); }
    void bind(int i, double v) { check(sqlite3_bind_double(st_, i, v), "bind"); }
    void bind_null(int i) { check(sqlite3_bind_null(st_, i), "bind"); }

    /// True when a row is ready, false when done; throws on any error, and after
    /// kMaxRowsPerTable rows (the table is named).
    bool step() {
        const int rc = sqlite3_step(st_);
        if (rc == SQLITE_ROW) {
            if (++rows_ > kMaxRowsPerTable)
                throw Error("profile database " + path_ + ": table '" + table() + "' has more than " +
                            std::to_string(kMaxRowsPerTable) +
                            " rows, more than a profile database holds; it is not read (prune it: tula db prune)");
            return true;
        }
        if (rc == SQLITE_DONE) return false;
        fail(db_, rc, path_, std::string("cannot run `") + first_words() + "`");
    }
    void run() {
        while (step()) {
        }
    }

    /// Column `c` as text; a value longer than kMaxTextBytes is an error naming the column.
    std::string text(int c) const {
        const int n = sqlite3_column_bytes(st_, c);
        if (n > kMaxTextBytes) {
            const char* col = sqlite3_column_name(st_, c);
            throw Error("profile database " + path_ + ": a value of " + table() + "." + (col ? col : "?") + " is " +
                        std::to_string(n) + " bytes long, more than the " + std::to_string(kMaxTextBytes) +
                        " Tula writes; it is not read");
        }
        const unsigned char* p = sqlite3_column_text(st_, c);
        return p ? std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(sqlite3_column_bytes(st_, c)))
                 : std::string();
    }
    int64_t i64(int c) const { return static_cast<int64_t>(sqlite3_column_int64(st_, c)); }
    int i32(int c) const {
        const int64_t v = i64(c);
        return v > INT32_MAX ? INT32_MAX : v < INT32_MIN ? INT32_MIN : static_cast<int>(v);
    }
    double dbl(int c) const { return sqlite3_column_double(st_, c); }
    bool is_null(int c) const { return sqlite3_column_type(st_, c) == SQLITE_NULL; }
    sqlite3_stmt* handle() const { return st_; }

private:
    void check(int rc, const char* what) {
        if (rc != SQLITE_OK) fail(db_, rc, path_, std::string("cannot ") + what + " a value of `" + first_words() + "`");
    }
    // The table after the first " FROM " of the statement (for messages).
    std::string table() const {
        const char* f = std::strstr(sql_.c_str(), " FROM ");
        if (!f) return "?";
        std::string t;
        for (const char* q = f + 6; *q && *q != ' ' && *q != '('; ++q) t += *q;
        return t;
    }
    std::string first_words() const {
        std::string s(sql_);
        for (char& c : s)
            if (c == '\n') c = ' ';
        return s.size() > 60 ? s.substr(0, 57) + "..." : s;
    }
    sqlite3* db_;
    const std::string& path_;
    std::string sql_;  // a copy: callers pass the text of temporaries
    sqlite3_stmt* st_ = nullptr;
    int64_t rows_ = 0;
};

void exec(sqlite3* db, const std::string& path, const char* sql, const char* what) {
    char* err = nullptr;
    const int rc = sqlite3_exec(db, sql, nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
        std::string m = err ? err : sqlite3_errstr(rc);
        sqlite3_free(err);
        std::string msg = "profile database " + path + ": " + what + ": " + m;
        const std::string a = advice(rc);
        if (!a.empty()) msg += "; " + a;
        throw Error(msg);
    }
}

// The error of a failed BEGIN or COMMIT `rc`: what tula::Error says.
[[noreturn]] void fail_txn(sqlite3* db, int rc, const std::string& path, const char* what, int timeout_ms) {
    std::string m = "profile database " + path + ": " + what + ": " + sqlite3_errmsg(db);
    if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
        m += " (another process held it for more than " + std::to_string(timeout_ms) + " ms); retry later";
    else if (!advice(rc).empty())
        m += "; " + advice(rc);
    throw Error(m);
}

// BEGIN IMMEDIATE ... COMMIT; rolls back when destroyed before commit(). Both retry with
// jittered backoff on SQLITE_BUSY for at most `timeout_ms` (besides the busy handler's waits).
class Txn {
public:
    Txn(sqlite3* db, const std::string& path, int timeout_ms) : db_(db), path_(path), timeout_ms_(timeout_ms) {
        const int rc = detail::exec_retrying(db_, "BEGIN IMMEDIATE", timeout_ms_);
        if (rc != SQLITE_OK) fail_txn(db_, rc, path_, "cannot start a transaction", timeout_ms_);
    }
    ~Txn() {
        if (!done_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);  // best effort in unwinding
    }
    void commit() {
        const int rc = detail::exec_retrying(db_, "COMMIT", timeout_ms_);
        if (rc != SQLITE_OK) fail_txn(db_, rc, path_, "cannot commit", timeout_ms_);
        done_ = true;
    }

private:
    sqlite3* db_;
    const std::string& path_;
    int timeout_ms_;
    bool done_ = false;
};

int read_user_version(sqlite3* db, const std::string& path) {
    Stmt s(db, path, "PRAGMA user_version");
    if (!s.step()) throw Error("profile database " + path + ": PRAGMA user_version returned no row");
    return s.i32(0);
}

int64_t count_tables(sqlite3* db, const std::string& path) {
    Stmt s(db, path, "SELECT count(*) FROM sqlite_master");
    if (!s.step()) return 0;
    return s.i64(0);
}

// Creates every missing directory of `dir` with mode 0700. Throws tula::Error.
void make_dirs(const std::string& dir, const std::string& db_path) {
    if (dir.empty()) return;
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) throw Error("cannot create profile database " + db_path + ": " + dir + " is not a directory");
        return;
    }
    const size_t slash = dir.find_last_of('/');
    if (slash != std::string::npos && slash > 0) make_dirs(dir.substr(0, slash), db_path);
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
        throw Error("cannot create profile database " + db_path + ": mkdir " + dir + ": " + std::strerror(errno));
}

// URI for sqlite3_open_v2 with SQLITE_OPEN_URI: percent-encodes what URIs reserve.
std::string file_uri(const std::string& path, const char* query) {
    std::string u = "file:";
    for (unsigned char c : path) {
        if (c == '%' || c == '?' || c == '#' || c < 0x21 || c >= 0x7f) {
            char b[4];
            std::snprintf(b, sizeof b, "%%%02X", c);
            u += b;
        } else {
            u += static_cast<char>(c);
        }
    }
    return u + "?" + query;
}

bool nonempty_file(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && st.st_size > 0;
}

// The schema objects of every version (index = version; 0 = an empty database), read from a
// database built in memory by the same statements that create and migrate a file: what
// check_schema_allowed compares a file with. Built once per process. Throws tula::Error.
const std::vector<detail::SchemaObject>& reference_schema(int version) {
    static const std::vector<std::vector<detail::SchemaObject>> refs = [] {
        std::vector<std::vector<detail::SchemaObject>> r(kSchemaVersion + 1);
        sqlite3* db = nullptr;
        const std::string name = "(reference schema)";
        if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
            sqlite3_close_v2(db);
            throw Error("cannot open an in-memory SQLite database for the reference schema");
        }
        try {
            exec(db, name, kSchemaV1, "cannot create the reference schema");
            r[1] = detail::read_schema(db, name, true);
            for (int v = 1; v < kSchemaVersion; ++v) {
                exec(db, name, kMigrations[v - 1], "cannot migrate the reference schema");
                r[v + 1] = detail::read_schema(db, name, true);
            }
        } catch (...) {
            sqlite3_close_v2(db);
            throw;
        }
        sqlite3_close_v2(db);
        return r;
    }();
    return refs.at(static_cast<size_t>(version));
}

// Checks the schema version of an open connection and its objects (detail::check_schema_allowed
// against reference_schema); creates the schema when `create` and the database is empty, and
// then (and when `create` and the database is older) migrates it to kSchemaVersion in one
// transaction (waiting at most `timeout_ms` for the write lock). Returns the version the
// connection sees: kSchemaVersion, or an older readable one on a read-only connection. Throws
// tula::Error.
int check_schema(sqlite3* db, const std::string& path, bool create, int timeout_ms) {
    auto newer = [&](int v) {
        if (v > kSchemaVersion)
            throw Error("database " + path + " has schema version " + std::to_string(v) + ", this tula understands " +
                        std::to_string(kSchemaVersion) + ": upgrade tula");
    };
    int v = read_user_version(db, path);
    newer(v);
    if (v >= kOldestSchemaVersion) detail::check_schema_allowed(db, path, v, reference_schema(v));
    if (create && (v == 0 || (v >= kOldestSchemaVersion && v < kSchemaVersion))) {
        Txn t(db, path, timeout_ms);
        // Re-read inside the write lock: another process may have created or migrated it meanwhile.
        const int seen = v;
        v = read_user_version(db, path);
        newer(v);
        if (v != seen && v >= kOldestSchemaVersion) detail::check_schema_allowed(db, path, v, reference_schema(v));
        if (v == 0) {
            if (count_tables(db, path) != 0)
                throw Error("profile database " + path +
                            " has tables but no tula schema version; it is not a tula profile database: move it aside");
            exec(db, path, kSchemaV1, "cannot create the schema");
            v = 1;
        }
        for (; v >= kOldestSchemaVersion && v < kSchemaVersion; ++v)
            exec(db, path, kMigrations[v - 1],
                 ("cannot migrate the schema from version " + std::to_string(v) + " to " + std::to_string(v + 1) +
                  " (the database is left unchanged)")
                     .c_str());
        if (v == kSchemaVersion && read_user_version(db, path) != kSchemaVersion)
            throw Error("profile database " + path + ": the schema migration did not set version " +
                        std::to_string(kSchemaVersion));
        t.commit();
    }
    if (v < kOldestSchemaVersion)
        throw Error("database " + path + " has schema version " + std::to_string(v) +
                    ", so it is not a tula profile database (expected " + std::to_string(kSchemaVersion) +
                    "); create one with `tula profile`");
    return v;
}

// Reads the epochs of run `id` into `r`.
void read_epochs(sqlite3* db, const std::string& path, RunRecord* r) {
    Stmt s(db, path, "SELECT seconds, train_loss, test_accuracy FROM run_epoch WHERE run_id = ? ORDER BY epoch");
    s.bind(1, r->id);
    bool loss_ok = true, acc_ok = true;
    std::vector<double> loss, acc;
    while (s.step()) {
        r->epoch_seconds.push_back(s.is_null(0) ? 0.0 : s.dbl(0));
        loss_ok = loss_ok && !s.is_null(1);
        acc_ok = acc_ok && !s.is_null(2);
        loss.push_back(s.dbl(1));
        acc.push_back(s.dbl(2));
    }
    if (loss_ok) r->epoch_train_loss = loss;
    if (acc_ok) r->epoch_test_accuracy = acc;
}

// The SELECT of read_run for a database of schema version `schema` (version 1 has no
// noise-scale columns: NULL and 0 stand in for them; before version 3 train_examples is 0).
std::string run_columns(int schema) {
    return std::string("SELECT id, job_id, workload, nodes, global_batch, epochs, predicted_seconds, measured_seconds, "
                       "test_accuracy, created, ") +
           (schema >= 2 ? "noise_scale, noise_observations" : "NULL, 0") + (schema >= 3 ? ", train_examples" : ", 0") +
           " FROM run ";
}

// Inserts the run row of `r` (not its epochs) as it is, `created` included; a noise scale
// that is not a finite number > 0 is stored as NULL (not measured), a negative observation
// count as 0. The new row's id is sqlite3_last_insert_rowid.
void insert_run_row(sqlite3* db, const std::string& path, const RunRecord& r) {
    Stmt s(db, path,
           "INSERT INTO run(job_id, workload, nodes, global_batch, epochs, predicted_seconds, measured_seconds, "
           "test_accuracy, created, noise_scale, noise_observations, train_examples) "
           "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.bind(1, r.job_id);
    s.bind(2, r.workload);
    s.bind(3, r.nodes);
    s.bind(4, r.global_batch);
    s.bind(5, r.epochs);
    s.bind(6, r.predicted_seconds);
    s.bind(7, r.measured_seconds);
    s.bind(8, r.test_accuracy);
    s.bind(9, r.created);
    if (std::isfinite(r.noise_scale) && r.noise_scale > 0) s.bind(10, r.noise_scale);
    else s.bind_null(10);
    s.bind(11, std::max<int64_t>(0, r.noise_observations));
    s.bind(12, std::max<int64_t>(0, r.train_examples));
    s.run();
}

RunRecord read_run(const Stmt& s) {
    RunRecord r;
    r.id = s.i64(0);
    r.job_id = s.text(1);
    r.workload = s.text(2);
    r.nodes = s.i32(3);
    r.global_batch = s.i32(4);
    r.epochs = s.i32(5);
    r.predicted_seconds = s.dbl(6);
    r.measured_seconds = s.dbl(7);
    r.test_accuracy = s.dbl(8);
    r.created = s.dbl(9);
    r.noise_scale = s.is_null(10) ? 0.0 : s.dbl(10);
    r.noise_observations = s.i64(11);
    r.train_examples = s.i64(12);
    return r;
}

}  // namespace

ProfileDb ProfileDb::open(const std::string& path, Mode mode, int busy_timeout_ms) {
    if (path.empty()) throw Error("profile database path is empty");
    const bool rw = mode == Mode::ReadWrite;
    struct stat st;
    if (rw) {
        const size_t slash = path.find_last_of('/');
        if (slash != std::string::npos && slash > 0) make_dirs(path.substr(0, slash), path);
    } else if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT)
            throw Error("profile database " + path + " does not exist; create it with `tula profile`");
        throw Error("profile database " + path + ": " + std::strerror(errno));
    }
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
        throw Error("profile database " + path + " is not a regular file");

    // The handlers' state: the lock-wait limit, and for a reader the deadline of all its reads.
    const int timeout_ms = busy_timeout_ms < 0 ? (rw ? kWriteBusyTimeoutMs : kReadBusyTimeoutMs) : busy_timeout_ms;
    auto guard = std::make_unique<detail::ConnGuard>();
    guard->read_only = !rw;
    guard->timeout_ms = timeout_ms;
    guard->deadline_ms = rw ? 0 : detail::monotonic_ms() + read_deadline_ms();
    guard->rng = static_cast<unsigned>(::getpid()) * 2654435761u ^ static_cast<unsigned>(detail::monotonic_ms());

    // Opens the connection with `flags`, hardens it (detail::harden: limits, handlers, defensive
    // settings) and checks the schema. On failure `failed_rc` is the extended SQLite result code
    // when there was one.
    int failed_rc = SQLITE_OK;
    int schema = kSchemaVersion;
    auto connect = [&](const std::string& name, int flags) -> sqlite3* {
        sqlite3* db = nullptr;
        int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
        if (rc != SQLITE_OK) {
            std::string m = "profile database " + path + ": cannot open: " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
            const std::string a = advice(rc);
            if (!a.empty()) m += "; " + a;
            sqlite3_close_v2(db);
            throw Error(m);
        }
        try {
            rc = sqlite3_extended_result_codes(db, 1);
            if (rc != SQLITE_OK) fail(db, rc, path, "cannot enable extended result codes");
            detail::harden(db, path, guard.get());
            schema = check_schema(db, path, rw, timeout_ms);
        } catch (const Error& e) {
            failed_rc = sqlite3_extended_errcode(db);
            sqlite3_close_v2(db);
            // SQLite's wording of an interrupted or oversized read gets what it means here
            const std::string a = advice(failed_rc);
            if (((failed_rc & 0xff) == SQLITE_INTERRUPT || (failed_rc & 0xff) == SQLITE_TOOBIG) &&
                std::string(e.what()).find(a) == std::string::npos)
                throw Error(std::string(e.what()) + "; " + a);
            throw;
        } catch (...) {
            failed_rc = sqlite3_extended_errcode(db);
            sqlite3_close_v2(db);
            throw;
        }
        return db;
    };

    sqlite3* db = nullptr;
    if (rw) {
        db = connect(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
        try {
            // SQLite falls back to a read-only open when the file cannot be opened for writing
            if (sqlite3_db_readonly(db, "main") == 1)
                throw Error("profile database " + path + " could only be opened read-only; " + advice(SQLITE_READONLY));
            detail::choose_journal(db, path);  // WAL on a local disk, a rollback journal on NFS & co.
            exec(db, path, "PRAGMA foreign_keys=ON", "cannot enable foreign keys");
        } catch (...) {
            sqlite3_close_v2(db);
            throw;
        }
    } else {
        try {
            db = connect(path, SQLITE_OPEN_READONLY);
        } catch (const Error& e) {
            // Locked by a writer: say so without SQLite's wording (and never read it as
            // immutable, which would see a half-written transaction).
            if ((failed_rc & 0xff) == SQLITE_BUSY || (failed_rc & 0xff) == SQLITE_LOCKED)
                throw Error("profile database " + path + " is held by another process (a writer's lock) for longer than " +
                            std::to_string(std::min<long long>(timeout_ms, read_lock_budget_ms())) +
                            " ms; not read (retry later; TULA_DB_LOCK_WAIT_MS sets the wait)");
            // A WAL database needs its -shm file; a read-only user cannot create it in a
            // directory it cannot write (the system database after its writer closed). When no
            // -wal holds uncommitted pages, every committed page is in the main file, so read
            // it as immutable.
            if (nonempty_file(path + "-wal"))
                throw Error(std::string(e.what()) +
                            " (a WAL database read by a user who cannot write its directory needs its -shm file; "
                            "ask the owner to open it once read-write, e.g. with `tula profile`)");
            try {
                db = connect(file_uri(path, "immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
            } catch (const Error&) {
                throw e;
            }
        }
    }
    return ProfileDb(db, path, schema, std::move(guard));
}

ProfileDb::ProfileDb(sqlite3* db, std::string path, int schema, std::unique_ptr<detail::ConnGuard> guard)
    : db_(db), path_(std::move(path)), schema_(schema), guard_(std::move(guard)) {}

ProfileDb::ProfileDb(ProfileDb&& o) noexcept
    : db_(o.db_), path_(std::move(o.path_)), schema_(o.schema_), guard_(std::move(o.guard_)) {
    o.db_ = nullptr;
}

ProfileDb& ProfileDb::operator=(ProfileDb&& o) noexcept {
    if (this != &o) {
        if (db_) sqlite3_close_v2(db_);  // before its guard goes: the handlers read it
        db_ = o.db_;
        path_ = std::move(o.path_);
        schema_ = o.schema_;
        guard_ = std::move(o.guard_);
        o.db_ = nullptr;
    }
    return *this;
}

ProfileDb::~ProfileDb() {
    if (db_) sqlite3_close_v2(db_);  // statements are all finalized (Stmt is RAII); guard_ goes after
}

int ProfileDb::write_timeout_ms() const { return guard_ ? guard_->timeout_ms : kWriteBusyTimeoutMs; }

void ProfileDb::upsert_workload(const Workload& w) {
    if (w.name.empty()) throw Error("profile database " + path_ + ": cannot store a workload without a name");
    if (w.params < 0 || w.train_examples < 0 || w.test_examples < 0)
        throw Error("profile database " + path_ + ": workload " + w.name + " has a negative size");
    Stmt s(db_, path_,
           "INSERT INTO workload(name, model, dataset, params, train_examples, test_examples, updated) "
           "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET model = excluded.model, "
           "dataset = excluded.dataset, params = excluded.params, train_examples = excluded.train_examples, "
           "test_examples = excluded.test_examples, updated = excluded.updated");
    s.bind(1, w.name);
    s.bind(2, w.model);
    s.bind(3, w.dataset);
    s.bind(4, w.params);
    s.bind(5, w.train_examples);
    s.bind(6, w.test_examples);
    s.bind(7, now_seconds());
    s.run();
}

namespace {
Workload read_workload(const Stmt& s) {
    Workload w;
    w.name = s.text(0);
    w.model = s.text(1);
    w.dataset = s.text(2);
    w.params = s.i64(3);
    w.train_examples = s.i64(4);
    w.test_examples = s.i64(5);
    return w;
}
constexpr const char* kWorkloadColumns =
    "SELECT name, model, dataset, params, train_examples, test_examples FROM workload ";
}  // namespace

std::optional<Workload> ProfileDb::workload(const std::string& name) const {
    Stmt s(db_, path_, (std::string(kWorkloadColumns) + "WHERE name = ?").c_str());
    s.bind(1, name);
    if (!s.step()) return std::nullopt;
    return read_workload(s);
}

std::vector<Workload> ProfileDb::workloads() const {
    Stmt s(db_, path_, (std::string(kWorkloadColumns) + "ORDER BY name").c_str());
    std::vector<Workload> out;
    while (s.step()) out.push_back(read_workload(s));
    return out;
}

void ProfileDb::add_compute(const ComputeSample& c) {
    if (c.workload.empty() || c.local_batch < 1 || c.threads < 1 || c.ranks < 1 || c.iters < 0 ||
        !std::isfinite(c.seconds_per_iter) || c.seconds_per_iter <= 0)
        throw Error("profile database " + path_ + ": refusing an invalid compute sample (workload '" + c.workload +
                    "', local batch " + std::to_string(c.local_batch) + ", " + std::to_string(c.ranks) + " rank(s), " +
                    std::to_string(c.seconds_per_iter) + " s/iter)");
    Stmt s(db_, path_,
           "INSERT INTO compute_profile(workload, host, local_batch, threads, seconds_per_iter, iters, created, ranks, "
           "startup_seconds, synced_seconds_per_iter) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.bind(1, c.workload);
    s.bind(2, c.host);
    s.bind(3, c.local_batch);
    s.bind(4, c.threads);
    s.bind(5, c.seconds_per_iter);
    s.bind(6, c.iters);
    s.bind(7, now_seconds());
    s.bind(8, c.ranks);
    if (std::isfinite(c.startup_seconds) && c.startup_seconds >= 0) s.bind(9, c.startup_seconds);  // else NULL
    if (std::isfinite(c.synced_seconds_per_iter) && c.synced_seconds_per_iter > 0)
        s.bind(10, c.synced_seconds_per_iter);  // else NULL
    s.run();
}

// An empty `workload` returns every workload's samples (used by load_profiles).
std::vector<ComputeSample> ProfileDb::compute_samples(const std::string& workload) const {
    // A read-only connection to a database older than version 4 has no ranks column: 1 (and
    // older than 5 no synced column: NULL).
    const std::string sql = std::string("SELECT workload, host, local_batch, threads, seconds_per_iter, iters, ") +
                            (schema_ >= 4 ? "ranks, startup_seconds" : "1, NULL") +
                            (schema_ >= 5 ? ", synced_seconds_per_iter" : ", NULL") + " FROM compute_profile " +
                            (workload.empty() ? "" : "WHERE workload = ? ") + "ORDER BY id";
    Stmt s(db_, path_, sql.c_str());
    if (!workload.empty()) s.bind(1, workload);
    std::vector<ComputeSample> out;
    while (s.step()) {
        ComputeSample c;
        c.workload = s.text(0);
        c.host = s.text(1);
        c.local_batch = s.i32(2);
        c.threads = s.i32(3);
        c.seconds_per_iter = s.dbl(4);
        c.iters = s.i32(5);
        c.ranks = s.i32(6);
        if (!s.is_null(7)) c.startup_seconds = s.dbl(7);
        if (!s.is_null(8)) c.synced_seconds_per_iter = s.dbl(8);
        out.push_back(std::move(c));
    }
    return out;
}

void ProfileDb::add_allreduce(const AllreduceSample& a) {
    if (a.nodes < 1 || a.bytes < 0 || !std::isfinite(a.seconds) || a.seconds < 0)
        throw Error("profile database " + path_ + ": refusing an invalid allreduce sample (" + std::to_string(a.nodes) +
                    " nodes, " + std::to_string(a.bytes) + " bytes, " + std::to_string(a.seconds) + " s)");
    Stmt s(db_, path_, "INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created) VALUES(?, ?, ?, ?, ?)");
    s.bind(1, a.host);
    s.bind(2, a.nodes);
    s.bind(3, a.bytes);
    s.bind(4, a.seconds);
    s.bind(5, now_seconds());
    s.run();
}

std::vector<AllreduceSample> ProfileDb::allreduce_samples() const {
    Stmt s(db_, path_, "SELECT host, nodes, bytes, seconds FROM allreduce_profile ORDER BY id");
    std::vector<AllreduceSample> out;
    while (s.step()) {
        AllreduceSample a;
        a.host = s.text(0);
        a.nodes = s.i32(1);
        a.bytes = s.i64(2);
        a.seconds = s.dbl(3);
        out.push_back(a);
    }
    return out;
}

int64_t ProfileDb::add_run(const RunRecord& r) {
    const size_t n = r.epoch_seconds.size();
    if ((!r.epoch_train_loss.empty() && r.epoch_train_loss.size() != n) ||
        (!r.epoch_test_accuracy.empty() && r.epoch_test_accuracy.size() != n))
        throw Error("profile database " + path_ +
                    ": run record has per-epoch vectors of different lengths; each must have one value per epoch");
    auto finite = [](double v) { return std::isfinite(v) ? v : 0.0; };
    Txn t(db_, path_, write_timeout_ms());
    int64_t id = 0;
    {
        RunRecord row = r;  // the row as stored: non-finite values become 0
        row.predicted_seconds = finite(r.predicted_seconds);
        row.measured_seconds = finite(r.measured_seconds);
        row.test_accuracy = finite(r.test_accuracy);
        row.created = r.created > 0 && std::isfinite(r.created) ? r.created : now_seconds();
        insert_run_row(db_, path_, row);
        id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
    }
    {
        Stmt s(db_, path_,
               "INSERT INTO run_epoch(run_id, epoch, seconds, train_loss, test_accuracy) VALUES(?, ?, ?, ?, ?)");
        for (size_t i = 0; i < n; ++i) {
            s.bind(1, id);
            s.bind(2, static_cast<int>(i + 1));
            s.bind(3, finite(r.epoch_seconds[i]));
            // NaN would be stored as NULL anyway; NULL also marks "not recorded"
            if (r.epoch_train_loss.empty()) s.bind_null(4);
            else s.bind(4, r.epoch_train_loss[i]);
            if (r.epoch_test_accuracy.empty()) s.bind_null(5);
            else s.bind(5, r.epoch_test_accuracy[i]);
            s.run();
            const int rc = sqlite3_reset(s.handle());
            if (rc != SQLITE_OK) fail(db_, rc, path_, "cannot reset a statement");
        }
    }
    t.commit();
    return id;
}

std::vector<RunRecord> ProfileDb::runs(const std::string& workload) const {
    std::vector<RunRecord> out;
    {
        const std::string sql = run_columns(schema_) + (workload.empty() ? "" : "WHERE workload = ? ") +
                                "ORDER BY created DESC, id DESC";
        Stmt s(db_, path_, sql.c_str());
        if (!workload.empty()) s.bind(1, workload);
        while (s.step()) out.push_back(read_run(s));
    }
    for (auto& r : out) read_epochs(db_, path_, &r);
    return out;
}

std::optional<RunRecord> ProfileDb::run_by_job(const std::string& job_id) const {
    std::optional<RunRecord> r;
    {
        const std::string sql = run_columns(schema_) + "WHERE job_id = ? ORDER BY created DESC, id DESC LIMIT 1";
        Stmt s(db_, path_, sql.c_str());
        s.bind(1, job_id);
        if (s.step()) r = read_run(s);
    }
    if (r) read_epochs(db_, path_, &*r);
    return r;
}

// ---- exchange format (export / import) and pruning ----

namespace {

using ExJson = nlohmann::ordered_json;

constexpr const char* kExportFormat = "tula-profiles";

// A JSON number, or null for an SQL NULL column.
ExJson nullable(const Stmt& s, int c) { return s.is_null(c) ? ExJson(nullptr) : ExJson(s.dbl(c)); }

// Reads fields of one row of an imported document; every failure names the section and row.
class RowReader {
public:
    RowReader(const ExJson& row, const std::string& where) : row_(row), where_(where) {
        if (!row_.is_object()) bad("is not a JSON object");
    }
    [[noreturn]] void bad(const std::string& what) const { throw Error(where_ + " " + what); }
    const ExJson& field(const char* name) const {
        auto it = row_.find(name);
        if (it == row_.end()) bad(std::string("has no field \"") + name + "\"");
        return *it;
    }
    std::string text(const char* name, bool nonempty) const {
        const ExJson& v = field(name);
        if (!v.is_string()) bad(std::string(name) + " must be a string");
        std::string s = v.get<std::string>();
        if (nonempty && s.empty()) bad(std::string(name) + " must not be empty");
        if (s.size() > 4096) bad(std::string(name) + " is longer than 4096 bytes");
        return s;
    }
    // An integer in [lo, hi].
    int64_t integer(const char* name, int64_t lo, int64_t hi) const {
        const ExJson& v = field(name);
        if (!v.is_number_integer()) bad(std::string(name) + " must be an integer");
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
            bad(std::string(name) + " is too large");
        const int64_t x = v.get<int64_t>();
        if (x < lo || x > hi)
            bad(std::string(name) + " must be " + (lo == 1 ? "a count >= 1" : lo == 0 ? "an integer >= 0" : "in range") +
                (hi < INT64_MAX ? " and <= " + std::to_string(hi) : std::string()) + ", not " + std::to_string(x));
        return x;
    }
    // A finite number; > 0 when `positive`, else >= 0; at most `hi`.
    double number(const char* name, bool positive, double hi = HUGE_VAL) const {
        return check_number(field(name), name, positive, hi);
    }
    // As number(), or NaN for null / a missing field.
    double optional_number(const ExJson& v, const char* name, bool positive, double hi = HUGE_VAL) const {
        if (v.is_null()) return NAN;
        return check_number(v, name, positive, hi);
    }

private:
    double check_number(const ExJson& v, const char* name, bool positive, double hi) const {
        if (!v.is_number()) bad(std::string(name) + " must be a number");
        const double x = v.get<double>();
        if (!std::isfinite(x)) bad(std::string(name) + " must be finite");
        if (positive ? !(x > 0) : !(x >= 0))
            bad(std::string(name) + (positive ? " must be > 0" : " must be >= 0") + ", not " + ExJson(x).dump());
        if (x > hi) bad(std::string(name) + " must be <= " + ExJson(hi).dump() + ", not " + ExJson(x).dump());
        return x;
    }
    const ExJson& row_;
    std::string where_;
};

// The array `name` of the document (missing = empty). Errors: not an array.
const ExJson& section(const ExJson& doc, const char* name, const std::string& source) {
    static const ExJson empty = ExJson::array();
    auto it = doc.find(name);
    if (it == doc.end() || it->is_null()) return empty;
    if (!it->is_array()) throw Error(source + ": \"" + name + "\" must be a JSON array");
    return *it;
}

std::string row_name(const char* sec, size_t i) { return std::string(sec) + " row " + std::to_string(i + 1) + ":"; }

struct ImportedCompute {
    ComputeSample s;
    double created = 0;
};
struct ImportedAllreduce {
    AllreduceSample s;
    double created = 0;
};
// Per-epoch values of an imported run; NaN = not recorded (stored as NULL).
struct ImportedRun {
    RunRecord r;
    std::vector<double> seconds, loss, acc;
};

constexpr double kMaxTime = 4102444800.0;  // 2100-01-01, a generous upper bound for `created`

}  // namespace

std::string ProfileDb::export_json(const std::string& workload) const {
    ExJson doc;
    doc["format"] = kExportFormat;
    doc["schema_version"] = kSchemaVersion;
    doc["exported"] = now_seconds();
    doc["workload_filter"] = workload.empty() ? ExJson(nullptr) : ExJson(workload);
    ExJson ws = ExJson::array();
    for (const auto& w : workloads()) {
        if (!workload.empty() && w.name != workload) continue;
        ws.push_back({{"name", w.name}, {"model", w.model}, {"dataset", w.dataset}, {"params", w.params},
                      {"train_examples", w.train_examples}, {"test_examples", w.test_examples}});
    }
    doc["workloads"] = std::move(ws);
    ExJson cs = ExJson::array();
    {
        Stmt s(db_, path_,
               (std::string("SELECT workload, host, local_batch, threads, seconds_per_iter, iters, created, ") +
                (schema_ >= 4 ? "ranks, startup_seconds" : "1, NULL") +
                (schema_ >= 5 ? ", synced_seconds_per_iter" : ", NULL") + " FROM compute_profile " +
                (workload.empty() ? "" : "WHERE workload = ? ") + "ORDER BY id")
                   .c_str());
        if (!workload.empty()) s.bind(1, workload);
        while (s.step())
            cs.push_back({{"workload", s.text(0)}, {"host", s.text(1)}, {"local_batch", s.i64(2)},
                          {"threads", s.i64(3)}, {"seconds_per_iter", s.dbl(4)}, {"iters", s.i64(5)},
                          {"created", s.dbl(6)}, {"ranks", s.i64(7)},
                          {"startup_seconds", s.is_null(8) ? ExJson(nullptr) : ExJson(s.dbl(8))},
                          {"synced_seconds_per_iter", s.is_null(9) ? ExJson(nullptr) : ExJson(s.dbl(9))}});
    }
    doc["compute"] = std::move(cs);
    ExJson as = ExJson::array();
    if (workload.empty()) {
        Stmt s(db_, path_, "SELECT host, nodes, bytes, seconds, created FROM allreduce_profile ORDER BY id");
        while (s.step())
            as.push_back({{"host", s.text(0)}, {"nodes", s.i64(1)}, {"bytes", s.i64(2)}, {"seconds", s.dbl(3)},
                          {"created", s.dbl(4)}});
    }
    doc["allreduce"] = std::move(as);
    ExJson rs = ExJson::array();
    {
        const std::string sql = run_columns(schema_) + (workload.empty() ? "" : "WHERE workload = ? ") + "ORDER BY id";
        Stmt s(db_, path_, sql.c_str());
        if (!workload.empty()) s.bind(1, workload);
        while (s.step()) {
            const RunRecord r = read_run(s);
            ExJson j = {{"job_id", r.job_id}, {"workload", r.workload}, {"nodes", r.nodes},
                        {"global_batch", r.global_batch}, {"epochs", r.epochs},
                        {"predicted_seconds", r.predicted_seconds}, {"measured_seconds", r.measured_seconds},
                        {"test_accuracy", r.test_accuracy}, {"created", r.created},
                        {"noise_scale", r.noise_scale > 0 ? ExJson(r.noise_scale) : ExJson(nullptr)},
                        {"noise_observations", r.noise_observations},
                        {"train_examples", r.train_examples}};
            ExJson es = ExJson::array();
            Stmt e(db_, path_,
                   "SELECT epoch, seconds, train_loss, test_accuracy FROM run_epoch WHERE run_id = ? ORDER BY epoch");
            e.bind(1, r.id);
            while (e.step())
                es.push_back({{"epoch", e.i64(0)}, {"seconds", nullable(e, 1)}, {"train_loss", nullable(e, 2)},
                              {"test_accuracy", nullable(e, 3)}});
            j["epoch_rows"] = std::move(es);
            rs.push_back(std::move(j));
        }
    }
    doc["runs"] = std::move(rs);
    return doc.dump(2) + "\n";
}

ProfileDb::ImportCounts ProfileDb::import_json(const std::string& text, const std::string& source) {
    ExJson doc;
    try {
        doc = ExJson::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
        throw Error(source + ": not valid JSON (at byte " + std::to_string(e.byte) +
                    "); give a file written by `tula db export`");
    } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range 406: a number such as 1e99999
        throw Error(source + ": not valid JSON (" + e.what() + "); give a file written by `tula db export`");
    }
    if (!doc.is_object()) throw Error(source + ": not a tula profile export (the top level is not a JSON object)");
    auto fmt = doc.find("format");
    if (fmt == doc.end() || !fmt->is_string() || fmt->get<std::string>() != kExportFormat)
        throw Error(source + ": not a tula profile export (\"format\" is not \"" + kExportFormat +
                    "\"); give a file written by `tula db export`");
    auto ver = doc.find("schema_version");
    if (ver == doc.end() || !ver->is_number_integer())
        throw Error(source + ": \"schema_version\" is missing or not an integer");
    if (ver->is_number_unsigned() && ver->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        throw Error(source + ": schema_version is too large; upgrade tula");
    const int64_t version = ver->get<int64_t>();
    if (version < kOldestSchemaVersion || version > kSchemaVersion)
        throw Error(source + ": schema_version " + std::to_string(version) + " is not a version this tula reads (" +
                    std::to_string(kOldestSchemaVersion) + " to " + std::to_string(kSchemaVersion) + ")" +
                    (version > kSchemaVersion ? "; upgrade tula" : ""));

    // 1. Validate everything.
    std::vector<Workload> ws;
    const ExJson& jw = section(doc, "workloads", source);
    for (size_t i = 0; i < jw.size(); ++i) {
        RowReader r(jw[i], source + ": " + row_name("workloads", i));
        Workload w;
        w.name = r.text("name", true);
        w.model = r.text("model", true);
        w.dataset = r.text("dataset", true);
        w.params = r.integer("params", 1, INT64_MAX);
        w.train_examples = r.integer("train_examples", 1, INT64_MAX);
        w.test_examples = r.integer("test_examples", 0, INT64_MAX);
        ws.push_back(w);
    }
    std::vector<ImportedCompute> cs;
    const ExJson& jc = section(doc, "compute", source);
    for (size_t i = 0; i < jc.size(); ++i) {
        RowReader r(jc[i], source + ": " + row_name("compute", i));
        ImportedCompute c;
        c.s.workload = r.text("workload", true);
        c.s.host = r.text("host", false);
        c.s.local_batch = static_cast<int>(r.integer("local_batch", 1, INT32_MAX));
        c.s.threads = static_cast<int>(r.integer("threads", 1, INT32_MAX));
        c.s.seconds_per_iter = r.number("seconds_per_iter", true);
        c.s.iters = static_cast<int>(r.integer("iters", 1, INT32_MAX));
        c.created = r.number("created", true, kMaxTime);
        if (version >= 4 && jc[i].contains("ranks"))  // optional: missing = 1, one rank alone
            c.s.ranks = static_cast<int>(r.integer("ranks", 1, INT32_MAX));
        if (version >= 4 && jc[i].contains("startup_seconds")) {  // optional: missing or null = not measured
            const double v = r.optional_number(jc[i]["startup_seconds"], "startup_seconds", false);
            if (!std::isnan(v)) c.s.startup_seconds = v;
        }
        if (version >= 5 && jc[i].contains("synced_seconds_per_iter")) {  // optional: missing or null = not measured
            const double v = r.optional_number(jc[i]["synced_seconds_per_iter"], "synced_seconds_per_iter", true);
            if (!std::isnan(v)) c.s.synced_seconds_per_iter = v;
        }
        cs.push_back(c);
    }
    std::vector<ImportedAllreduce> as;
    const ExJson& ja = section(doc, "allreduce", source);
    for (size_t i = 0; i < ja.size(); ++i) {
        RowReader r(ja[i], source + ": " + row_name("allreduce", i));
        ImportedAllreduce a;
        a.s.host = r.text("host", false);
        a.s.nodes = static_cast<int>(r.integer("nodes", 1, INT32_MAX));
        a.s.bytes = r.integer("bytes", 1, INT64_MAX);
        a.s.seconds = r.number("seconds", true);
        a.created = r.number("created", true, kMaxTime);
        as.push_back(a);
    }
    std::vector<ImportedRun> rs;
    const ExJson& jr = section(doc, "runs", source);
    for (size_t i = 0; i < jr.size(); ++i) {
        const std::string where = source + ": " + row_name("runs", i);
        RowReader r(jr[i], where);
        ImportedRun x;
        x.r.job_id = r.text("job_id", false);
        x.r.workload = r.text("workload", true);
        x.r.nodes = static_cast<int>(r.integer("nodes", 1, INT32_MAX));
        x.r.global_batch = static_cast<int>(r.integer("global_batch", 1, INT32_MAX));
        x.r.epochs = static_cast<int>(r.integer("epochs", 1, INT32_MAX));
        x.r.predicted_seconds = r.number("predicted_seconds", false);  // 0: no prediction
        x.r.measured_seconds = r.number("measured_seconds", true);
        x.r.test_accuracy = r.number("test_accuracy", false, 1.0);
        x.r.created = r.number("created", true, kMaxTime);
        if (version >= 2) {  // optional: missing or null = not measured
            auto ns = jr[i].find("noise_scale");
            if (ns != jr[i].end()) {
                const double v = r.optional_number(*ns, "noise_scale", true);
                x.r.noise_scale = std::isnan(v) ? 0.0 : v;
            }
            if (jr[i].contains("noise_observations"))
                x.r.noise_observations = r.integer("noise_observations", 0, INT64_MAX);
        }
        if (version >= 3 && jr[i].contains("train_examples"))  // optional: missing = 0, the workload's
            x.r.train_examples = r.integer("train_examples", 0, INT64_MAX);
        const ExJson& er = r.field("epoch_rows");
        if (!er.is_array()) r.bad("epoch_rows must be a JSON array");
        for (size_t k = 0; k < er.size(); ++k) {
            RowReader e(er[k], where + " epoch row " + std::to_string(k + 1) + ":");
            if (e.integer("epoch", 1, INT32_MAX) != static_cast<int64_t>(k + 1))
                e.bad("epoch must be " + std::to_string(k + 1) + " (epoch rows are numbered 1, 2, ... in order)");
            x.seconds.push_back(e.optional_number(e.field("seconds"), "seconds", true));
            x.loss.push_back(e.optional_number(e.field("train_loss"), "train_loss", false));
            x.acc.push_back(e.optional_number(e.field("test_accuracy"), "test_accuracy", false, 1.0));
        }
        rs.push_back(std::move(x));
    }

    // 2. Add it all in one transaction.
    ImportCounts n;
    Txn t(db_, path_, write_timeout_ms());
    for (const auto& w : ws) {
        upsert_workload(w);
        ++n.workloads;
    }
    for (const auto& c : cs) {
        Stmt q(db_, path_,
               "SELECT COUNT(*) FROM compute_profile WHERE workload = ? AND host = ? AND local_batch = ? AND "
               "threads = ? AND seconds_per_iter = ? AND iters = ? AND created = ? AND ranks = ?");
        q.bind(1, c.s.workload);
        q.bind(2, c.s.host);
        q.bind(3, c.s.local_batch);
        q.bind(4, c.s.threads);
        q.bind(5, c.s.seconds_per_iter);
        q.bind(6, c.s.iters);
        q.bind(7, c.created);
        q.bind(8, c.s.ranks);
        if (q.step() && q.i64(0) > 0) {
            ++n.skipped;
            continue;
        }
        Stmt s(db_, path_,
               "INSERT INTO compute_profile(workload, host, local_batch, threads, seconds_per_iter, iters, created, "
               "ranks, startup_seconds, synced_seconds_per_iter) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
        s.bind(1, c.s.workload);
        s.bind(2, c.s.host);
        s.bind(3, c.s.local_batch);
        s.bind(4, c.s.threads);
        s.bind(5, c.s.seconds_per_iter);
        s.bind(6, c.s.iters);
        s.bind(7, c.created);
        s.bind(8, c.s.ranks);
        if (std::isfinite(c.s.startup_seconds)) s.bind(9, c.s.startup_seconds);
        if (std::isfinite(c.s.synced_seconds_per_iter)) s.bind(10, c.s.synced_seconds_per_iter);
        s.run();
        ++n.compute;
    }
    for (const auto& a : as) {
        Stmt q(db_, path_,
               "SELECT COUNT(*) FROM allreduce_profile WHERE host = ? AND nodes = ? AND bytes = ? AND seconds = ? AND "
               "created = ?");
        q.bind(1, a.s.host);
        q.bind(2, a.s.nodes);
        q.bind(3, a.s.bytes);
        q.bind(4, a.s.seconds);
        q.bind(5, a.created);
        if (q.step() && q.i64(0) > 0) {
            ++n.skipped;
            continue;
        }
        Stmt s(db_, path_, "INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created) VALUES(?, ?, ?, ?, ?)");
        s.bind(1, a.s.host);
        s.bind(2, a.s.nodes);
        s.bind(3, a.s.bytes);
        s.bind(4, a.s.seconds);
        s.bind(5, a.created);
        s.run();
        ++n.allreduce;
    }
    for (const auto& x : rs) {
        const RunRecord& r = x.r;
        Stmt q(db_, path_,
               "SELECT COUNT(*) FROM run WHERE job_id = ? AND workload = ? AND nodes = ? AND global_batch = ? AND "
               "epochs = ? AND measured_seconds = ? AND created = ?");
        q.bind(1, r.job_id);
        q.bind(2, r.workload);
        q.bind(3, r.nodes);
        q.bind(4, r.global_batch);
        q.bind(5, r.epochs);
        q.bind(6, r.measured_seconds);
        q.bind(7, r.created);
        if (q.step() && q.i64(0) > 0) {
            ++n.skipped;
            continue;
        }
        insert_run_row(db_, path_, r);
        const int64_t id = static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
        for (size_t k = 0; k < x.seconds.size(); ++k) {
            Stmt e(db_, path_,
                   "INSERT INTO run_epoch(run_id, epoch, seconds, train_loss, test_accuracy) VALUES(?, ?, ?, ?, ?)");
            e.bind(1, id);
            e.bind(2, static_cast<int>(k + 1));
            const double v[3] = {x.seconds[k], x.loss[k], x.acc[k]};
            for (int c = 0; c < 3; ++c) {
                if (std::isnan(v[c])) e.bind_null(3 + c);
                else e.bind(3 + c, v[c]);
            }
            e.run();
        }
        ++n.runs;
    }
    t.commit();
    return n;
}

ProfileDb::PruneCounts ProfileDb::prune(double before, const std::string& workload) {
    if (!(before > 0) && workload.empty())
        throw Error("profile database " + path_ + ": prune needs an age limit or a workload (refusing to remove every row)");
    PruneCounts n;
    Txn t(db_, path_, write_timeout_ms());
    // Deletes with `sql` + the filters; returns the number of rows removed.
    auto remove = [&](const char* table, bool by_workload) -> size_t {
        std::string sql = std::string("DELETE FROM ") + table + " WHERE 1";
        if (before > 0) sql += " AND created < ?";
        if (by_workload) sql += " AND workload = ?";
        Stmt s(db_, path_, sql.c_str());
        int i = 1;
        if (before > 0) s.bind(i++, before);
        if (by_workload) s.bind(i++, workload);
        s.run();
        return static_cast<size_t>(sqlite3_changes(db_));
    };
    n.compute = remove("compute_profile", !workload.empty());
    if (workload.empty()) n.allreduce = remove("allreduce_profile", false);
    {
        // Per-epoch rows of the runs about to go (foreign keys may be off on this connection).
        std::string sql = "DELETE FROM run_epoch WHERE run_id IN (SELECT id FROM run WHERE 1";
        if (before > 0) sql += " AND created < ?";
        if (!workload.empty()) sql += " AND workload = ?";
        sql += ")";
        Stmt s(db_, path_, sql.c_str());
        int i = 1;
        if (before > 0) s.bind(i++, before);
        if (!workload.empty()) s.bind(i++, workload);
        s.run();
    }
    n.runs = remove("run", !workload.empty());
    {
        // Workload rows left without any compute sample or run.
        std::string sql =
            "DELETE FROM workload WHERE NOT EXISTS (SELECT 1 FROM compute_profile c WHERE c.workload = workload.name) "
            "AND NOT EXISTS (SELECT 1 FROM run r WHERE r.workload = workload.name)";
        if (before > 0) sql += " AND updated < ?";
        if (!workload.empty()) sql += " AND name = ?";
        Stmt s(db_, path_, sql.c_str());
        int i = 1;
        if (before > 0) s.bind(i++, before);
        if (!workload.empty()) s.bind(i++, workload);
        s.run();
        n.workloads = static_cast<size_t>(sqlite3_changes(db_));
    }
    t.commit();
    return n;
}

std::optional<Workload> ProfileSet::find(const std::string& name) const {
    for (const auto& w : workloads)
        if (w.name == name) return w;
    return std::nullopt;
}

std::vector<ComputeSample> ProfileSet::compute_for(const std::string& workload) const {
    std::vector<ComputeSample> out;
    for (const auto& c : compute)
        if (c.workload == workload) out.push_back(c);
    return out;
}

ProfileSet load_profiles(const std::vector<std::string>& paths, std::vector<std::string>* warnings) {
    return load_profiles(paths, warnings, "");
}

ProfileSet load_profiles(const std::vector<std::string>& paths, std::vector<std::string>* warnings,
                         const std::string& workload, std::vector<RunRecord>* runs) {
    ProfileSet set;
    std::map<std::string, size_t> index;  // workload name -> position in set.workloads
    for (const auto& p : paths) {
        if (p.empty()) continue;
        struct stat st;
        if (::stat(p.c_str(), &st) != 0 && errno == ENOENT) continue;  // not created yet: fine
        std::optional<ProfileDb> opened;
        try {
            opened.emplace(ProfileDb::open(p, ProfileDb::Mode::ReadOnly));
            const ProfileDb& db = *opened;
            std::vector<Workload> w = db.workloads();
            std::vector<ComputeSample> c = db.compute_samples(workload);  // "" = every workload's
            std::vector<AllreduceSample> a = db.allreduce_samples();
            for (auto& x : w) {
                auto it = index.find(x.name);
                if (it == index.end()) {
                    index[x.name] = set.workloads.size();
                    set.workloads.push_back(std::move(x));
                } else {
                    set.workloads[it->second] = std::move(x);
                }
            }
            // moved, not copied: a site database may hold many workloads' rows
            if (set.compute.empty()) {
                set.compute = std::move(c);
            } else {
                set.compute.insert(set.compute.end(), std::make_move_iterator(c.begin()),
                                   std::make_move_iterator(c.end()));
            }
            set.allreduce.insert(set.allreduce.end(), std::make_move_iterator(a.begin()),
                                 std::make_move_iterator(a.end()));
        } catch (const std::exception& e) {
            if (warnings) warnings->push_back(std::string(e.what()) + " (skipped)");
        }
        if (runs && opened) {
            try {
                std::vector<RunRecord> r = opened->runs(workload);
                runs->insert(runs->end(), std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
            } catch (const std::exception&) {
                // runs that cannot be read: the plan goes on without them (no warning)
            }
        }
    }
    return set;
}

}  // namespace tula
