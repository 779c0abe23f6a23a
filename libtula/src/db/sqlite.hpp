// libtula private: the SQLite wrapper of the profile database (src/db/): checked prepared
// statements and transactions, error messages that name the database and say what to do, and
// small file helpers. Only code under src/db/ includes this (and sqlite3.h). Not installed.
#pragma once
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iterator>
#include <map>
#include <utility>
#include <optional>
#include <string>

#include "db/guard.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"

namespace tula {
namespace detail {

/// Wall-clock time, Unix seconds.
inline double now_seconds() {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return static_cast<double>(std::time(nullptr));
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// What to tell the user for a failed SQLite call, by primary result code.
inline std::string advice(int rc) {
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

[[noreturn]] inline void fail(sqlite3* db, int rc, const std::string& path, const std::string& what) {
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
    void bind(int i, const std::optional<double>& v) {
        if (v) bind(i, *v);
        else bind_null(i);
    }
    /// Binds the values to parameters 1, 2, ... in order (an empty optional as NULL).
    template <class... A>
    void bind_all(const A&... v) {
        int i = 0;
        (bind(++i, v), ...);
    }

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
    void get(int c, std::string& v) const { v = text(c); }
    void get(int c, int64_t& v) const { v = i64(c); }
    void get(int c, int& v) const { v = i32(c); }
    void get(int c, double& v) const { v = dbl(c); }
    /// Reads columns first, first + 1, ... of the current row into the arguments, in order
    /// (each by its type, as text(), i64(), i32() and dbl() read).
    template <class... A>
    void get_from(int first, A&... v) const {
        int c = first;
        (get(c++, v), ...);
    }
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

/// Runs `sql` (no rows); tula::Error naming `path` and `what` on failure.
inline void exec(sqlite3* db, const std::string& path, const char* sql, const char* what) {
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
[[noreturn]] inline void fail_txn(sqlite3* db, int rc, const std::string& path, const char* what, int timeout_ms) {
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

/// PRAGMA user_version of `db`. Throws tula::Error.
inline int read_user_version(sqlite3* db, const std::string& path) {
    Stmt s(db, path, "PRAGMA user_version");
    if (!s.step()) throw Error("profile database " + path + ": PRAGMA user_version returned no row");
    return s.i32(0);
}

/// Objects in sqlite_master. Throws tula::Error.
inline int64_t count_tables(sqlite3* db, const std::string& path) {
    Stmt s(db, path, "SELECT count(*) FROM sqlite_master");
    if (!s.step()) return 0;
    return s.i64(0);
}

// Creates every missing directory of `dir` with mode 0700. Throws tula::Error.
inline void make_dirs(const std::string& dir, const std::string& db_path) {
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
inline std::string file_uri(const std::string& path, const char* query) {
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

/// True if `p` exists with a size above 0.
inline bool nonempty_file(const std::string& p) {
    struct stat st;
    return ::stat(p.c_str(), &st) == 0 && st.st_size > 0;
}


/// Checks the schema of `db` (allow-list against the reference of its version) and, when
/// `create`, creates or migrates it; see schema.cpp. Returns the version the connection sees.
int check_schema(sqlite3* db, const std::string& path, bool create, int timeout_ms);

/// Row helpers shared by the store and the exchange format (store.cpp).
void read_epochs(sqlite3* db, const std::string& path, RunRecord* r);
std::string run_columns(int schema);
void insert_run_row(sqlite3* db, const std::string& path, const RunRecord& r);
RunRecord read_run(const Stmt& s);
Workload read_workload(const Stmt& s);
std::string workload_columns(int schema);

}  // namespace detail
}  // namespace tula
