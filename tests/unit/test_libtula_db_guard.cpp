// Unit tests of the profile database's defences (db.hpp, libtula/src/db/guard.cpp,
// db/trust.cpp, db/publish.cpp): hostile files refused quickly with the object named, bounded
// reads, the journal mode by file system, the trust check of the system database, concurrent
// writers that all land, and the atomic publication of the system database.
#include <cppunit/extensions/HelperMacros.h>
#include <dirent.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "tula/db.hpp"
#include "tula/error.hpp"
#include "record_builders.hpp"

namespace {

using tula_test::error_of;
using tula_test::contains;

using tula_test::TempDir;  // tests/unit/test_util.hpp
using tula_test::raw_exec;
using tula_test::raw_query;

bool exists(const std::string& p) {
    struct stat st;
    return lstat(p.c_str(), &st) == 0;
}

tula::Workload lenet5() {
    tula::Workload w;
    w.model = "lenet5";
    w.dataset = "fashion-mnist";
    w.name = "lenet5@fashion-mnist";
    w.params = 61706;
    w.train_examples = 60000;
    w.test_examples = 10000;
    return w;
}

// A small valid database: the lenet5 workload, two compute samples, two allreduce samples.
void make_valid(const std::string& path) {
    auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
    db.upsert_workload(lenet5());
    for (int b : {16, 64}) {
        tula::ComputeSample c;
        c.workload = "lenet5@fashion-mnist";
        c.host = "n1";
        c.local_batch = b;
        c.seconds_per_iter = 0.002 + 1e-4 * b;
        db.add_compute(c);
    }
    for (int64_t bytes : {int64_t(4096), int64_t(1) << 20}) {
        tula::AllreduceSample a;
        a.nodes = 2;
        a.bytes = bytes;
        a.seconds = 1e-4 + 1e-9 * static_cast<double>(bytes);
        db.add_allreduce(a);
    }
}

// load_profiles of `path` alone: its warnings and the CPU seconds it took
// (tula_test::thread_cpu_seconds: a read that spins uses them, a loaded machine does not).
std::vector<std::string> load_warnings(const std::string& path, double* seconds = nullptr) {
    std::vector<std::string> w;
    std::vector<tula::RunRecord> runs;
    const double t0 = tula_test::thread_cpu_seconds();
    tula::load_profiles({path}, &w, "lenet5@fashion-mnist", &runs);
    if (seconds) *seconds = tula_test::thread_cpu_seconds() - t0;
    return w;
}

std::string mode_str(const std::string& p) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return "none";
    char b[8];
    std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return b;
}

// Names of the entries of `dir` (without . and ..).
std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> out;
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
    closedir(d);
    return out;
}

}  // namespace

class LibtulaDbGuardTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaDbGuardTest);
    CPPUNIT_TEST(test_recursive_view_refused_quickly);
    CPPUNIT_TEST(test_trigger_refused);
    CPPUNIT_TEST(test_virtual_table_refused);
    CPPUNIT_TEST(test_unexpected_and_altered_objects_refused);
    CPPUNIT_TEST(test_huge_text_refused);
    CPPUNIT_TEST(test_row_cap_and_deadline);
    CPPUNIT_TEST(test_network_fs_names);
    CPPUNIT_TEST(test_trust_check);
    CPPUNIT_TEST(test_concurrent_writers_wal);
    CPPUNIT_TEST(test_concurrent_writers_rollback_journal);
    CPPUNIT_TEST(test_staged_publish);
    CPPUNIT_TEST_SUITE_END();

