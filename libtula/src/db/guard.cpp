// libtula: hardening of the profile database connections (see db/guard.hpp and db.hpp).
//
// A user can hand `tula plan` any file as a profile database, and the planner reads it at every
// submission; so before anything is read, each connection is put in SQLite's defensive
// configuration (SQLite, "Defense Against The Dark Arts", https://sqlite.org/security.html:
// SQLITE_DBCONFIG_DEFENSIVE, trusted_schema=OFF, sqlite3_limit, a progress-handler deadline, no
// memory map, cell_size_check) and its schema is compared with the one Tula creates.
#include "db/guard.hpp"

#include <sqlite3.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "tula/db.hpp"
#include "tula/error.hpp"

namespace tula {
namespace {

// The process-wide lock-wait budget of read-only connections (db.hpp, set_read_lock_budget):
// the limit, -1 until it was set or read from the environment, and the milliseconds spent.
std::atomic<int> g_read_budget_ms{-1};
std::atomic<long long> g_read_waited_ms{0};
// The read deadline of later read-only opens, milliseconds (set_read_deadline).
std::atomic<int> g_read_deadline_ms{kDefaultReadDeadlineMs};
// The journal mode forced by set_journal_mode_for_testing ("" = by file system).
std::mutex g_journal_mu;
std::string g_journal_override;

int read_budget_ms() {
    int b = g_read_budget_ms.load();
    if (b >= 0) return b;
    b = kDefaultReadLockBudgetMs;
    const char* e = std::getenv("TULA_DB_LOCK_WAIT_MS");
    if (e && *e && std::strlen(e) <= 6) {
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(e, &end, 10);
        if (errno == 0 && end && *end == '\0' && v >= 0 && v <= kMaxReadLockBudgetMs) b = static_cast<int>(v);
    }
    int expected = -1;
    g_read_budget_ms.compare_exchange_strong(expected, b);
    return g_read_budget_ms.load();
}

// sqlite3_busy_handler callback of read-only connections; `ctx` is the connection's ConnGuard.
// Like SQLite's own busy timeout it sleeps in growing steps (1 .. 100 ms) and gives up (returns
// 0: SQLITE_BUSY) once the steps of this lock attempt (`count` = retries so far) reach the
// connection's timeout; in addition it gives up once the read-only connections of the whole
// process have waited the process-wide budget. Time slept moves the read deadline on.
int read_busy_handler(void* ctx, int count) {
    auto* g = static_cast<detail::ConnGuard*>(ctx);
    static const int kSteps[] = {1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100};
    constexpr int n = static_cast<int>(sizeof kSteps / sizeof kSteps[0]);
    const long long own_ms = g->timeout_ms;
    long long prior = 0;  // what the earlier steps of this attempt slept
    for (int i = 0; i < count; ++i) {
        prior += kSteps[i < n ? i : n - 1];
        if (prior >= own_ms) break;
    }
    const long long left = std::min(own_ms - prior, read_budget_ms() - g_read_waited_ms.load());
    if (left <= 0) return 0;
    const long long step = std::min<long long>(kSteps[count < n ? count : n - 1], left);
    const long long t0 = detail::monotonic_ms();
    sqlite3_sleep(static_cast<int>(step));
    // what it really slept (more under load), at least the request (a clock that did not move)
    const long long slept = std::max(step, detail::monotonic_ms() - t0);
    g_read_waited_ms.fetch_add(slept);
    if (g->deadline_ms > 0) g->deadline_ms += slept;
    return 1;
}

// sqlite3_busy_handler callback of read-write connections: sleeps a random 1 .. 2^(count+1) ms
// (at most 100 ms) so that many writers that found the lock taken at the same moment do not
// retry in step, until this lock attempt has waited the connection's timeout.
int write_busy_handler(void* ctx, int count) {
    auto* g = static_cast<detail::ConnGuard*>(ctx);
    const long long now = detail::monotonic_ms();
    if (count == 0) g->wait_start_ms = now;
    const long long left = g->timeout_ms - (now - g->wait_start_ms);
    if (left <= 0) return 0;
    const int cap = count < 6 ? 2 << count : 100;
    const long long ms = std::min<long long>(1 + rand_r(&g->rng) % static_cast<unsigned>(std::min(cap, 100)), left);
    sqlite3_sleep(static_cast<int>(ms));
    if (g->deadline_ms > 0) g->deadline_ms += ms;
    return 1;
}

// sqlite3_progress_handler callback: non-zero (interrupt the statement) past the deadline.
int deadline_handler(void* ctx) {
    const auto* g = static_cast<const detail::ConnGuard*>(ctx);
    return g->deadline_ms > 0 && detail::monotonic_ms() > g->deadline_ms ? 1 : 0;
}

// Virtual-machine steps between two looks at the clock (about 10 to 100 microseconds).
constexpr int kProgressSteps = 1000;
// Objects a database's sqlite_master may hold: Tula creates 10 (5 tables, 3 indexes, 2
// automatic indexes); SQLite may add sqlite_stat1, sqlite_stat4 and sqlite_sequence.
constexpr int kMaxSchemaObjects = 64;

// sqlite3_limit values of every connection: Tula's own statements and schema need far less.
struct Limit {
    int id, value;
};
constexpr Limit kLimits[] = {
    {SQLITE_LIMIT_LENGTH, kMaxValueBytes},   // bytes of one value (text, blob, row)
    {SQLITE_LIMIT_SQL_LENGTH, 100000},       // bytes of one statement (also each CREATE in the schema)
    {SQLITE_LIMIT_COLUMN, 64},               // columns of a table, index or result
    {SQLITE_LIMIT_EXPR_DEPTH, 64},           // depth of an expression tree
    {SQLITE_LIMIT_COMPOUND_SELECT, 4},       // terms of a UNION / EXCEPT chain
    {SQLITE_LIMIT_VDBE_OP, 25000},           // instructions of one prepared statement
    {SQLITE_LIMIT_FUNCTION_ARG, 8},          // arguments of a function
    {SQLITE_LIMIT_ATTACHED, 0},              // ATTACH: never
    {SQLITE_LIMIT_LIKE_PATTERN_LENGTH, 64},  // bytes of a LIKE / GLOB pattern
    {SQLITE_LIMIT_VARIABLE_NUMBER, 32},      // ? parameters of a statement
    {SQLITE_LIMIT_TRIGGER_DEPTH, 1},         // trigger recursion (triggers are off anyway)
    {SQLITE_LIMIT_WORKER_THREADS, 0},        // sorter threads
};

[[noreturn]] void refuse(sqlite3* db, const std::string& path, const std::string& what) {
    throw Error("profile database " + path + ": " + what + ": " + (db ? sqlite3_errmsg(db) : "unknown error"));
}

// Every row of `sql` (bound to `args`) as its columns joined by '|' and rows by ';'.
std::string rows_text(sqlite3* db, const std::string& path, const char* sql, const std::vector<std::string>& args) {
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) != SQLITE_OK) refuse(db, path, std::string("cannot read its schema (") + sql + ")");
    for (size_t i = 0; i < args.size(); ++i)
        sqlite3_bind_text(st, static_cast<int>(i + 1), args[i].c_str(), -1, SQLITE_TRANSIENT);
    std::string out;
    int rc, rows = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (++rows > 4 * kMaxSchemaObjects) break;  // no table of Tula's has that many columns
        for (int c = 0; c < sqlite3_column_count(st); ++c) {
            const unsigned char* t = sqlite3_column_text(st, c);
            out += sqlite3_column_type(st, c) == SQLITE_NULL ? "<null>" : std::string(t ? reinterpret_cast<const char*>(t) : "");
            out += '|';
        }
        out += ';';
    }
    sqlite3_finalize(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) refuse(db, path, "cannot read its schema");
    return out;
}

