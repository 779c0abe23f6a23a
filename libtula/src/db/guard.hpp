// libtula private: hardening of every SQLite connection of ProfileDb against a hostile or
// damaged profile database (a user can hand `tula plan` any file), the schema allow-list, the
// lock-wait handlers of readers and writers, and the journal mode by file system. Not installed.
// See db.hpp (ProfileDb::open) and tula(1), PROFILE DATABASE.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

struct sqlite3;

namespace tula {
namespace detail {

/// State SQLite's busy and progress handlers of one connection read (owned by ProfileDb, so
/// that its address is stable while the connection lives).
struct ConnGuard {
    bool read_only = true;
    int timeout_ms = 0;          ///< busy timeout of one lock attempt, milliseconds
    long long deadline_ms = 0;   ///< monotonic milliseconds after which statements are interrupted; 0 = none
    long long wait_start_ms = 0; ///< when the current lock attempt of a writer began (monotonic ms)
    unsigned rng = 1;            ///< state of the writer's backoff jitter (rand_r)
};

/// Monotonic clock, milliseconds.
long long monotonic_ms();

/// Hardens a freshly opened connection before its first statement: SQLITE_DBCONFIG_DEFENSIVE,
/// views, triggers and untrusted schema functions off (SQLITE_DBCONFIG_ENABLE_VIEW/TRIGGER,
/// SQLITE_DBCONFIG_TRUSTED_SCHEMA, PRAGMA trusted_schema=OFF), PRAGMA mmap_size=0,
/// cell_size_check=ON, query_only=ON when read-only, the sqlite3_limit values of kLimits
/// (db/guard.cpp; SQLITE_LIMIT_LENGTH = kMaxValueBytes, no ATTACH), and installs the busy handler
/// (readers: the process-wide read lock budget; writers: jittered backoff up to
/// g->timeout_ms) and, when g->deadline_ms > 0, the progress-handler deadline.
/// Errors: tula::Error naming `path` when SQLite refuses a setting.
void harden(sqlite3* db, const std::string& path, ConnGuard* g);

/// One object of a database's sqlite_master (type, name, table, CREATE statement), with a signature of its definition: for a table
/// its columns (PRAGMA table_xinfo: name, declared type, NOT NULL, default, primary-key
/// position, hidden), for an index its key columns (PRAGMA index_xinfo) and its uniqueness,
/// origin and partial flag (PRAGMA index_list).
struct SchemaObject {
    std::string type, name, tbl_name, sql, signature;
};

/// The objects of `db` (at most kMaxSchemaObjects, db/guard.cpp), each with its signature when
/// `signatures` (only objects of allowed types and names are described, and never a view's or a
/// virtual table's, so that describing cannot run them). Errors: tula::Error (more objects, a
/// read failure).
std::vector<SchemaObject> read_schema(sqlite3* db, const std::string& path, bool signatures);

/// Checks the schema of `db` against `expected` (the objects a database of that schema version
/// has, read from one Tula built in memory): every object must be expected, with the same type,
/// table and signature, and every expected one must be there; SQLite's sqlite_stat1,
/// sqlite_stat4 and sqlite_sequence tables are allowed besides. `version` is for messages.
/// Errors: tula::Error naming `path` and the first offending object, e.g. "profile database P
/// contains view 'workload', which Tula never creates; it is not read".
void check_schema_allowed(sqlite3* db, const std::string& path, int version, const std::vector<SchemaObject>& expected);

/// Sets the journal mode of a read-write connection to journal_mode_for(path) (or the test
/// override) when it differs: WAL on a local disk, DELETE on a network file system (a WAL
/// database there is switched back). A switch that another process's open connection prevents
/// (SQLITE_BUSY/LOCKED) leaves the journal as it is; in-memory databases are left alone.
/// Errors: tula::Error for other failures.
void choose_journal(sqlite3* db, const std::string& path);

/// Runs `sql` (BEGIN IMMEDIATE or COMMIT), retrying with jittered backoff while it fails with
/// SQLITE_BUSY or SQLITE_LOCKED, for at most `timeout_ms` in all. Returns the SQLite result code.
int exec_retrying(sqlite3* db, const char* sql, int timeout_ms);

}  // namespace detail
}  // namespace tula
