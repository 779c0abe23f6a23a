// Unit tests of the SQLite profile database (db.hpp): round trips, schema version, bad files.
#include <cppunit/extensions/HelperMacros.h>

#include "db_fixtures.hpp"
#include "record_builders.hpp"

using namespace db_test;

class LibtulaDbTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaDbTest);
    CPPUNIT_TEST(test_workload_round_trip);
    CPPUNIT_TEST(test_samples_round_trip);
    CPPUNIT_TEST(test_runs_round_trip);
    CPPUNIT_TEST(test_schema_version_and_wal);
    CPPUNIT_TEST(test_migrate_v1_database);
    CPPUNIT_TEST(test_migrate_v7_database);
    CPPUNIT_TEST(test_migrate_v8_database);
    CPPUNIT_TEST(test_migrate_v9_database);
    CPPUNIT_TEST(test_migration_failure_leaves_v1);
    CPPUNIT_TEST(test_parent_dir_created_0700);
    CPPUNIT_TEST(test_newer_schema_rejected);
    CPPUNIT_TEST(test_garbage_file_rejected);
    CPPUNIT_TEST(test_foreign_database_rejected);
    CPPUNIT_TEST(test_missing_file_readonly);
    CPPUNIT_TEST(test_readonly_cannot_write);
    CPPUNIT_TEST(test_invalid_samples_refused);
    CPPUNIT_TEST(test_move);
    CPPUNIT_TEST(test_readonly_wal_in_unwritable_dir);
    CPPUNIT_TEST(test_locked_database_bounded_wait);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_workload_round_trip() {
        TempDir d;
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite);
        CPPUNIT_ASSERT(!db.workload("lenet5@fashion-mnist"));
        const auto a = make_workload("lenet5", 61706), b = make_workload("fmnist-cnn", 870826);
        db.upsert_workload(a);
        db.upsert_workload(b);
        auto a2 = a;
        a2.params = 12345;
        a2.train_examples = 1000;
        db.upsert_workload(a2);  // replaces
        assert_same(a2, *db.workload(a.name));
        assert_same(b, *db.workload(b.name));
        const auto all = db.workloads();
        CPPUNIT_ASSERT_EQUAL(size_t(2), all.size());
    }

    void test_samples_round_trip() {
        TempDir d;
        std::vector<tula::ComputeSample> cs;
        std::vector<tula::AllreduceSample> as;
        {
            auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite);
            std::mt19937 rng(7);
            std::uniform_real_distribution<double> u(1e-4, 1.0);
            for (int i = 0; i < 20; ++i) {
                tula::ComputeSample c;
                c.workload = i % 3 == 0 ? "x@y" : "lenet5@fashion-mnist";
                c.host = "node" + std::to_string(i);
                c.local_batch = 1 + i * 7;
                c.threads = 1 + i % 4;
                c.seconds_per_iter = u(rng);
                c.iters = 20 + i;
                c.ranks = 1 + i % 3;
                if (c.ranks > 1) c.synced_seconds_per_iter = c.seconds_per_iter * (1.0 + 0.01 * i);
                db.add_compute(c);
                cs.push_back(c);
                tula::AllreduceSample a;
                a.host = "h" + std::to_string(i);
                a.nodes = 1 + i % 5;
                a.bytes = int64_t(1) << (i + 10);  // beyond 32 bits too
                a.seconds = u(rng);
                db.add_allreduce(a);
                as.push_back(a);
            }
        }
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadOnly);
        const auto got = db.compute_samples("lenet5@fashion-mnist");
        size_t k = 0;
        for (const auto& c : cs) {
            if (c.workload != "lenet5@fashion-mnist") continue;
            CPPUNIT_ASSERT(k < got.size());
            CPPUNIT_ASSERT_EQUAL(c.workload, got[k].workload);
            CPPUNIT_ASSERT_EQUAL(c.host, got[k].host);
            CPPUNIT_ASSERT_EQUAL(c.local_batch, got[k].local_batch);
            CPPUNIT_ASSERT_EQUAL(c.threads, got[k].threads);
            CPPUNIT_ASSERT_EQUAL(c.seconds_per_iter, got[k].seconds_per_iter);  // REAL is a double: exact
            CPPUNIT_ASSERT_EQUAL(c.iters, got[k].iters);
            CPPUNIT_ASSERT_EQUAL(c.ranks, got[k].ranks);
            // measured with several ranks: the same double back; alone: not measured (NULL -> NaN)
            if (c.ranks > 1)
                CPPUNIT_ASSERT_EQUAL(c.synced_seconds_per_iter, got[k].synced_seconds_per_iter);
            else
                CPPUNIT_ASSERT(std::isnan(got[k].synced_seconds_per_iter));
            ++k;
        }
        CPPUNIT_ASSERT_EQUAL(k, got.size());
        CPPUNIT_ASSERT_EQUAL(cs.size(), db.compute_samples("").size());  // "" = every workload
        CPPUNIT_ASSERT(db.compute_samples("nothing").empty());
        const auto ga = db.allreduce_samples();
        CPPUNIT_ASSERT_EQUAL(as.size(), ga.size());
        for (size_t i = 0; i < as.size(); ++i) {
            CPPUNIT_ASSERT_EQUAL(as[i].host, ga[i].host);
            CPPUNIT_ASSERT_EQUAL(as[i].nodes, ga[i].nodes);
            CPPUNIT_ASSERT_EQUAL(as[i].bytes, ga[i].bytes);
            CPPUNIT_ASSERT_EQUAL(as[i].seconds, ga[i].seconds);
        }
    }

    void test_runs_round_trip() {
        TempDir d;
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite);
        tula::RunRecord r1 = tula_test::run_record("41", "lenet5@fashion-mnist", 2, 256, 3, 97.25, 1000);
        r1.predicted_seconds = 100.5;
        r1.test_accuracy = 0.875;
        r1.epoch_seconds = {30, 33, 34.25};
        r1.epoch_train_loss = {0.9, 0.5, 0.4};
        r1.epoch_test_accuracy = {0.8, 0.85, 0.875};
        r1.noise_scale = 123.456789;
        r1.noise_observations = 77;
        tula::RunRecord r2 = r1;  // newer, other workload, no losses recorded, noise scale NaN
        r2.job_id = "42";
        r2.workload = "fmnist-cnn@fashion-mnist";
        r2.created = 2000;
        r2.epoch_train_loss.clear();
        r2.noise_scale = std::nan("");
        tula::RunRecord r3 = r1;  // newest run of job 41 (requeued), negative noise scale
        r3.created = 3000;
        r3.global_batch = 512;
        r3.noise_scale = -5;
        const int64_t id1 = db.add_run(r1), id2 = db.add_run(r2), id3 = db.add_run(r3);
        CPPUNIT_ASSERT(id1 != id2 && id2 != id3);

        const auto all = db.runs();
        CPPUNIT_ASSERT_EQUAL(size_t(3), all.size());
        CPPUNIT_ASSERT_EQUAL(id3, all[0].id);  // newest first
        CPPUNIT_ASSERT_EQUAL(id2, all[1].id);
        CPPUNIT_ASSERT_EQUAL(id1, all[2].id);
        const auto& g = all[2];
        using R = tula::RunRecord;
        tula_test::assert_fields_equal(r1, g, &R::job_id, &R::workload, &R::nodes, &R::global_batch, &R::epochs,
                                       &R::predicted_seconds, &R::measured_seconds, &R::test_accuracy, &R::created);
        CPPUNIT_ASSERT(r1.epoch_seconds == g.epoch_seconds);
        CPPUNIT_ASSERT(r1.epoch_train_loss == g.epoch_train_loss);
        CPPUNIT_ASSERT(r1.epoch_test_accuracy == g.epoch_test_accuracy);
        CPPUNIT_ASSERT(all[1].epoch_train_loss.empty());
        CPPUNIT_ASSERT(r2.epoch_test_accuracy == all[1].epoch_test_accuracy);
        // the noise scale: stored as given, NULL (read as 0) when not a finite number > 0
        CPPUNIT_ASSERT_EQUAL(r1.noise_scale, g.noise_scale);
        CPPUNIT_ASSERT_EQUAL(int64_t(77), g.noise_observations);
        CPPUNIT_ASSERT_EQUAL(0.0, all[1].noise_scale);
        CPPUNIT_ASSERT_EQUAL(0.0, all[0].noise_scale);
        const auto raw = raw_rows(d / "p.db", "SELECT noise_scale, noise_observations FROM run ORDER BY id");
        CPPUNIT_ASSERT_EQUAL(size_t(3), raw.size());
        CPPUNIT_ASSERT_EQUAL(std::string("123.456789|77|"), raw[0]);
        CPPUNIT_ASSERT_EQUAL(std::string("null|77|"), raw[1]);
        CPPUNIT_ASSERT_EQUAL(std::string("null|77|"), raw[2]);

        const auto only = db.runs("lenet5@fashion-mnist");
        CPPUNIT_ASSERT_EQUAL(size_t(2), only.size());
        CPPUNIT_ASSERT_EQUAL(id3, only[0].id);
        const auto j = db.run_by_job("41");
        CPPUNIT_ASSERT(j);
        CPPUNIT_ASSERT_EQUAL(id3, j->id);
        CPPUNIT_ASSERT_EQUAL(512, j->global_batch);
        CPPUNIT_ASSERT(r3.epoch_seconds == j->epoch_seconds);
        CPPUNIT_ASSERT(!db.run_by_job("nope"));

        tula::RunRecord bad = r1;
        bad.epoch_train_loss = {1.0};
        CPPUNIT_ASSERT(!error_of([&] { db.add_run(bad); }).empty());
        CPPUNIT_ASSERT_EQUAL(size_t(3), db.runs().size());  // nothing half-written
    }

    // A database as schema version 1 created it, with one workload, one compute sample and one
    // run with two epochs, written with sqlite3 directly from the version-1 DDL (copied here from
    // the schema of that version, not taken from libtula).
    static void make_v1_database(const std::string& p) {
        raw_exec(p, R"SQL(
CREATE TABLE workload(name TEXT PRIMARY KEY, model TEXT NOT NULL, dataset TEXT NOT NULL, params INTEGER NOT NULL,
    train_examples INTEGER NOT NULL, test_examples INTEGER NOT NULL, updated REAL NOT NULL);
CREATE TABLE compute_profile(id INTEGER PRIMARY KEY, workload TEXT NOT NULL, host TEXT NOT NULL,
    local_batch INTEGER NOT NULL, threads INTEGER NOT NULL, seconds_per_iter REAL NOT NULL, iters INTEGER NOT NULL,
    created REAL NOT NULL);
CREATE INDEX compute_profile_workload ON compute_profile(workload);
CREATE TABLE allreduce_profile(id INTEGER PRIMARY KEY, host TEXT NOT NULL, nodes INTEGER NOT NULL,
    bytes INTEGER NOT NULL, seconds REAL NOT NULL, created REAL NOT NULL);
CREATE TABLE run(id INTEGER PRIMARY KEY, job_id TEXT NOT NULL, workload TEXT NOT NULL, nodes INTEGER NOT NULL,
    global_batch INTEGER NOT NULL, epochs INTEGER NOT NULL, predicted_seconds REAL NOT NULL,
    measured_seconds REAL NOT NULL, test_accuracy REAL NOT NULL, created REAL NOT NULL);
CREATE INDEX run_job ON run(job_id);
CREATE INDEX run_workload ON run(workload);
CREATE TABLE run_epoch(run_id INTEGER NOT NULL REFERENCES run(id) ON DELETE CASCADE, epoch INTEGER NOT NULL,
    seconds REAL, train_loss REAL, test_accuracy REAL, PRIMARY KEY(run_id, epoch));
PRAGMA user_version = 1;
INSERT INTO workload VALUES('lenet5@fashion-mnist', 'lenet5', 'fashion-mnist', 61706, 60000, 10000, 1700000000);
INSERT INTO compute_profile VALUES(1, 'lenet5@fashion-mnist', 'n1', 64, 1, 0.0125, 20, 1700000001);
INSERT INTO run VALUES(1, '77', 'lenet5@fashion-mnist', 2, 256, 2, 50.5, 48.25, 0.8125, 1700000002);
INSERT INTO run_epoch VALUES(1, 1, 24.0, 0.75, 0.75);
INSERT INTO run_epoch VALUES(1, 2, 24.25, 0.5, 0.8125);
)SQL");
    }

    void test_migrate_v1_database() {
        TempDir d;
        const std::string p = d / "v1.db";
        make_v1_database(p);
        const auto before = raw_rows(p, "SELECT * FROM run");
        // Read-only: read as it is (no noise scale), not migrated.
        {
            auto ro = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly);
            CPPUNIT_ASSERT_EQUAL(1, ro.schema_version());
            const auto runs = ro.runs();
            CPPUNIT_ASSERT_EQUAL(size_t(1), runs.size());
            CPPUNIT_ASSERT_EQUAL(48.25, runs[0].measured_seconds);
            CPPUNIT_ASSERT_EQUAL(0.0, runs[0].noise_scale);
            CPPUNIT_ASSERT_EQUAL(int64_t(0), runs[0].noise_observations);
            CPPUNIT_ASSERT(contains(ro.export_json(), "\"noise_scale\": null"));
        }
        std::vector<std::string> w;
        const auto set = tula::load_profiles({p}, &w);
        CPPUNIT_ASSERT_MESSAGE(w.empty() ? "" : w[0], w.empty());
        CPPUNIT_ASSERT_EQUAL(size_t(1), set.compute.size());
        CPPUNIT_ASSERT_EQUAL(std::string("1"), raw_query(p, "PRAGMA user_version"));
        // Read-write: migrated to the current version, every old row kept, the new columns NULL / 0.
        {
            auto rw = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
            CPPUNIT_ASSERT_EQUAL(tula::kSchemaVersion, rw.schema_version());
        }
        CPPUNIT_ASSERT_EQUAL(std::to_string(tula::kSchemaVersion), raw_query(p, "PRAGMA user_version"));
        const auto after = raw_rows(p, "SELECT * FROM run");
        CPPUNIT_ASSERT_EQUAL(size_t(1), after.size());
        // noise scale, observations, train examples, optimizer, hardware class, ranks per node,
        // parts, part seconds
        CPPUNIT_ASSERT_EQUAL(before[0] + "null|0|0|||1|1|null|", after[0]);
        CPPUNIT_ASSERT_EQUAL(size_t(2), raw_rows(p, "SELECT * FROM run_epoch").size());
        CPPUNIT_ASSERT_EQUAL(std::string("0.0125"), raw_query(p, "SELECT seconds_per_iter FROM compute_profile"));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), raw_query(p, "SELECT ranks FROM compute_profile"));  // alone
        CPPUNIT_ASSERT(std::isnan(tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly)
                                      .compute_samples("lenet5@fashion-mnist")
                                      .at(0)
                                      .synced_seconds_per_iter));  // not measured
        // The migrated database takes and returns a noise scale like a new one.
        auto rw = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
        tula::RunRecord r = tula_test::run_record("78", "lenet5@fashion-mnist", 1, 64, 1, 10, 1700000003);
        r.noise_scale = 321.5;
        r.noise_observations = 9;
        r.train_examples = 6000;  // a --limit-train run (schema 3)
        r.optimizer = "lars";     // schema 7
        rw.add_run(r);
        const auto runs = rw.runs();
        CPPUNIT_ASSERT_EQUAL(size_t(2), runs.size());
        CPPUNIT_ASSERT_EQUAL(321.5, runs[0].noise_scale);
        CPPUNIT_ASSERT_EQUAL(int64_t(9), runs[0].noise_observations);
        CPPUNIT_ASSERT_EQUAL(int64_t(6000), runs[0].train_examples);
        CPPUNIT_ASSERT_EQUAL(int64_t(0), runs[1].train_examples);  // the old row: the workload's
        CPPUNIT_ASSERT_EQUAL(std::string("lars"), runs[0].optimizer);
        CPPUNIT_ASSERT_EQUAL(std::string(""), runs[1].optimizer);  // the old row: not recorded
        CPPUNIT_ASSERT_EQUAL(std::string("lars"), raw_query(p, "SELECT optimizer FROM run WHERE job_id = '78'"));
        CPPUNIT_ASSERT_EQUAL(6000.0, runs[0].examples_per_epoch(60000));
        CPPUNIT_ASSERT_EQUAL(60000.0, runs[1].examples_per_epoch(60000));
        CPPUNIT_ASSERT_EQUAL(std::string("6000"), raw_query(p, "SELECT train_examples FROM run WHERE job_id = '78'"));
        CPPUNIT_ASSERT_EQUAL(std::string("77"), runs[1].job_id);
        CPPUNIT_ASSERT_EQUAL(size_t(2), runs[1].epoch_seconds.size());
        // The columns of a migrated database equal those of a new one.
        { auto fresh = tula::ProfileDb::open(d / "new.db", tula::ProfileDb::Mode::ReadWrite); }
        CPPUNIT_ASSERT_EQUAL(raw_query(d / "new.db", "SELECT group_concat(name || ' ' || type || ' ' || \"notnull\" || ' ' || "
                                                     "coalesce(dflt_value, '')) FROM pragma_table_info('run')"),
                             raw_query(p, "SELECT group_concat(name || ' ' || type || ' ' || \"notnull\" || ' ' || "
                                          "coalesce(dflt_value, '')) FROM pragma_table_info('run')"));
    }

    // A version-7 database (version 1 plus the column additions of versions 2 to 7, written
    // here from their DDL, not taken from libtula) with one compute, allreduce and run row each.
    static void make_v7_database(const std::string& p) {
        make_v1_database(p);
        raw_exec(p, R"SQL(
ALTER TABLE run ADD COLUMN noise_scale REAL;
ALTER TABLE run ADD COLUMN noise_observations INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run ADD COLUMN train_examples INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_profile ADD COLUMN ranks INTEGER NOT NULL DEFAULT 1;
ALTER TABLE compute_profile ADD COLUMN startup_seconds REAL;
ALTER TABLE compute_profile ADD COLUMN synced_seconds_per_iter REAL;
ALTER TABLE workload ADD COLUMN activation_floats INTEGER NOT NULL DEFAULT 0;
ALTER TABLE run ADD COLUMN optimizer TEXT NOT NULL DEFAULT '';
INSERT INTO allreduce_profile VALUES(1, 'n1', 2, 4096, 0.001, 1700000004);
PRAGMA user_version = 7;
)SQL");
    }

    // Migration 7 -> 8: the old rows get the unknown class '' and one rank per node; a read-only
    // open of the version-7 file reads them so without migrating it; new rows keep both.
    void test_migrate_v7_database() {
        TempDir d;
        const std::string p = d / "v7.db";
        make_v7_database(p);
        {
            auto ro = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly);
            CPPUNIT_ASSERT_EQUAL(7, ro.schema_version());
            const auto runs = ro.runs();
            CPPUNIT_ASSERT_EQUAL(size_t(1), runs.size());
            CPPUNIT_ASSERT_EQUAL(1, runs[0].ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(std::string(""), runs[0].hardware_class);
            CPPUNIT_ASSERT_EQUAL(std::string(""), ro.compute_samples("lenet5@fashion-mnist").at(0).hardware_class);
            CPPUNIT_ASSERT_EQUAL(1, ro.compute_samples("lenet5@fashion-mnist").at(0).ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(std::string(""), ro.allreduce_samples().at(0).hardware_class);
        }
        CPPUNIT_ASSERT_EQUAL(std::string("7"), raw_query(p, "PRAGMA user_version"));
        { auto rw = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite); }
        CPPUNIT_ASSERT_EQUAL(std::to_string(tula::kSchemaVersion), raw_query(p, "PRAGMA user_version"));
        CPPUNIT_ASSERT_EQUAL(std::string("|1"), raw_query(p, "SELECT hardware_class || '|' || ranks_per_node FROM run"));
        CPPUNIT_ASSERT_EQUAL(std::string("2"), raw_query(p, "SELECT nodes FROM run"));  // kept as it was
        CPPUNIT_ASSERT_EQUAL(std::string("|1"), raw_query(p, "SELECT hardware_class || '|' || ranks_per_node FROM compute_profile"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), raw_query(p, "SELECT job_id FROM compute_profile"));  // 10 -> 11: not known
        CPPUNIT_ASSERT_EQUAL(std::string(""), raw_query(p, "SELECT hardware_class FROM allreduce_profile"));
        // new rows carry their class and ranks per node
        auto rw = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
        tula::RunRecord r = tula_test::run_record("78", "lenet5@fashion-mnist", 2, 256, 1, 10, 1700000005);
        r.ranks_per_node = 2;
        r.hardware_class = "a100";
        rw.add_run(r);
        tula::ComputeSample c;
        c.workload = "lenet5@fashion-mnist";
        c.local_batch = 32;
        c.seconds_per_iter = 0.01;
        c.hardware_class = "a100";
        c.ranks = 4;  // 2 nodes of 2 ranks
        c.ranks_per_node = 2;
        rw.add_compute(c);
        c.ranks_per_node = 3;  // 4 ranks cannot share nodes 3 by 3
        CPPUNIT_ASSERT(!error_of([&] { rw.add_compute(c); }).empty());
        tula::AllreduceSample a;
        a.nodes = 2;
        a.bytes = 1024;
        a.seconds = 0.002;
        a.hardware_class = "a100";
        rw.add_allreduce(a);
        const auto runs = rw.runs();
        CPPUNIT_ASSERT_EQUAL(2, runs[0].ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(4, runs[0].ranks());
        CPPUNIT_ASSERT_EQUAL(64.0, runs[0].local_batch());
        CPPUNIT_ASSERT_EQUAL(std::string("a100"), runs[0].hardware_class);
        CPPUNIT_ASSERT_EQUAL(std::string("a100|2"),
                             raw_query(p, "SELECT hardware_class || '|' || ranks_per_node FROM run WHERE job_id = '78'"));
        CPPUNIT_ASSERT_EQUAL(std::string("a100"), rw.compute_samples("lenet5@fashion-mnist").at(1).hardware_class);
        CPPUNIT_ASSERT_EQUAL(2, rw.compute_samples("lenet5@fashion-mnist").at(1).ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(size_t(2), rw.compute_samples("lenet5@fashion-mnist").size());
        CPPUNIT_ASSERT_EQUAL(std::string("a100"), rw.allreduce_samples().at(1).hardware_class);
    }

    // A version-8 database: version 7 plus the column additions of version 8 (from their DDL)
    // and a second allreduce row.
    static void make_v8_database(const std::string& p) {
        make_v7_database(p);
        raw_exec(p, R"SQL(
ALTER TABLE compute_profile ADD COLUMN hardware_class TEXT NOT NULL DEFAULT '';
ALTER TABLE compute_profile ADD COLUMN ranks_per_node INTEGER NOT NULL DEFAULT 1;
ALTER TABLE allreduce_profile ADD COLUMN hardware_class TEXT NOT NULL DEFAULT '';
ALTER TABLE run ADD COLUMN hardware_class TEXT NOT NULL DEFAULT '';
ALTER TABLE run ADD COLUMN ranks_per_node INTEGER NOT NULL DEFAULT 1;
INSERT INTO allreduce_profile VALUES(2, 'n1', 4, 8192, 0.003, 1700000006, 'a100');
PRAGMA user_version = 8;
)SQL");
    }

    // Migration 8 -> 9: the old allreduce rows get one rank per node (the across-node profile);
    // a read-only open of the version-8 file reads them so without migrating it; a within-node
    // row (1 node, 4 ranks) keeps its ranks per node.
    void test_migrate_v8_database() {
        TempDir d;
        const std::string p = d / "v8.db";
        make_v8_database(p);
        {
            auto ro = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly);
            CPPUNIT_ASSERT_EQUAL(8, ro.schema_version());
            const auto a = ro.allreduce_samples();
            CPPUNIT_ASSERT_EQUAL(size_t(2), a.size());
            CPPUNIT_ASSERT_EQUAL(1, a[0].ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(1, a[1].ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(4, a[1].nodes);
        }
        CPPUNIT_ASSERT_EQUAL(std::string("8"), raw_query(p, "PRAGMA user_version"));
        const auto before = raw_rows(p, "SELECT id, host, nodes, bytes, seconds, created, hardware_class FROM allreduce_profile");
        auto rw = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
        CPPUNIT_ASSERT_EQUAL(std::to_string(tula::kSchemaVersion), raw_query(p, "PRAGMA user_version"));
        CPPUNIT_ASSERT(before ==
                       raw_rows(p, "SELECT id, host, nodes, bytes, seconds, created, hardware_class FROM allreduce_profile"));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), raw_query(p, "SELECT group_concat(DISTINCT ranks_per_node) FROM allreduce_profile"));
        tula::AllreduceSample a;
        a.nodes = 1;
        a.ranks_per_node = 4;
        a.bytes = 1 << 20;
        a.seconds = 0.0005;
        a.hardware_class = "a100";
        rw.add_allreduce(a);
        const auto all = rw.allreduce_samples();
        CPPUNIT_ASSERT_EQUAL(size_t(3), all.size());
        CPPUNIT_ASSERT_EQUAL(1, all[2].nodes);
        CPPUNIT_ASSERT_EQUAL(4, all[2].ranks_per_node);
        a.ranks_per_node = 0;
        CPPUNIT_ASSERT(!error_of([&] { rw.add_allreduce(a); }).empty());
    }

    // Migration 9 -> 10: the old runs get one part of unknown seconds; a read-only open of the
    // version-9 file reads them so without migrating it; every old column keeps its value; a
    // run of several parts keeps its part count and seconds (a JSON list in part_seconds),
    // one of a single part stores NULL; invalid parts are refused.
    void test_migrate_v9_database() {
        TempDir d;
        const std::string p = d / "v9.db";
        make_v8_database(p);
        raw_exec(p, R"SQL(
ALTER TABLE allreduce_profile ADD COLUMN ranks_per_node INTEGER NOT NULL DEFAULT 1;
PRAGMA user_version = 9;
)SQL");
        {
            auto ro = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly);
            CPPUNIT_ASSERT_EQUAL(9, ro.schema_version());
            const auto runs = ro.runs();
            CPPUNIT_ASSERT_EQUAL(size_t(1), runs.size());
            CPPUNIT_ASSERT_EQUAL(1, runs[0].parts);
            CPPUNIT_ASSERT(runs[0].part_seconds.empty());
            CPPUNIT_ASSERT_EQUAL(size_t(2), runs[0].epoch_seconds.size());
        }
        CPPUNIT_ASSERT_EQUAL(std::string("9"), raw_query(p, "PRAGMA user_version"));
        const auto before = raw_rows(p, "SELECT * FROM run");
        const auto epochs_before = raw_rows(p, "SELECT * FROM run_epoch");
        auto rw = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
        CPPUNIT_ASSERT_EQUAL(std::to_string(tula::kSchemaVersion), raw_query(p, "PRAGMA user_version"));
        const auto after = raw_rows(p, "SELECT * FROM run");
        CPPUNIT_ASSERT_EQUAL(size_t(1), after.size());
        CPPUNIT_ASSERT_EQUAL(before[0] + "1|null|", after[0]);  // parts, part_seconds
        CPPUNIT_ASSERT(epochs_before == raw_rows(p, "SELECT * FROM run_epoch"));
        CPPUNIT_ASSERT_EQUAL(1, rw.runs().at(0).parts);
        tula::RunRecord r = tula_test::run_record("79", "lenet5@fashion-mnist", 2, 256, 2, 10.5, 1700000007);
        r.parts = 3;
        r.part_seconds = {4.25, 0.1, 6.15};
        rw.add_run(r);
        tula::RunRecord one = tula_test::run_record("80", "lenet5@fashion-mnist", 2, 256, 2, 10.5, 1700000008);
        one.part_seconds = {10.5};
        rw.add_run(one);
        const auto runs = rw.runs();
        CPPUNIT_ASSERT_EQUAL(size_t(3), runs.size());
        CPPUNIT_ASSERT_EQUAL(std::string("79"), runs[1].job_id);
        CPPUNIT_ASSERT_EQUAL(3, runs[1].parts);
        CPPUNIT_ASSERT(r.part_seconds == runs[1].part_seconds);  // bit for bit
        CPPUNIT_ASSERT_EQUAL(1, runs[0].parts);
        CPPUNIT_ASSERT(runs[0].part_seconds.empty());
        CPPUNIT_ASSERT_EQUAL(std::string("3|[4.25,0.10000000000000001,6.1500000000000004]"),
                             raw_query(p, "SELECT parts || '|' || part_seconds FROM run WHERE job_id = '79'"));
        CPPUNIT_ASSERT_EQUAL(std::string("1|null"),
                             raw_query(p, "SELECT parts || '|' || coalesce(part_seconds, 'null') FROM run WHERE job_id = '80'"));
        // a part_seconds text edited by hand into something else is read as not known
        raw_exec(p, "UPDATE run SET part_seconds = '[1,x]' WHERE job_id = '79'");
        CPPUNIT_ASSERT(rw.run_by_job("79")->part_seconds.empty());
        CPPUNIT_ASSERT_EQUAL(3, rw.run_by_job("79")->parts);
        // invalid parts: refused, nothing written
        tula::RunRecord bad = r;
        bad.parts = 0;
        bad.part_seconds.clear();
        CPPUNIT_ASSERT(tula_test::contains(error_of([&] { rw.add_run(bad); }), "parts must be >= 1"));
        bad = r;
        bad.part_seconds.pop_back();
        CPPUNIT_ASSERT(tula_test::contains(error_of([&] { rw.add_run(bad); }), "one value per part"));
        bad = r;
        bad.part_seconds[1] = -1;
        CPPUNIT_ASSERT(tula_test::contains(error_of([&] { rw.add_run(bad); }), "finite number >= 0"));
        bad.part_seconds[1] = std::nan("");
        CPPUNIT_ASSERT(tula_test::contains(error_of([&] { rw.add_run(bad); }), "finite number >= 0"));
        CPPUNIT_ASSERT_EQUAL(size_t(3), rw.runs().size());
    }

    void test_migration_failure_leaves_v1() {
        TempDir d;
        const std::string p = d / "v1.db";
        make_v1_database(p);
        // a column of the migration already there: the schema allow-list refuses the table (its
        // columns are not those of version 1) before any migration starts; nothing may change
        raw_exec(p, "ALTER TABLE run ADD COLUMN noise_observations INTEGER");
        const auto before = raw_rows(p, "SELECT * FROM run");
        const std::string e = error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "table 'run' is not defined as in schema version 1"));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), raw_query(p, "PRAGMA user_version"));
        CPPUNIT_ASSERT(before == raw_rows(p, "SELECT * FROM run"));
        CPPUNIT_ASSERT_EQUAL(std::string("0"), raw_query(p, "SELECT count(*) FROM pragma_table_info('run') "
                                                            "WHERE name = 'noise_scale'"));
    }

    void test_schema_version_and_wal() {
        TempDir d;
        { auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite); }
        CPPUNIT_ASSERT_EQUAL(std::to_string(tula::kSchemaVersion), raw_query(d / "p.db", "PRAGMA user_version"));
        CPPUNIT_ASSERT_EQUAL(std::string("wal"), raw_query(d / "p.db", "PRAGMA journal_mode"));
        for (const char* t : {"workload", "compute_profile", "allreduce_profile", "run", "run_epoch"})
            CPPUNIT_ASSERT_EQUAL(std::string("1"),
                                 raw_query(d / "p.db", std::string("SELECT count(*) FROM sqlite_master WHERE type='table' "
                                                                   "AND name='") +
                                                           t + "'"));
        // reopening an existing database keeps it
        { auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite); }
        { auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadOnly); }
    }

    void test_parent_dir_created_0700() {
        TempDir d;
        const std::string path = d / "a/b/tula/profiles.db";
        { auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite); }
        CPPUNIT_ASSERT(exists(path));
        struct stat st;
        CPPUNIT_ASSERT_EQUAL(0, stat((d / "a/b/tula").c_str(), &st));
        CPPUNIT_ASSERT_EQUAL(0700, int(st.st_mode & 0777));
        // a parent that is a file
        { std::ofstream f(d / "file"); }
        CPPUNIT_ASSERT(!error_of([&] { tula::ProfileDb::open(d / "file/p.db", tula::ProfileDb::Mode::ReadWrite); }).empty());
    }

    void test_newer_schema_rejected() {
        TempDir d;
        const std::string p = d / "p.db";
        { auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite); }
        raw_exec(p, "PRAGMA user_version = 99");
        for (auto mode : {tula::ProfileDb::Mode::ReadOnly, tula::ProfileDb::Mode::ReadWrite}) {
            const std::string e = error_of([&] { tula::ProfileDb::open(p, mode); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "database " + p + " has schema version 99, this tula understands " +
                                                      std::to_string(tula::kSchemaVersion) + ": upgrade tula"));
        }
        std::vector<std::string> w;
        const auto set = tula::load_profiles({p}, &w);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], "upgrade tula"));
    }

    void test_garbage_file_rejected() {
        TempDir d;
        const std::string p = d / "p.db";
        {
            std::ofstream f(p, std::ios::binary);
            std::mt19937 rng(3);
            for (int i = 0; i < 8192; ++i) f.put(static_cast<char>(rng() & 0xff));
        }
        for (auto mode : {tula::ProfileDb::Mode::ReadOnly, tula::ProfileDb::Mode::ReadWrite}) {
            const std::string e = error_of([&] { tula::ProfileDb::open(p, mode); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, p));
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "not a database") || contains(e, "not an SQLite database"));
            CPPUNIT_ASSERT_MESSAGE(e, e.rfind("tula: ", 0) == 0);
        }
        // a text file too
        {
            std::ofstream f(p);
            f << "system_db = /x\n";
        }
        CPPUNIT_ASSERT(!error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly); }).empty());
        // an empty file is a valid but empty SQLite database: not a tula one in read-only mode
        { std::ofstream f(p, std::ios::trunc); }
        const std::string e = error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "not a tula profile database"));
    }

    void test_foreign_database_rejected() {
        TempDir d;
        const std::string p = d / "other.db";
        raw_exec(p, "CREATE TABLE t(x)");
        for (auto mode : {tula::ProfileDb::Mode::ReadOnly, tula::ProfileDb::Mode::ReadWrite}) {
            const std::string e = error_of([&] { tula::ProfileDb::open(p, mode); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "not a tula profile database"));
        }
        CPPUNIT_ASSERT_EQUAL(std::string("0"), raw_query(p, "PRAGMA user_version"));  // untouched
    }

    void test_missing_file_readonly() {
        TempDir d;
        const std::string p = d / "none.db";
        const std::string e = error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, p) && contains(e, "does not exist"));
        CPPUNIT_ASSERT(!exists(p));
        CPPUNIT_ASSERT(!error_of([&] { tula::ProfileDb::open(d.path, tula::ProfileDb::Mode::ReadOnly); }).empty());
    }

    void test_readonly_cannot_write() {
        TempDir d;
        { auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite); }
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadOnly);
        const std::string e = error_of([&] { db.upsert_workload(make_workload("lenet5", 1)); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, d / "p.db"));
        CPPUNIT_ASSERT(db.workloads().empty());
    }

    void test_invalid_samples_refused() {
        TempDir d;
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite);
        tula::ComputeSample c;
        c.workload = "w@d";
        c.local_batch = 8;
        c.seconds_per_iter = NAN;
        CPPUNIT_ASSERT(!error_of([&] { db.add_compute(c); }).empty());
        c.seconds_per_iter = 0.1;
        c.local_batch = 0;
        CPPUNIT_ASSERT(!error_of([&] { db.add_compute(c); }).empty());
        tula::AllreduceSample a;
        a.nodes = 2;
        a.bytes = -1;
        CPPUNIT_ASSERT(!error_of([&] { db.add_allreduce(a); }).empty());
        CPPUNIT_ASSERT(db.compute_samples("").empty());
        CPPUNIT_ASSERT(db.allreduce_samples().empty());
    }

    void test_move() {
        TempDir d;
        auto a = tula::ProfileDb::open(d / "a.db", tula::ProfileDb::Mode::ReadWrite);
        auto b = tula::ProfileDb::open(d / "b.db", tula::ProfileDb::Mode::ReadWrite);
        a.upsert_workload(make_workload("m", 1));
        b = std::move(a);
        CPPUNIT_ASSERT_EQUAL(d / "a.db", b.path());
        CPPUNIT_ASSERT_EQUAL(size_t(1), b.workloads().size());
        tula::ProfileDb c(std::move(b));
        CPPUNIT_ASSERT_EQUAL(size_t(1), c.workloads().size());
    }

    // The system database case: a WAL database whose writer has closed (no -wal, no -shm),
    // in a directory the reader cannot write. As root, the check runs in a child that drops
    // to nobody (65534).
    void test_readonly_wal_in_unwritable_dir() {
        TempDir d;
        const std::string dir = d / "sys";
        const std::string p = dir + "/profiles.db";
        {
            auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
            db.upsert_workload(make_workload("lenet5", 7));
        }
        CPPUNIT_ASSERT(!exists(p + "-wal"));
        CPPUNIT_ASSERT_EQUAL(0, chmod(d.path.c_str(), 0755));
        CPPUNIT_ASSERT_EQUAL(0, chmod(dir.c_str(), 0555));
        CPPUNIT_ASSERT_EQUAL(0, chmod(p.c_str(), 0444));
        auto check = [&]() -> int {
            try {
                auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly);
                const auto w = db.workload("lenet5@fashion-mnist");
                return w && w->params == 7 ? 0 : 1;
            } catch (const std::exception& e) {
                std::fprintf(stderr, "%s\n", e.what());
                return 2;
            }
        };
        if (geteuid() != 0) {
            CPPUNIT_ASSERT_EQUAL(0, check());
        } else {
            const pid_t pid = fork();
            CPPUNIT_ASSERT(pid >= 0);
            if (pid == 0) {
                if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
                _exit(check());
            }
            int status = 0;
            CPPUNIT_ASSERT_EQUAL(pid, waitpid(pid, &status, 0));
            CPPUNIT_ASSERT(WIFEXITED(status));
            if (WEXITSTATUS(status) == 3) return;  // cannot drop privileges here (no CAP_SETUID): skip
            CPPUNIT_ASSERT_EQUAL(0, WEXITSTATUS(status));
        }
        CPPUNIT_ASSERT(!exists(p + "-shm"));
    }

    // A writer holds the database (exclusive locking mode, a pending insert): read-only opens
    // fail with the "held by another process" message instead of reading it as immutable, and
    // all of them together wait no more than the process-wide read lock budget (its counter,
    // not a clock: the first open uses the budget up, later ones wait nothing).
    void test_locked_database_bounded_wait() {
        TempDir d;
        const std::string p = d / "locked.db", other = d / "other.db";
        for (const auto& path : {p, other}) {
            auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
            db.upsert_workload(make_workload("lenet5", 7));
        }
        tula_test::RawLockHolder writer(p, "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; UPDATE workload SET params = 8;");
        const int budget = 150;
        tula::set_read_lock_budget(budget);
        CPPUNIT_ASSERT_EQUAL(budget, tula::read_lock_budget_ms());
        CPPUNIT_ASSERT_EQUAL(0LL, tula::read_lock_waited_ms());
        const std::string e1 = error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly, 5000); });
        const long long after_first = tula::read_lock_waited_ms();
        std::vector<std::string> w;
        const auto set = tula::load_profiles({p, other, p}, &w);
        const long long after_all = tula::read_lock_waited_ms();
        // a connection's own busy timeout still applies when it is shorter than the budget
        tula::set_read_lock_budget(100000);
        const std::string e2 = error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly, 30); });
        const long long own = tula::read_lock_waited_ms();
        writer.release();
        tula::set_read_lock_budget(tula::kDefaultReadLockBudgetMs);

        CPPUNIT_ASSERT_MESSAGE(e1, contains(e1, p) && contains(e1, "held by another process"));
        CPPUNIT_ASSERT_MESSAGE(e1, !contains(e1, "database is locked"));
        CPPUNIT_ASSERT(after_first >= budget);
        CPPUNIT_ASSERT_MESSAGE(e1, contains(e1, "waited " + std::to_string(after_first) + " ms"));
        CPPUNIT_ASSERT_EQUAL(after_first, after_all);  // budget used up: the later opens did not wait
        CPPUNIT_ASSERT_EQUAL(size_t(2), w.size());     // the locked one twice, the other read
        for (const auto& m : w) CPPUNIT_ASSERT_MESSAGE(m, contains(m, p) && contains(m, "held by another process"));
        CPPUNIT_ASSERT_EQUAL(int64_t(7), set.find("lenet5@fashion-mnist")->params);  // from other.db
        CPPUNIT_ASSERT_MESSAGE(e2, contains(e2, "held by another process"));
        CPPUNIT_ASSERT(own >= 30 && own < 5000);  // its 30 ms, not the 100 s budget
        // the committed change is there once the writer is done
        auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly);
        CPPUNIT_ASSERT_EQUAL(int64_t(8), db.workload("lenet5@fashion-mnist")->params);
    }
};


CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaDbTest);