bool starts_with(const std::string& s, const char* p) { return s.compare(0, std::strlen(p), p) == 0; }

bool is_virtual(const detail::SchemaObject& o) {
    std::string head = o.sql.substr(0, 32);
    for (char& c : head) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return o.type == "table" && starts_with(head, "CREATE VIRTUAL");
}

// The signature of a table or index (db/guard.hpp, SchemaObject).
std::string signature_of(sqlite3* db, const std::string& path, const detail::SchemaObject& o) {
    if (o.type == "table") {
        // a plain rowid table: "CREATE TABLE name(...)" with nothing after the parenthesis
        // (WITHOUT ROWID and STRICT tables, and virtual ones, end otherwise)
        const size_t last = o.sql.find_last_not_of(" \t\r\n");
        const bool plain = starts_with(o.sql, "CREATE TABLE ") && last != std::string::npos && o.sql[last] == ')';
        return std::string(plain ? "" : "!") +
               rows_text(db, path, "SELECT cid, name, type, \"notnull\", dflt_value, pk, hidden FROM pragma_table_xinfo(?1)",
                         {o.name});
    }
    if (o.type == "index")
        return rows_text(db, path, "SELECT seqno, cid, name, \"desc\", coll, key FROM pragma_index_xinfo(?1)", {o.name}) +
               rows_text(db, path, "SELECT \"unique\", origin, partial FROM pragma_index_list(?1) WHERE name = ?2",
                         {o.tbl_name, o.name});
    return "";
}

}  // namespace