public:
    // The workload table replaced by a view with an endless WITH RECURSIVE: the open refuses
    // it from sqlite_master alone, naming the view, long before any read could spin.
    void test_recursive_view_refused_quickly() {
        TempDir d;
        const std::string p = d / "hostile.db";
        make_valid(p);
        raw_exec(p,
                 // the tables of schema version 5 (before 7, 8, 9, 10 and 11)
                 "ALTER TABLE compute_profile DROP COLUMN job_id; ALTER TABLE run DROP COLUMN parts; ALTER TABLE run DROP COLUMN part_seconds; "
                 "ALTER TABLE allreduce_profile DROP COLUMN ranks_per_node; ALTER TABLE run DROP COLUMN optimizer; ALTER TABLE run DROP COLUMN hardware_class; "
                 "ALTER TABLE run DROP COLUMN ranks_per_node; ALTER TABLE compute_profile DROP COLUMN hardware_class; "
                 "ALTER TABLE compute_profile DROP COLUMN ranks_per_node; "
                 "ALTER TABLE allreduce_profile DROP COLUMN hardware_class; "
                 "DROP TABLE workload; CREATE VIEW workload AS WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
                 "FROM c) SELECT 'lenet5@fashion-mnist' || x AS name, 'lenet5' AS model, 'fashion-mnist' AS dataset, 1 AS "
                 "params, 1 AS train_examples, 1 AS test_examples, 0 AS updated FROM c; PRAGMA user_version = 5;");
        double secs = 0;
        const auto w = load_warnings(p, &secs);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], "tula: profile database " + p + " contains view 'workload', which Tula never creates"));
        CPPUNIT_ASSERT_MESSAGE(std::to_string(secs), secs < 0.5);
        // read-write as well (tula-train at the end of a run): refused, nothing written
        const std::string e = error_of([&] { tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "view 'workload'"));
        CPPUNIT_ASSERT_EQUAL(std::string("5"), raw_query(p, "PRAGMA user_version"));
    }

    void test_trigger_refused() {
        TempDir d;
        const std::string p = d / "trigger.db";
        make_valid(p);
        raw_exec(p, "CREATE TRIGGER wipe AFTER INSERT ON run BEGIN DELETE FROM compute_profile; END;");
        for (auto mode : {tula::ProfileDb::Mode::ReadOnly, tula::ProfileDb::Mode::ReadWrite}) {
            const std::string e = error_of([&] { tula::ProfileDb::open(p, mode); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "contains trigger 'wipe' on 'run', which Tula never creates"));
        }
        CPPUNIT_ASSERT_EQUAL(std::string("2"), raw_query(p, "SELECT count(*) FROM compute_profile"));
    }

    // A virtual table of a module that does not exist, written into sqlite_master directly (as
    // a hostile file would have it), and an FTS5 table when SQLite has FTS5.
    void test_virtual_table_refused() {
        TempDir d;
        const std::string p = d / "vtab.db";
        make_valid(p);
        raw_exec(p,
                 "PRAGMA writable_schema = ON; INSERT INTO sqlite_master(type, name, tbl_name, rootpage, sql) VALUES("
                 "'table', 'evil', 'evil', 0, 'CREATE VIRTUAL TABLE evil USING nosuchmodule(x)'); PRAGMA writable_schema = OFF;");
        auto w = load_warnings(p);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], "contains virtual table 'evil', which Tula never creates"));
        const std::string q = d / "fts.db";
        make_valid(q);
        sqlite3* db = nullptr;
        sqlite3_open(q.c_str(), &db);
        const int rc = sqlite3_exec(db, "CREATE VIRTUAL TABLE notes USING fts5(x)", nullptr, nullptr, nullptr);
        sqlite3_close(db);
        if (rc == SQLITE_OK) {
            w = load_warnings(q);
            CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
            CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], "'notes") && contains(w[0], "which Tula never creates"));
        }
    }

    void test_unexpected_and_altered_objects_refused() {
        TempDir d;
        struct Case {
            const char* sql;
            std::string said;
        };
        const Case cases[] = {
            {"CREATE TABLE extra(x)", "contains table 'extra', which Tula never creates"},
            {"CREATE INDEX run_nodes ON run(nodes)", "contains index 'run_nodes' on 'run', which Tula never creates"},
            {"DROP INDEX run_job; CREATE INDEX run_job ON run(job_id, nodes)", "index 'run_job' is not defined as in schema version " + std::to_string(tula::kSchemaVersion)},
            {"DROP TABLE allreduce_profile; CREATE TABLE allreduce_profile(id INTEGER PRIMARY KEY, host TEXT NOT NULL, "
             "nodes INTEGER NOT NULL, bytes INTEGER NOT NULL, seconds REAL GENERATED ALWAYS AS (nodes * 1e300) VIRTUAL, "
             "created REAL NOT NULL, hardware_class TEXT NOT NULL DEFAULT '', ranks_per_node INTEGER NOT NULL DEFAULT 1)",
             "table 'allreduce_profile' is not defined as in schema version " + std::to_string(tula::kSchemaVersion)},
            {"DROP TABLE allreduce_profile; CREATE TABLE allreduce_profile(id INTEGER PRIMARY KEY, host TEXT NOT NULL, "
             "nodes INTEGER NOT NULL, bytes INTEGER NOT NULL, seconds REAL NOT NULL, created REAL NOT NULL, "
             "hardware_class TEXT NOT NULL DEFAULT '', ranks_per_node INTEGER NOT NULL DEFAULT 1) STRICT",
             "table 'allreduce_profile' is not defined as in schema version " + std::to_string(tula::kSchemaVersion)},
            {"DROP INDEX run_workload", "lacks the index 'run_workload' of schema version " + std::to_string(tula::kSchemaVersion)},
        };
        int i = 0;
        for (const Case& c : cases) {
            const std::string p = d / ("c" + std::to_string(i++) + ".db");
            make_valid(p);
            raw_exec(p, c.sql);
            const auto w = load_warnings(p);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(c.sql, size_t(1), w.size());
            CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], c.said));
        }
        // ANALYZE's sqlite_stat1 is SQLite's own: allowed
        const std::string p = d / "analyzed.db";
        make_valid(p);
        raw_exec(p, "ANALYZE");
        CPPUNIT_ASSERT_EQUAL(std::string("1"), raw_query(p, "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'"));
        const auto w = load_warnings(p);
        CPPUNIT_ASSERT_MESSAGE(w.empty() ? "" : w[0], w.empty());
    }

    // A 50 MB text value in the workload row fails the read at once (SQLITE_LIMIT_LENGTH: the
    // value is never loaded), and one of 500 KB (under that limit) fails on the text bound.
    void test_huge_text_refused() {
        TempDir d;
        const std::string p = d / "big.db";
        make_valid(p);
        raw_exec(p, "UPDATE workload SET model = replace(hex(zeroblob(25000000)), '0', 'x')");
        CPPUNIT_ASSERT_EQUAL(std::string("50000000"), raw_query(p, "SELECT length(model) FROM workload"));
        double secs = 0;
        auto w = load_warnings(p, &secs);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], p) && contains(w[0], "larger than 1048576 bytes"));
        CPPUNIT_ASSERT_MESSAGE(std::to_string(secs), secs < 1.0);
        const std::string q = d / "long.db";
        make_valid(q);
        raw_exec(q, "UPDATE compute_profile SET host = replace(hex(zeroblob(250000)), '0', 'h')");
        w = load_warnings(q);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], "a value of compute_profile.host is 500000 bytes long, more than the 4096"));
    }

    // kMaxRowsPerTable + 1 allreduce rows: the read stops with the table named; with a deadline
    // of 20 ms the same read is interrupted and says why.
    void test_row_cap_and_deadline() {
        TempDir d;
        const std::string p = d / "rows.db";
        make_valid(p);
        raw_exec(p, "WITH RECURSIVE c(x) AS (SELECT 3 UNION ALL SELECT x + 1 FROM c WHERE x < " +
                        std::to_string(tula::kMaxRowsPerTable + 1) +
                        ") INSERT INTO allreduce_profile(host, nodes, bytes, seconds, created) SELECT 'h', 2, 4, 1e-4, 0 FROM c");
        CPPUNIT_ASSERT_EQUAL(std::to_string(tula::kMaxRowsPerTable + 1), raw_query(p, "SELECT count(*) FROM allreduce_profile"));
        tula::set_read_deadline(60000);
        auto w = load_warnings(p);
        tula::set_read_deadline(20);
        double secs = 0;
        auto w2 = load_warnings(p, &secs);
        tula::set_read_deadline(tula::kDefaultReadDeadlineMs);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], "table 'allreduce_profile' has more than 1000000 rows"));
        CPPUNIT_ASSERT_EQUAL(size_t(1), w2.size());
        CPPUNIT_ASSERT_MESSAGE(w2[0], contains(w2[0], "took longer than the 20 ms a read may take"));
        CPPUNIT_ASSERT_MESSAGE(std::to_string(secs), secs < 0.5);
    }

    // statfs magic numbers of Linux's <linux/magic.h> and the file systems' sources, by hand.
    void test_network_fs_names() {
        struct Case {
            unsigned long magic;
            const char* name;
        };
        const Case cases[] = {{0x6969, "NFS"},          {0x0BD00BD0, "Lustre"}, {0x47504653, "GPFS"},
                              {0xFF534D42, "CIFS"},     {0xFE534D42, "SMB2"},   {0x65735546, "FUSE"},
                              {0x00C36400, "Ceph"},     {0xEF53, nullptr},      {0x58465342, nullptr},
                              {0x01021994, nullptr},    {0x794C7630, nullptr},  {0x9123683E, nullptr}};
        for (const Case& c : cases) {
            const char* got = tula::network_fs_name(c.magic);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(std::to_string(c.magic), std::string(c.name ? c.name : "local"),
                                         std::string(got ? got : "local"));
        }
        // statfs's f_type is a signed long: CIFS's magic arrives sign-extended
        const long cifs = static_cast<int32_t>(0xFF534D42u);
        CPPUNIT_ASSERT_EQUAL(std::string("CIFS"), std::string(tula::network_fs_name(static_cast<unsigned long>(cifs))));
    }

    void test_trust_check() {
        TempDir d;
        const std::string dir = d / "sys";
        const std::string p = dir + "/profiles.db";
        CPPUNIT_ASSERT_EQUAL(std::string(""), tula::system_db_distrust(p, 0));  // missing: fine
        CPPUNIT_ASSERT_EQUAL(0, mkdir(dir.c_str(), 0755));
        make_valid(p);
        CPPUNIT_ASSERT_EQUAL(0, chmod(dir.c_str(), 0755));
        CPPUNIT_ASSERT_EQUAL(0, chmod(p.c_str(), 0644));
        if (geteuid() != 0) return;  // the owner checks below need root (chown)
        CPPUNIT_ASSERT_EQUAL(std::string(""), tula::system_db_distrust(p, 0));
        CPPUNIT_ASSERT_EQUAL(0, chmod(p.c_str(), 0664));
        std::string why = tula::system_db_distrust(p, 0);
        CPPUNIT_ASSERT_EQUAL("tula: system database " + p + " is group-writable (mode 0664); skipped: only its "
                             "administrator may write it (chmod g-w,o-w " + p + ")",
                             why);
        CPPUNIT_ASSERT_EQUAL(0, chmod(p.c_str(), 0646));
        CPPUNIT_ASSERT(contains(tula::system_db_distrust(p, 0), "is world-writable (mode 0646)"));
        CPPUNIT_ASSERT_EQUAL(0, chmod(p.c_str(), 0644));
        // another owner: refused unless it is admin_uid
        CPPUNIT_ASSERT_EQUAL(0, chown(p.c_str(), 1, 1));
        CPPUNIT_ASSERT(contains(tula::system_db_distrust(p, 0), "is owned by uid 1, not by root or admin_uid 0"));
        CPPUNIT_ASSERT_EQUAL(std::string(""), tula::system_db_distrust(p, 1));
        CPPUNIT_ASSERT_EQUAL(0, chown(p.c_str(), 0, 0));
        // the directory: writable by others, sticky or not
        for (mode_t m : {mode_t(0777), mode_t(01777), mode_t(0775)}) {
            CPPUNIT_ASSERT_EQUAL(0, chmod(dir.c_str(), m));
            why = tula::system_db_distrust(p, 0);
            CPPUNIT_ASSERT_MESSAGE(why, contains(why, "the directory " + dir + " of system database " + p));
            CPPUNIT_ASSERT_MESSAGE(why, contains(why, m & S_IWOTH ? "world-writable" : "group-writable"));
        }
        CPPUNIT_ASSERT_EQUAL(0, chmod(dir.c_str(), 0755));
        // a -wal file of another owner; a -shm that is a symbolic link
        {
            FILE* f = std::fopen((p + "-wal").c_str(), "w");
            CPPUNIT_ASSERT(f);
            std::fclose(f);
        }
        CPPUNIT_ASSERT_EQUAL(0, chmod((p + "-wal").c_str(), 0644));
        CPPUNIT_ASSERT_EQUAL(0, chown((p + "-wal").c_str(), 1, 1));
        why = tula::system_db_distrust(p, 0);
        CPPUNIT_ASSERT_MESSAGE(why, contains(why, "the -wal file " + p + "-wal of system database " + p + " is owned by uid 1"));
        CPPUNIT_ASSERT_EQUAL(0, unlink((p + "-wal").c_str()));
        CPPUNIT_ASSERT_EQUAL(0, symlink("/tmp/elsewhere", (p + "-shm").c_str()));
        CPPUNIT_ASSERT(contains(tula::system_db_distrust(p, 0), "-shm file " + p + "-shm is a symbolic link"));
        CPPUNIT_ASSERT_EQUAL(0, unlink((p + "-shm").c_str()));
        CPPUNIT_ASSERT_EQUAL(std::string(""), tula::system_db_distrust(p, 0));
        // the database itself a symbolic link (to a trusted file)
        const std::string link = dir + "/link.db";
        CPPUNIT_ASSERT_EQUAL(0, symlink(p.c_str(), link.c_str()));
        CPPUNIT_ASSERT(contains(tula::system_db_distrust(link, 0), "is a symbolic link"));
    }

    void test_concurrent_writers_wal() { concurrent_writers("wal"); }
    void test_concurrent_writers_rollback_journal() { concurrent_writers("delete"); }

    // Writes through a StagedDb: the target is unchanged until publish(), which replaces it
    // with a single rollback-journal file of mode 0644 and leaves no temporary file; an
    // unpublished stage leaves nothing behind; missing directories are created 0755 whatever
    // the umask.
    void test_staged_publish() {
        TempDir d;
        const std::string target = d / "var/lib/tula/profiles.db";
        const mode_t old_umask = umask(077);
        {
            tula::StagedDb s = tula::StagedDb::begin(target);
            umask(old_umask);
            CPPUNIT_ASSERT_EQUAL(std::string("0755"), mode_str(d / "var"));
            CPPUNIT_ASSERT_EQUAL(std::string("0755"), mode_str(d / "var/lib/tula"));
            CPPUNIT_ASSERT(!exists(target));
            make_valid(s.path());  // the writer (tula-train) fills the staged file, in WAL mode here
            CPPUNIT_ASSERT(!exists(target));
            s.publish();
            CPPUNIT_ASSERT_EQUAL(std::string(""), s.path());
        }
        umask(old_umask);
        CPPUNIT_ASSERT_EQUAL(std::string("2"), raw_query(target, "SELECT count(*) FROM compute_profile"));
        CPPUNIT_ASSERT_EQUAL(std::string("0644"), mode_str(target));
        CPPUNIT_ASSERT_EQUAL(std::string("delete"), raw_query(target, "PRAGMA journal_mode"));
        CPPUNIT_ASSERT_EQUAL(size_t(1), entries(d / "var/lib/tula").size());  // no temporary file left
        // a second step: copy of the published file, one more sample, published again
        {
            tula::StagedDb s = tula::StagedDb::begin(target);
            CPPUNIT_ASSERT_EQUAL(std::string("2"), raw_query(s.path(), "SELECT count(*) FROM compute_profile"));
            {
                auto db = tula::ProfileDb::open(s.path(), tula::ProfileDb::Mode::ReadWrite);
                tula::ComputeSample c;
                c.workload = "lenet5@fashion-mnist";
                c.local_batch = 32;
                c.seconds_per_iter = 0.01;
                db.add_compute(c);
            }
            CPPUNIT_ASSERT_EQUAL(std::string("2"), raw_query(target, "SELECT count(*) FROM compute_profile"));
            s.publish();
        }
        CPPUNIT_ASSERT_EQUAL(std::string("3"), raw_query(target, "SELECT count(*) FROM compute_profile"));
        CPPUNIT_ASSERT_EQUAL(std::string("ok"), raw_query(target, "PRAGMA integrity_check"));
        // abandoned: the target unchanged, the temporary file gone
        {
            tula::StagedDb s = tula::StagedDb::begin(target);
            auto db = tula::ProfileDb::open(s.path(), tula::ProfileDb::Mode::ReadWrite);
            db.upsert_workload(lenet5());
        }
        CPPUNIT_ASSERT_EQUAL(size_t(1), entries(d / "var/lib/tula").size());
        CPPUNIT_ASSERT_EQUAL(std::string("3"), raw_query(target, "SELECT count(*) FROM compute_profile"));
        // a staged file that is not a tula profile database is not published
        {
            tula::StagedDb s = tula::StagedDb::begin(target);
            raw_exec(s.path(), "CREATE VIEW v AS SELECT 1");
            const std::string e = error_of([&] { s.publish(); });
            CPPUNIT_ASSERT_MESSAGE(e, contains(e, "contains view 'v'"));
        }
        CPPUNIT_ASSERT_EQUAL(std::string("3"), raw_query(target, "SELECT count(*) FROM compute_profile"));
        CPPUNIT_ASSERT_EQUAL(size_t(1), entries(d / "var/lib/tula").size());
    }

