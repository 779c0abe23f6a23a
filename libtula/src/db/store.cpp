// libtula: the profile database's store (ProfileDb): opening a file hardened, the workload,
// compute, allreduce and run rows. See db.hpp.
#include "db/sqlite.hpp"

namespace tula {
namespace detail {

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
// noise-scale columns: NULL and 0 stand in for them; before version 3 train_examples is 0,
// before version 7 the optimizer is '', before version 8 the class '' and 1 rank per node,
// before version 10 one part of unknown seconds).
std::string run_columns(int schema) {
    return std::string("SELECT id, job_id, workload, nodes, global_batch, epochs, predicted_seconds, measured_seconds, "
                       "test_accuracy, created, ") +
           (schema >= 2 ? "noise_scale, noise_observations" : "NULL, 0") + (schema >= 3 ? ", train_examples" : ", 0") +
           (schema >= 7 ? ", optimizer" : ", ''") + (schema >= 8 ? ", hardware_class, ranks_per_node" : ", '', 1") +
           (schema >= 10 ? ", parts, part_seconds" : ", 1, NULL") + " FROM run ";
}

namespace {
// RunRecord::part_seconds as the run.part_seconds column's JSON list ("[12.5,30.25]"), or ""
// (stored as NULL) when the run has one part or its part seconds are not known.
std::string part_seconds_text(const RunRecord& r) {
    if (r.parts <= 1 || r.part_seconds.size() != static_cast<size_t>(r.parts)) return "";
    std::string t = "[";
    char num[32];
    for (size_t i = 0; i < r.part_seconds.size(); ++i) {
        std::snprintf(num, sizeof num, "%.17g", r.part_seconds[i]);
        t += (i ? "," : "") + std::string(num);
    }
    return t + "]";
}

// The run.part_seconds column's text as (parts,) seconds; empty when it is not such a list of
// finite numbers >= 0 (a database edited by hand is read, not trusted).
std::vector<double> part_seconds_from_text(const std::string& text, int parts) {
    std::vector<double> v;
    if (text.size() < 2 || text.front() != '[' || text.back() != ']') return {};
    const char* p = text.c_str() + 1;
    const char* end = text.c_str() + text.size() - 1;
    while (p < end) {
        char* q = nullptr;
        const double x = std::strtod(p, &q);
        if (q == p || !std::isfinite(x) || x < 0) return {};
        v.push_back(x);
        p = q;
        if (p < end && *p != ',') return {};
        if (p < end) ++p;
    }
    if (v.size() != static_cast<size_t>(parts)) return {};
    return v;
}
}  // namespace

// Inserts the run row of `r` (not its epochs) as it is, `created` included; a noise scale
// that is not a finite number > 0 is stored as NULL (not measured), a negative observation
// count as 0, part_seconds as NULL when empty or of one part (part_seconds_text). The new
// row's id is sqlite3_last_insert_rowid.
void insert_run_row(sqlite3* db, const std::string& path, const RunRecord& r) {
    Stmt s(db, path,
           "INSERT INTO run(job_id, workload, nodes, global_batch, epochs, predicted_seconds, measured_seconds, "
           "test_accuracy, created, noise_scale, noise_observations, train_examples, optimizer, hardware_class, "
           "ranks_per_node, parts, part_seconds) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.bind_all(r.job_id, r.workload, r.nodes, r.global_batch, r.epochs, r.predicted_seconds, r.measured_seconds,
               r.test_accuracy, r.created);
    if (std::isfinite(r.noise_scale) && r.noise_scale > 0) s.bind(10, r.noise_scale);
    else s.bind_null(10);
    s.bind(11, std::max<int64_t>(0, r.noise_observations));
    s.bind(12, std::max<int64_t>(0, r.train_examples));
    s.bind(13, r.optimizer);
    s.bind(14, r.hardware_class);
    s.bind(15, std::max(1, r.ranks_per_node));
    s.bind(16, std::max(1, r.parts));
    const std::string parts = part_seconds_text(r);
    if (parts.empty()) s.bind_null(17);
    else s.bind(17, parts);
    s.run();
}

RunRecord read_run(const Stmt& s) {
    RunRecord r;
    s.get_from(0, r.id, r.job_id, r.workload, r.nodes, r.global_batch, r.epochs, r.predicted_seconds,
               r.measured_seconds, r.test_accuracy, r.created);
    r.noise_scale = s.is_null(10) ? 0.0 : s.dbl(10);
    r.noise_observations = s.i64(11);
    r.train_examples = s.i64(12);
    r.optimizer = s.text(13);
    r.hardware_class = s.text(14);
    r.ranks_per_node = std::max(1, static_cast<int>(s.i64(15)));
    r.parts = static_cast<int>(std::clamp<int64_t>(s.i64(16), 1, INT32_MAX));
    if (!s.is_null(17)) r.part_seconds = part_seconds_from_text(s.text(17), r.parts);
    return r;
}

Workload read_workload(const Stmt& s) {
    Workload w;
    s.get_from(0, w.name, w.model, w.dataset, w.params, w.train_examples, w.test_examples, w.activation_floats);
    return w;
}
// The SELECT of read_workload for a database of schema version `schema` (before version 6 the
// activation size is 0, not known).
std::string workload_columns(int schema) {
    return std::string("SELECT name, model, dataset, params, train_examples, test_examples, ") +
           (schema >= 6 ? "activation_floats" : "0") + " FROM workload ";
}

}  // namespace detail

using namespace detail;

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
                throw Error("profile database " + path + " is held by another process (a writer's lock); not read (" +
                            "this process waited " + std::to_string(read_lock_waited_ms()) + " ms for locks, at most " +
                            std::to_string(std::min<long long>(timeout_ms, read_lock_budget_ms())) +
                            " ms; retry later; TULA_DB_LOCK_WAIT_MS sets the wait)");
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

namespace {
// The workload row of `w`, inserted or replaced (ProfileDb::upsert_workload).
void upsert_workload_row(sqlite3* db, const std::string& path, const Workload& w) {
    if (w.name.empty()) throw Error("profile database " + path + ": cannot store a workload without a name");
    if (w.params < 0 || w.train_examples < 0 || w.test_examples < 0 || w.activation_floats < 0)
        throw Error("profile database " + path + ": workload " + w.name + " has a negative size");
    Stmt s(db, path,
           "INSERT INTO workload(name, model, dataset, params, train_examples, test_examples, updated, "
           "activation_floats) VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET model = excluded.model, "
           "dataset = excluded.dataset, params = excluded.params, train_examples = excluded.train_examples, "
           "test_examples = excluded.test_examples, updated = excluded.updated, "
           "activation_floats = excluded.activation_floats");
    s.bind_all(w.name, w.model, w.dataset, w.params, w.train_examples, w.test_examples, now_seconds(),
               w.activation_floats);
    s.run();
}
}  // namespace

int ProfileDb::write_timeout_ms() const { return guard_ ? guard_->timeout_ms : kWriteBusyTimeoutMs; }

void ProfileDb::upsert_workload(const Workload& w) { upsert_workload_row(db_, path_, w); }



std::optional<Workload> ProfileDb::workload(const std::string& name) const {
    Stmt s(db_, path_, (workload_columns(schema_) + "WHERE name = ?").c_str());
    s.bind(1, name);
    if (!s.step()) return std::nullopt;
    return read_workload(s);
}

std::vector<Workload> ProfileDb::workloads() const {
    Stmt s(db_, path_, (workload_columns(schema_) + "ORDER BY name").c_str());
    std::vector<Workload> out;
    while (s.step()) out.push_back(read_workload(s));
    return out;
}

void ProfileDb::add_compute(const ComputeSample& c) {
    if (c.workload.empty() || c.local_batch < 1 || c.threads < 1 || c.ranks < 1 || c.ranks_per_node < 1 ||
        c.ranks % c.ranks_per_node != 0 || c.iters < 0 ||
        !std::isfinite(c.seconds_per_iter) || c.seconds_per_iter <= 0)
        throw Error("profile database " + path_ + ": refusing an invalid compute sample (workload '" + c.workload +
                    "', local batch " + std::to_string(c.local_batch) + ", " + std::to_string(c.ranks) + " rank(s), " +
                    std::to_string(c.seconds_per_iter) + " s/iter)");
    Stmt s(db_, path_,
           "INSERT INTO compute_profile(workload, host, local_batch, threads, seconds_per_iter, iters, created, ranks, "
           "startup_seconds, synced_seconds_per_iter, hardware_class, ranks_per_node, job_id) "
           "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    s.bind_all(c.workload, c.host, c.local_batch, c.threads, c.seconds_per_iter, c.iters, now_seconds(), c.ranks);
    s.bind(11, c.hardware_class);
    s.bind(12, c.ranks_per_node);
    s.bind(13, c.job_id);
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
                            (schema_ >= 5 ? ", synced_seconds_per_iter" : ", NULL") +
                            (schema_ >= 8 ? ", hardware_class, ranks_per_node" : ", '', 1") +
                            (schema_ >= 11 ? ", job_id" : ", ''") + " FROM compute_profile " +
                            (workload.empty() ? "" : "WHERE workload = ? ") + "ORDER BY id";
    Stmt s(db_, path_, sql.c_str());
    if (!workload.empty()) s.bind(1, workload);
    std::vector<ComputeSample> out;
    while (s.step()) {
        ComputeSample c;
        s.get_from(0, c.workload, c.host, c.local_batch, c.threads, c.seconds_per_iter, c.iters, c.ranks);
        if (!s.is_null(7)) c.startup_seconds = s.dbl(7);
        if (!s.is_null(8)) c.synced_seconds_per_iter = s.dbl(8);
        c.hardware_class = s.text(9);
        c.ranks_per_node = std::max(1, static_cast<int>(s.i64(10)));
        c.job_id = s.text(11);
        out.push_back(std::move(c));
    }
    return out;
}

void ProfileDb::add_allreduce(const AllreduceSample& a) {
    if (a.nodes < 1 || a.ranks_per_node < 1 || a.bytes < 0 || !std::isfinite(a.seconds) || a.seconds < 0)
        throw Error("profile database " + path_ + ": refusing an invalid allreduce sample (" + std::to_string(a.nodes) +
                    " nodes x " + std::to_string(a.ranks_per_node) + " ranks, " + std::to_string(a.bytes) + " bytes, " +
                    std::to_string(a.seconds) + " s)");
    Stmt s(db_, path_,
           "INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created, hardware_class, ranks_per_node) "
           "VALUES(?, ?, ?, ?, ?, ?, ?)");
    s.bind_all(a.host, a.nodes, a.bytes, a.seconds, now_seconds(), a.hardware_class, a.ranks_per_node);
    s.run();
}

std::vector<AllreduceSample> ProfileDb::allreduce_samples() const {
    const std::string sql = std::string("SELECT host, nodes, bytes, seconds, ") +
                            (schema_ >= 8 ? "hardware_class" : "''") + (schema_ >= 9 ? ", ranks_per_node" : ", 1") +
                            " FROM allreduce_profile ORDER BY id";
    Stmt s(db_, path_, sql.c_str());
    std::vector<AllreduceSample> out;
    while (s.step()) {
        AllreduceSample a;
        s.get_from(0, a.host, a.nodes, a.bytes, a.seconds, a.hardware_class, a.ranks_per_node);
        a.ranks_per_node = std::max(1, a.ranks_per_node);
        out.push_back(a);
    }
    return out;
}

int64_t ProfileDb::add_run(const RunRecord& r) { return add_run(r, nullptr); }

int64_t ProfileDb::add_run(const RunRecord& r, const Workload* workload) {
    const size_t n = r.epoch_seconds.size();
    if ((!r.epoch_train_loss.empty() && r.epoch_train_loss.size() != n) ||
        (!r.epoch_test_accuracy.empty() && r.epoch_test_accuracy.size() != n))
        throw Error("profile database " + path_ +
                    ": run record has per-epoch vectors of different lengths; each must have one value per epoch");
    if (r.parts < 1 || (!r.part_seconds.empty() && r.part_seconds.size() != static_cast<size_t>(r.parts)))
        throw Error("profile database " + path_ + ": run record has " + std::to_string(r.parts) + " parts and " +
                    std::to_string(r.part_seconds.size()) +
                    " part seconds; parts must be >= 1 and part_seconds empty or one value per part");
    for (double x : r.part_seconds)
        if (!std::isfinite(x) || x < 0)
            throw Error("profile database " + path_ + ": run record has a part of " + std::to_string(x) +
                        " seconds; each must be a finite number >= 0");
    auto finite = [](double v) { return std::isfinite(v) ? v : 0.0; };
    Txn t(db_, path_, write_timeout_ms());
    if (workload) upsert_workload_row(db_, path_, *workload);
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
            s.bind_all(id, static_cast<int>(i + 1), finite(r.epoch_seconds[i]));
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

std::vector<RunRecord> ProfileDb::runs(const std::string& workload, bool epochs) const {
    std::vector<RunRecord> out;
    {
        const std::string sql = run_columns(schema_) + (workload.empty() ? "" : "WHERE workload = ? ") +
                                "ORDER BY created DESC, id DESC";
        Stmt s(db_, path_, sql.c_str());
        if (!workload.empty()) s.bind(1, workload);
        while (s.step()) out.push_back(read_run(s));
    }
    if (epochs)
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

}  // namespace tula