namespace detail {

long long monotonic_ms() {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) return 0;
    return static_cast<long long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void harden(sqlite3* db, const std::string& path, ConnGuard* g) {
    struct Flag {
        int op, value;
        const char* name;
    };
    static const Flag kFlags[] = {
        {SQLITE_DBCONFIG_DEFENSIVE, 1, "defensive mode"},
        {SQLITE_DBCONFIG_ENABLE_VIEW, 0, "views off"},
        {SQLITE_DBCONFIG_ENABLE_TRIGGER, 0, "triggers off"},
        {SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, "untrusted schema"},
        {SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, "no extension loading"},
    };
    for (const Flag& f : kFlags) {
        int now = -1;
        if (sqlite3_db_config(db, f.op, f.value, &now) != SQLITE_OK || now != f.value)
            refuse(db, path, std::string("cannot set ") + f.name);
    }
    for (const Limit& l : kLimits) sqlite3_limit(db, l.id, l.value);
    if (sqlite3_limit(db, SQLITE_LIMIT_LENGTH, -1) != kMaxValueBytes) refuse(db, path, "cannot limit the length of a value");
    if (sqlite3_busy_handler(db, g->read_only ? read_busy_handler : write_busy_handler, g) != SQLITE_OK)
        refuse(db, path, "cannot set the busy handler");
    if (g->deadline_ms > 0) sqlite3_progress_handler(db, kProgressSteps, deadline_handler, g);
    const char* pragmas = g->read_only
                              ? "PRAGMA trusted_schema=OFF; PRAGMA mmap_size=0; PRAGMA cell_size_check=ON; PRAGMA query_only=ON"
                              : "PRAGMA trusted_schema=OFF; PRAGMA mmap_size=0; PRAGMA cell_size_check=ON";
    char* err = nullptr;
    const int rc = sqlite3_exec(db, pragmas, nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
        const std::string m = err ? err : sqlite3_errstr(rc);
        sqlite3_free(err);
        throw Error("profile database " + path + ": cannot harden the connection: " + m);
    }
}

std::vector<SchemaObject> read_schema(sqlite3* db, const std::string& path, bool signatures) {
    sqlite3_stmt* st = nullptr;
    const std::string sql =
        "SELECT type, name, tbl_name, sql FROM sqlite_master LIMIT " + std::to_string(kMaxSchemaObjects + 1);
    int rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
    if (rc != SQLITE_OK) {
        // the caller's error path reads the extended code (a lock, not a database ...)
        throw Error("profile database " + path + ": cannot read its schema: " + sqlite3_errmsg(db));
    }
    std::vector<SchemaObject> out;
    auto col = [&](int c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(st, c)))
                 : std::string();
    };
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (static_cast<int>(out.size()) == kMaxSchemaObjects) {
            sqlite3_finalize(st);
            throw Error("profile database " + path + " has more than " + std::to_string(kMaxSchemaObjects) +
                        " schema objects; Tula creates 10, so it is not a tula profile database and is not read");
        }
        out.push_back({col(0), col(1), col(2), col(3), ""});
    }
    if (rc != SQLITE_DONE) {
        const std::string m = sqlite3_errmsg(db);
        sqlite3_finalize(st);
        throw Error("profile database " + path + ": cannot read its schema: " + m);
    }
    sqlite3_finalize(st);
    if (signatures)
        for (auto& o : out) o.signature = signature_of(db, path, o);
    return out;
}

void check_schema_allowed(sqlite3* db, const std::string& path, int version, const std::vector<SchemaObject>& expected) {
    const std::string tail =
        ", which Tula never creates; it is not a tula profile database (or it was altered to attack its readers) and "
        "is not read";
    const std::string vname = "schema version " + std::to_string(version) + " (its PRAGMA user_version)";
    const std::vector<SchemaObject> have = read_schema(db, path, false);
    for (const SchemaObject& o : have) {
        if (o.type == "table" && (o.name == "sqlite_stat1" || o.name == "sqlite_stat4" || o.name == "sqlite_sequence") &&
            !is_virtual(o))
            continue;  // SQLite's own: ANALYZE, AUTOINCREMENT
        const std::string pre = "profile database " + path + " contains ";
        if (is_virtual(o)) throw Error(pre + "virtual table '" + o.name + "'" + tail);
        if (o.type == "view") throw Error(pre + "view '" + o.name + "'" + tail);
        if (o.type == "trigger") throw Error(pre + "trigger '" + o.name + "' on '" + o.tbl_name + "'" + tail);
        const SchemaObject* e = nullptr;
        for (const auto& x : expected)
            if (x.type == o.type && x.name == o.name && x.tbl_name == o.tbl_name) e = &x;
        if (!e) throw Error(pre + o.type + " '" + o.name + "'" + (o.type == "index" ? " on '" + o.tbl_name + "'" : "") + tail);
        if (signature_of(db, path, o) != e->signature)
            throw Error("profile database " + path + ": " + o.type + " '" + o.name + "' is not defined as in " + vname +
                        " (other columns or keys); the file was altered outside tula and is not read");
    }
    for (const SchemaObject& e : expected) {
        bool found = false;
        for (const auto& o : have) found = found || (o.type == e.type && o.name == e.name);
        if (!found)
            throw Error("profile database " + path + " lacks the " + e.type + " '" + e.name + "' of " + vname +
                        "; the file was altered outside tula and is not read");
    }
}

