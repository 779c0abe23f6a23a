// libtula: the profile database's schema: version 1, the migrations to kSchemaVersion, the
// reference schema of a version, built in memory when first needed (what the allow-list compares a file
// with), and check_schema. See db.hpp.
#include "db/sqlite.hpp"

#include <map>
#include <mutex>

namespace tula {
namespace detail {
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

// Migration 5 -> 6: the floats of activations one training example produces in the forward
// pass (Workload::activation_floats, written by tula-train from its model's layer shapes; old
// rows: 0 = not known, memory is then not modelled).
constexpr const char* kMigrateV5toV6 = R"SQL(
ALTER TABLE workload ADD COLUMN activation_floats INTEGER NOT NULL DEFAULT 0;
PRAGMA user_version = 6;
)SQL";

// Migration 6 -> 7: the optimizer a run trained with (RunRecord::optimizer: "sgd", "ags",
// "lars", "lamb", "local-sgd"; old rows: '' = not recorded), so that the convergence fit
// (fit_critical_batch) keeps optimizer families apart.
constexpr const char* kMigrateV6toV7 = R"SQL(
ALTER TABLE run ADD COLUMN optimizer TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 7;
)SQL";

// Migration 7 -> 8: the hardware class (tula.conf's `hardware_class` of the partition) a compute
// point, an allreduce point and a run were measured on (old rows: '' = unknown class, planned as
// any class's), and the ranks per node of a compute point timed by several ranks at once and of
// a run, whose `nodes` is now the node count (old rows ran one rank per node: 1).
constexpr const char* kMigrateV7toV8 = R"SQL(
ALTER TABLE compute_profile ADD COLUMN hardware_class TEXT NOT NULL DEFAULT '';
ALTER TABLE compute_profile ADD COLUMN ranks_per_node INTEGER NOT NULL DEFAULT 1;
ALTER TABLE allreduce_profile ADD COLUMN hardware_class TEXT NOT NULL DEFAULT '';
ALTER TABLE run ADD COLUMN hardware_class TEXT NOT NULL DEFAULT '';
ALTER TABLE run ADD COLUMN ranks_per_node INTEGER NOT NULL DEFAULT 1;
PRAGMA user_version = 8;
)SQL";

// Migration 8 -> 9: the ranks per node of an allreduce point (AllreduceSample::ranks_per_node):
// a point of nodes = 1 and ranks_per_node R >= 2 measured R ranks on one host, the within-node
// profile; old rows had one rank per node: 1.
constexpr const char* kMigrateV8toV9 = R"SQL(
ALTER TABLE allreduce_profile ADD COLUMN ranks_per_node INTEGER NOT NULL DEFAULT 1;
PRAGMA user_version = 9;
)SQL";

// Migration 9 -> 10: the parts a run trained in (RunRecord::parts: a job stopped before its time
// limit and resumed from its checkpoint is one run of several parts) and the training seconds
// of each (RunRecord::part_seconds, a JSON list; NULL = not known or one part). Old rows: 1 part.
constexpr const char* kMigrateV9toV10 = R"SQL(
ALTER TABLE run ADD COLUMN parts INTEGER NOT NULL DEFAULT 1;
ALTER TABLE run ADD COLUMN part_seconds TEXT;
PRAGMA user_version = 10;
)SQL";

// Migration 10 -> 11: the Slurm job that measured a compute point (ComputeSample::job_id), so
// that a plan can name the job whose own measurement it rests on; old rows: '' = not known.
constexpr const char* kMigrateV10toV11 = R"SQL(
ALTER TABLE compute_profile ADD COLUMN job_id TEXT NOT NULL DEFAULT '';
PRAGMA user_version = 11;
)SQL";

// kMigrations[v - 1] takes schema version v to v + 1. A new database is created as version 1
// and migrated, so that a new database and a migrated one have the same schema.
constexpr const char* kMigrations[] = {kMigrateV1toV2, kMigrateV2toV3, kMigrateV3toV4, kMigrateV4toV5,
                                       kMigrateV5toV6, kMigrateV6toV7, kMigrateV7toV8, kMigrateV8toV9,
                                       kMigrateV9toV10, kMigrateV10toV11};
static_assert(sizeof kMigrations / sizeof kMigrations[0] == kSchemaVersion - 1, "one migration per schema step");

// The schema objects of schema version `version` (1..kSchemaVersion), read from a database built
// in memory by the same statements that create and migrate a file (kSchemaV1, then kMigrations up
// to `version`): what check_schema_allowed compares a file with. Built once per process and
// version, when first asked for, so that opening a current database builds one reference. Throws
// tula::Error.
const std::vector<detail::SchemaObject>& reference_schema(int version) {
    static std::mutex mu;
    static std::map<int, std::vector<detail::SchemaObject>> refs;
    if (version < 1 || version > kSchemaVersion)
        throw Error("no reference schema for schema version " + std::to_string(version));
    std::lock_guard<std::mutex> lock(mu);
    auto it = refs.find(version);
    if (it != refs.end()) return it->second;
    sqlite3* db = nullptr;
    const std::string name = "(reference schema)";
    if (sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
        sqlite3_close_v2(db);
        throw Error("cannot open an in-memory SQLite database for the reference schema");
    }
    std::vector<detail::SchemaObject> r;
    try {
        exec(db, name, kSchemaV1, "cannot create the reference schema");
        for (int v = 1; v < version; ++v) exec(db, name, kMigrations[v - 1], "cannot migrate the reference schema");
        r = detail::read_schema(db, name, true);
    } catch (...) {
        sqlite3_close_v2(db);
        throw;
    }
    sqlite3_close_v2(db);
    return refs.emplace(version, std::move(r)).first->second;
}

}  // namespace


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

}  // namespace detail
}  // namespace tula