private:
    // kWriters processes open the same database read-write, wait at a barrier (a pipe whose
    // write end the parent closes), then each adds one run of 3 epochs, while another process
    // reads it in a loop and the parent holds the write lock for the first 2.5 s (longer than a
    // default SQLite busy timeout of a few seconds' worth of retries); every run must land: exactly kWriters runs and 3 * kWriters epoch
    // rows, and PRAGMA integrity_check says ok. `journal` is forced with the test hook (the
    // test directory is on a local disk, which would always get WAL).
    void concurrent_writers(const char* journal) {
        constexpr int kWriters = 64;
        TempDir d;
        const std::string p = d / "runs.db";
        tula::set_journal_mode_for_testing(journal);
        // the default comes back however the test ends (a failed assertion throws)
        struct ResetJournal {
            ~ResetJournal() { tula::set_journal_mode_for_testing(nullptr); }
        } reset_journal;
        make_valid(p);
        CPPUNIT_ASSERT_EQUAL(std::string(journal), raw_query(p, "PRAGMA journal_mode"));
        int barrier[2];
        CPPUNIT_ASSERT_EQUAL(0, pipe(barrier));
        std::vector<pid_t> pids;
        for (int i = 0; i <= kWriters; ++i) {
            const pid_t pid = fork();
            CPPUNIT_ASSERT(pid >= 0);
            if (pid == 0) {
                close(barrier[1]);
                int rc = 0;
                try {
                    if (i == kWriters) {  // the reader
                        char c;
                        (void)!read(barrier[0], &c, 1);
                        for (int k = 0; k < 200; ++k) {
                            std::vector<std::string> w;
                            std::vector<tula::RunRecord> runs;
                            tula::load_profiles({p}, &w, "lenet5@fashion-mnist", &runs);
                            if (runs.size() >= size_t(kWriters)) break;
                        }
                    } else {
                        auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
                        char c;
                        (void)!read(barrier[0], &c, 1);  // returns at EOF: all start together
                        tula::RunRecord r = tula_test::run_record(std::to_string(1000 + i), "lenet5@fashion-mnist", 1, 64, 3, 10 + i, 0);
                        r.epoch_seconds = {3, 3, 4};
                        db.add_run(r);
                    }
                } catch (const std::exception& e) {
                    std::fprintf(stderr, "writer %d: %s\n", i, e.what());
                    rc = 1;
                }
                _exit(rc);
            }
            pids.push_back(pid);
        }
        close(barrier[0]);
        usleep(200000);  // let every writer open the database
        // Another writer (a slow commit on a network file system, an administrator's sqlite3)
        // holds the write lock for 2.5 s from the start: the runs must wait for it, not fail.
        tula_test::RawLockHolder holder(p, "BEGIN IMMEDIATE; INSERT INTO allreduce_profile(host, nodes, bytes, seconds, "
                                           "created) VALUES('holder', 3, 8, 1e-4, 0)");
        close(barrier[1]);  // go
        usleep(2500000);
        CPPUNIT_ASSERT_EQUAL(SQLITE_OK, holder.release());
        int failed = 0;
        for (pid_t pid : pids) {
            int status = 0;
            waitpid(pid, &status, 0);
            failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        tula::set_journal_mode_for_testing(nullptr);
        CPPUNIT_ASSERT_EQUAL(0, failed);
        CPPUNIT_ASSERT_EQUAL(std::to_string(kWriters), raw_query(p, "SELECT count(*) FROM run"));
        CPPUNIT_ASSERT_EQUAL(std::to_string(kWriters), raw_query(p, "SELECT count(DISTINCT job_id) FROM run"));
        CPPUNIT_ASSERT_EQUAL(std::to_string(3 * kWriters), raw_query(p, "SELECT count(*) FROM run_epoch"));
        CPPUNIT_ASSERT_EQUAL(std::string("1"), raw_query(p, "SELECT count(*) FROM allreduce_profile WHERE host = 'holder'"));
        CPPUNIT_ASSERT_EQUAL(std::string("ok"), raw_query(p, "PRAGMA integrity_check"));
        CPPUNIT_ASSERT_EQUAL(std::string(journal), raw_query(p, "PRAGMA journal_mode"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaDbGuardTest);