void choose_journal(sqlite3* db, const std::string& path) {
    if (path.empty() || path == ":memory:") return;
    std::string want;
    {
        std::lock_guard<std::mutex> lock(g_journal_mu);
        want = g_journal_override;
    }
    if (want.empty()) want = journal_mode_for(path);
    auto mode = [&](const std::string& sql, int* rc) {
        sqlite3_stmt* st = nullptr;
        std::string m;
        *rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
        if (*rc == SQLITE_OK) {
            *rc = sqlite3_step(st);
            if (*rc == SQLITE_ROW) {
                const unsigned char* t = sqlite3_column_text(st, 0);
                m = t ? reinterpret_cast<const char*>(t) : "";
                *rc = SQLITE_OK;
            } else if (*rc == SQLITE_DONE) {
                *rc = SQLITE_OK;
            }
        }
        sqlite3_finalize(st);
        for (char& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        return m;
    };
    int rc = SQLITE_OK;
    const std::string now = mode("PRAGMA journal_mode", &rc);
    if (rc != SQLITE_OK) refuse(db, path, "cannot read the journal mode");
    if (now == want || now == "memory") return;
    mode("PRAGMA journal_mode=" + want, &rc);
    // Another process's connection prevents the switch: keep the journal the file has.
    if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED)
        refuse(db, path, "cannot set journal_mode=" + want);
}

int exec_retrying(sqlite3* db, const char* sql, int timeout_ms) {
    const long long t0 = monotonic_ms();
    unsigned rng = static_cast<unsigned>(::getpid()) * 2654435761u ^ static_cast<unsigned>(t0);
    for (int attempt = 0;; ++attempt) {
        const int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
        if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return rc;
        const long long left = timeout_ms - (monotonic_ms() - t0);
        if (left <= 0) return rc;
        const int cap = attempt < 5 ? 4 << attempt : 100;
        sqlite3_sleep(static_cast<int>(std::min<long long>(1 + rand_r(&rng) % static_cast<unsigned>(cap), left)));
    }
}

}  // namespace detail

void set_read_lock_budget(int ms) {
    g_read_budget_ms.store(std::clamp(ms, 0, kMaxReadLockBudgetMs));
    g_read_waited_ms.store(0);
}

int read_lock_budget_ms() { return read_budget_ms(); }

long long read_lock_waited_ms() { return g_read_waited_ms.load(); }

void set_read_deadline(int ms) { g_read_deadline_ms.store(std::clamp(ms, 1, 600000)); }

int read_deadline_ms() { return g_read_deadline_ms.load(); }

void set_journal_mode_for_testing(const char* mode) {
    std::lock_guard<std::mutex> lock(g_journal_mu);
    g_journal_override = mode ? mode : "";
}

const char* network_fs_name(unsigned long f_type) {
    switch (f_type & 0xffffffffUL) {
        case 0x6969UL: return "NFS";
        case 0x0BD00BD0UL: return "Lustre";
        case 0x47504653UL: return "GPFS";
        case 0xFF534D42UL: return "CIFS";
        case 0xFE534D42UL: return "SMB2";
        case 0x517BUL: return "SMB";
        case 0x65735546UL: return "FUSE";
        case 0x00C36400UL: return "Ceph";
        case 0x5346414FUL: return "AFS";
        case 0x01021997UL: return "9P";
        case 0x19830326UL: return "BeeGFS";
        case 0xAAD7AAEAUL: return "PanFS";
        default: return nullptr;
    }
}

std::string journal_mode_for(const std::string& db_path) {
    const size_t slash = db_path.find_last_of('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : db_path.substr(0, slash);
    struct statfs fs;
    if (::statfs(dir.c_str(), &fs) != 0) return "wal";
    return network_fs_name(static_cast<unsigned long>(fs.f_type)) ? "delete" : "wal";
}

}  // namespace tula
