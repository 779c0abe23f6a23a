// Unit tests of the profile database exchange format and the database set (db.hpp): JSON export and import round trips, a version-1 document, bad documents refused with the row named, prune, and load_profiles merging databases and skipping bad ones.
#include <cppunit/extensions/HelperMacros.h>

#include <nlohmann/json.hpp>

#include "db_fixtures.hpp"
#include "record_builders.hpp"

using namespace db_test;

class LibtulaDbExchangeTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaDbExchangeTest);
    CPPUNIT_TEST(test_import_v1_document);
    CPPUNIT_TEST(test_import_minimal_runs);
    CPPUNIT_TEST(test_load_profiles_merge_and_skip);
    CPPUNIT_TEST(test_export_import_round_trip);
    CPPUNIT_TEST(test_export_one_workload);
    CPPUNIT_TEST(test_import_rejects_bad_files);
    CPPUNIT_TEST(test_prune);
    CPPUNIT_TEST(test_prune_above_nodes);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_import_v1_document() {
        TempDir d;
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite);
        // what `tula db export` of a version-1 tula wrote (no noise-scale fields)
        const std::string v1 = R"({"format": "tula-profiles", "schema_version": 1, "exported": 1700000100,
            "workloads": [], "compute": [], "allreduce": [],
            "runs": [{"job_id": "5", "workload": "lenet5@fashion-mnist", "nodes": 1, "global_batch": 64,
                      "epochs": 1, "predicted_seconds": 0, "measured_seconds": 12.5, "test_accuracy": 0.75,
                      "created": 1700000000, "epoch_rows": [{"epoch": 1, "seconds": 12.5, "train_loss": null,
                      "test_accuracy": 0.75}]}]})";
        CPPUNIT_ASSERT_EQUAL(size_t(1), db.import_json(v1, "v1.json").runs);
        // a version-2 run with a null noise scale and one with a value
        std::string v2 = v1;
        auto edit = [&v2](const std::string& from, const std::string& to) {
            const size_t at = v2.find(from);
            CPPUNIT_ASSERT_MESSAGE(from, at != std::string::npos);
            v2.replace(at, from.size(), to);
        };
        edit("\"schema_version\": 1", "\"schema_version\": 2");
        edit("\"created\": 1700000000", "\"created\": 1700000001, \"noise_scale\": 250.5, \"noise_observations\": 12");
        CPPUNIT_ASSERT_EQUAL(size_t(1), db.import_json(v2, "v2.json").runs);
        const auto rows = raw_rows(d / "p.db", "SELECT created, noise_scale, noise_observations FROM run ORDER BY id");
        CPPUNIT_ASSERT_EQUAL(size_t(2), rows.size());
        CPPUNIT_ASSERT_EQUAL(std::string("1700000000|null|0|"), rows[0]);
        CPPUNIT_ASSERT_EQUAL(std::string("1700000001|250.5|12|"), rows[1]);
    }

    // Runs with only the fields a time-to-train table has (workload, nodes, ranks per node,
    // global batch, epochs, measured seconds) import with the defaults, once; a run without its
    // measured seconds is refused, naming the field; an export of them imports again.
    void test_import_minimal_runs() {
        TempDir d;
        auto db = tula::ProfileDb::open(d / "p.db", tula::ProfileDb::Mode::ReadWrite);
        const std::string doc = R"({"format": "tula-profiles", "schema_version": 9, "runs": [
            {"workload": "resnet50@imagenet", "nodes": 8, "ranks_per_node": 8, "global_batch": 3264, "epochs": 35,
             "measured_seconds": 275.0},
            {"workload": "resnet50@imagenet", "nodes": 1, "ranks_per_node": 4, "global_batch": 1632, "epochs": 35,
             "measured_seconds": 3325.0}]})";
        CPPUNIT_ASSERT_EQUAL(size_t(2), db.import_json(doc, "min.json").runs);
        CPPUNIT_ASSERT_EQUAL(size_t(0), db.import_json(doc, "min.json").runs);  // already present
        const auto rows = raw_rows(d / "p.db", "SELECT job_id, nodes, ranks_per_node, global_batch, epochs, "
                                               "predicted_seconds, measured_seconds, test_accuracy, created FROM run ORDER BY id");
        CPPUNIT_ASSERT_EQUAL(size_t(2), rows.size());
        CPPUNIT_ASSERT_EQUAL(std::string("|8|8|3264|35|0|275|0|0|"), rows[0]);
        CPPUNIT_ASSERT_EQUAL(std::string("|1|4|1632|35|0|3325|0|0|"), rows[1]);
        const auto runs = db.runs("resnet50@imagenet");
        CPPUNIT_ASSERT_EQUAL(size_t(2), runs.size());
        for (const auto& r : runs) CPPUNIT_ASSERT(r.epoch_seconds.empty());
        std::string bad = doc;
        bad.replace(bad.find("\"measured_seconds\": 275.0"), 24, "\"seconds\": 275.0");
        CPPUNIT_ASSERT(contains(error_of([&] { db.import_json(bad, "bad.json"); }), "runs row 1: has no field \"measured_seconds\""));
        const std::string exported = db.export_json();
        auto db2 = tula::ProfileDb::open(d / "q.db", tula::ProfileDb::Mode::ReadWrite);
        CPPUNIT_ASSERT_EQUAL(size_t(2), db2.import_json(exported, "exported.json").runs);
    }

    void test_load_profiles_merge_and_skip() {
        TempDir d;
        const std::string sys = d / "sys.db", user = d / "user.db", bad = d / "bad.db", missing = d / "missing.db";
        {
            auto db = tula::ProfileDb::open(sys, tula::ProfileDb::Mode::ReadWrite);
            db.upsert_workload(make_workload("lenet5", 100));
            db.upsert_workload(make_workload("fmnist-cnn", 200));
            tula::ComputeSample c;
            c.workload = "lenet5@fashion-mnist";
            c.local_batch = 16;
            c.seconds_per_iter = 0.01;
            db.add_compute(c);
            tula::AllreduceSample a;
            a.nodes = 2;
            a.bytes = 1000;
            a.seconds = 1e-4;
            db.add_allreduce(a);
            tula::RunRecord r = tula_test::run_record("7", "lenet5@fashion-mnist", 2, 128, 1, 12.5, 100);
            db.add_run(r);
            r.workload = "vgg11@fashion-mnist";
            r.job_id = "8";
            db.add_run(r);
        }
        {
            auto db = tula::ProfileDb::open(user, tula::ProfileDb::Mode::ReadWrite);
            tula::RunRecord r = tula_test::run_record("9", "lenet5@fashion-mnist", 4, 256, 2, 20.25, 200);
            db.add_run(r);
            db.upsert_workload(make_workload("lenet5", 111));  // overrides the system's row
            tula::ComputeSample c;
            c.workload = "lenet5@fashion-mnist";
            c.local_batch = 32;
            c.seconds_per_iter = 0.02;
            db.add_compute(c);
            c.workload = "vgg11@fashion-mnist";  // samples without a workload row still load
            db.add_compute(c);
        }
        {
            std::ofstream f(bad);
            f << "garbage that is definitely not an sqlite database, long enough to have a header........\n";
        }
        std::vector<std::string> w;
        const auto set = tula::load_profiles({sys, bad, missing, user}, &w);
        CPPUNIT_ASSERT_EQUAL(size_t(1), w.size());  // missing: silent; bad: one line
        CPPUNIT_ASSERT_MESSAGE(w[0], contains(w[0], bad));
        CPPUNIT_ASSERT_MESSAGE(w[0], w[0].find('\n') == std::string::npos);
        CPPUNIT_ASSERT_EQUAL(size_t(2), set.workloads.size());
        CPPUNIT_ASSERT_EQUAL(int64_t(111), set.find("lenet5@fashion-mnist")->params);
        CPPUNIT_ASSERT_EQUAL(int64_t(200), set.find("fmnist-cnn@fashion-mnist")->params);
        CPPUNIT_ASSERT(!set.find("vgg11@fashion-mnist"));
        CPPUNIT_ASSERT_EQUAL(size_t(3), set.compute.size());
        const auto l = set.compute_for("lenet5@fashion-mnist");
        CPPUNIT_ASSERT_EQUAL(size_t(2), l.size());
        CPPUNIT_ASSERT_EQUAL(16, l[0].local_batch);  // system first
        CPPUNIT_ASSERT_EQUAL(32, l[1].local_batch);
        CPPUNIT_ASSERT_EQUAL(size_t(1), set.allreduce.size());
        // null warnings pointer: no crash, same data
        CPPUNIT_ASSERT_EQUAL(size_t(2), tula::load_profiles({sys, bad, user}, nullptr).workloads.size());
        // one workload's samples: the same as filtering everything, in the same order
        for (const std::string name : {"lenet5@fashion-mnist", "vgg11@fashion-mnist", "none@x"}) {
            std::vector<std::string> w1;
            const auto one = tula::load_profiles({sys, bad, missing, user}, &w1, name);
            CPPUNIT_ASSERT_EQUAL(w.size(), w1.size());
            CPPUNIT_ASSERT_EQUAL(set.workloads.size(), one.workloads.size());
            CPPUNIT_ASSERT_EQUAL(set.allreduce.size(), one.allreduce.size());
            const auto all = set.compute_for(name);
            CPPUNIT_ASSERT_EQUAL(all.size(), one.compute.size());
            for (size_t i = 0; i < all.size(); ++i) {
                CPPUNIT_ASSERT_EQUAL(name, one.compute[i].workload);
                CPPUNIT_ASSERT_EQUAL(all[i].local_batch, one.compute[i].local_batch);
                CPPUNIT_ASSERT_EQUAL(all[i].seconds_per_iter, one.compute[i].seconds_per_iter);
            }
            // With the run history: the same profiles and warnings, and the runs of each
            // readable database read on its own, in the order of the paths.
            std::vector<std::string> w2;
            std::vector<tula::RunRecord> runs;
            const auto with_runs = tula::load_profiles({sys, bad, missing, user}, &w2, name, &runs);
            CPPUNIT_ASSERT_EQUAL(w1.size(), w2.size());
            CPPUNIT_ASSERT_EQUAL(one.compute.size(), with_runs.compute.size());
            CPPUNIT_ASSERT_EQUAL(one.workloads.size(), with_runs.workloads.size());
            std::vector<tula::RunRecord> ref;
            for (const std::string& p : {sys, user})
                for (auto& r : tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadOnly).runs(name)) ref.push_back(r);
            CPPUNIT_ASSERT_EQUAL(ref.size(), runs.size());
            for (size_t i = 0; i < ref.size(); ++i) {
                CPPUNIT_ASSERT_EQUAL(name, runs[i].workload);
                CPPUNIT_ASSERT_EQUAL(ref[i].job_id, runs[i].job_id);
                CPPUNIT_ASSERT_EQUAL(ref[i].nodes, runs[i].nodes);
                CPPUNIT_ASSERT_EQUAL(ref[i].measured_seconds, runs[i].measured_seconds);
            }
        }
        {
            // lenet5: one run in each database (system first); the run count is what was added
            std::vector<tula::RunRecord> runs;
            tula::load_profiles({sys, bad, missing, user}, nullptr, "lenet5@fashion-mnist", &runs);
            CPPUNIT_ASSERT_EQUAL(size_t(2), runs.size());
            CPPUNIT_ASSERT_EQUAL(std::string("7"), runs[0].job_id);
            CPPUNIT_ASSERT_EQUAL(std::string("9"), runs[1].job_id);
        }
    }

    void test_export_import_round_trip() {
        TempDir d;
        const std::string a = d / "a.db", b = d / "b.db";
        std::string text;
        {
            auto db = tula::ProfileDb::open(a, tula::ProfileDb::Mode::ReadWrite);
            fill_random(db, 7);
            tula::AllreduceSample w;  // schema 9: a within-node sample, 4 ranks on 1 node
            w.host = "node0";
            w.nodes = 1;
            w.ranks_per_node = 4;
            w.bytes = 1 << 20;
            w.seconds = 1e-4;
            db.add_allreduce(w);
            // schema 10: a run of 3 parts (stopped twice and resumed)
            tula::RunRecord r = tula_test::run_record("11", "lenet5@fashion-mnist", 2, 128, 2, 30.75, 300);
            r.parts = 3;
            r.part_seconds = {10.5, 0.125, 20.125};
            db.add_run(r);
            text = db.export_json();
        }
        auto db = tula::ProfileDb::open(b, tula::ProfileDb::Mode::ReadWrite);
        const auto n = db.import_json(text, "x.json");
        CPPUNIT_ASSERT_EQUAL(size_t(2), n.workloads);
        CPPUNIT_ASSERT_EQUAL(size_t(8), n.compute);
        CPPUNIT_ASSERT_EQUAL(size_t(3), n.allreduce);
        CPPUNIT_ASSERT_EQUAL(size_t(3), n.runs);
        CPPUNIT_ASSERT_EQUAL(size_t(0), n.skipped);
        const auto ra = all_rows(a), rb = all_rows(b);
        CPPUNIT_ASSERT_EQUAL(ra.size(), rb.size());
        for (size_t i = 0; i < ra.size(); ++i) CPPUNIT_ASSERT_EQUAL(ra[i], rb[i]);
        CPPUNIT_ASSERT(contains(ra.back(), "null"));  // the run without per-epoch loss kept its NULLs
        CPPUNIT_ASSERT(contains(text, "\"optimizer\": \"lamb\""));  // schema 7's optimizer travels
        CPPUNIT_ASSERT_EQUAL(std::string("lamb"), db.runs("lenet5@fashion-mnist").at(0).optimizer);
        // schema 8's hardware class and ranks per node travel (all_rows compares them too)
        CPPUNIT_ASSERT_EQUAL(std::string("h100"), db.runs("lenet5@fashion-mnist").at(0).hardware_class);
        CPPUNIT_ASSERT_EQUAL(4, db.runs("lenet5@fashion-mnist").at(0).ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(std::string("h100"), db.allreduce_samples().at(0).hardware_class);
        CPPUNIT_ASSERT(contains(text, "\"hardware_class\": \"a100\""));
        CPPUNIT_ASSERT_EQUAL(4, db.allreduce_samples().at(2).ranks_per_node);  // schema 9's ranks per node travel
        CPPUNIT_ASSERT_EQUAL(1, db.allreduce_samples().at(0).ranks_per_node);
        // schema 10's parts travel (all_rows compares them too); a run of one part has null
        CPPUNIT_ASSERT(contains(text, "\"part_seconds\": null"));
        const auto parted = db.run_by_job("11");
        CPPUNIT_ASSERT_EQUAL(3, parted->parts);
        CPPUNIT_ASSERT(parted->part_seconds == std::vector<double>({10.5, 0.125, 20.125}));
        // Importing the same file again adds nothing.
        const auto again = db.import_json(text, "x.json");
        CPPUNIT_ASSERT_EQUAL(size_t(14), again.skipped);
        CPPUNIT_ASSERT_EQUAL(size_t(0), again.compute + again.allreduce + again.runs);
        const auto rb2 = all_rows(b);
        CPPUNIT_ASSERT(ra == rb2);
        // An export written before schema version 10 (without the fields) imports with 1 part.
        nlohmann::json old = nlohmann::json::parse(text);
        old["schema_version"] = 9;
        for (auto& r : old["runs"]) {
            r.erase("parts");
            r.erase("part_seconds");
        }
        auto c = tula::ProfileDb::open(d / "c.db", tula::ProfileDb::Mode::ReadWrite);
        CPPUNIT_ASSERT_EQUAL(size_t(3), c.import_json(old.dump(), "old.json").runs);
        for (const auto& r : c.runs()) {
            CPPUNIT_ASSERT_EQUAL(1, r.parts);
            CPPUNIT_ASSERT(r.part_seconds.empty());
        }
    }

    void test_export_one_workload() {
        TempDir d;
        auto db = tula::ProfileDb::open(d / "a.db", tula::ProfileDb::Mode::ReadWrite);
        fill_random(db, 8);
        const std::string text = db.export_json("lenet5@fashion-mnist");
        auto db2 = tula::ProfileDb::open(d / "b.db", tula::ProfileDb::Mode::ReadWrite);
        const auto n = db2.import_json(text, "x.json");
        CPPUNIT_ASSERT_EQUAL(size_t(1), n.workloads);
        CPPUNIT_ASSERT_EQUAL(size_t(4), n.compute);
        CPPUNIT_ASSERT_EQUAL(size_t(0), n.allreduce);
        CPPUNIT_ASSERT_EQUAL(size_t(1), n.runs);
        CPPUNIT_ASSERT(db2.compute_samples("fmnist-cnn@fashion-mnist").empty());
        CPPUNIT_ASSERT(!db2.workload("fmnist-cnn@fashion-mnist"));
    }

    void test_import_rejects_bad_files() {
        TempDir d;
        std::string good;
        {
            auto db = tula::ProfileDb::open(d / "a.db", tula::ProfileDb::Mode::ReadWrite);
            fill_random(db, 9);
            good = db.export_json();
        }
        auto db = tula::ProfileDb::open(d / "b.db", tula::ProfileDb::Mode::ReadWrite);
        // Replaces the first occurrence of `from` in the good export.
        auto edit = [&](const std::string& from, const std::string& to) {
            const size_t at = good.find(from);
            CPPUNIT_ASSERT_MESSAGE(from, at != std::string::npos);
            return good.substr(0, at) + to + good.substr(at + from.size());
        };
        auto err = [&](const std::string& text) { return error_of([&] { db.import_json(text, "f.json"); }); };
        CPPUNIT_ASSERT(contains(err(good.substr(0, good.size() / 2)), "not valid JSON"));
        CPPUNIT_ASSERT(contains(err("[1, 2]"), "not a tula profile export"));
        CPPUNIT_ASSERT(contains(err(edit("\"tula-profiles\"", "\"other\"")), "not a tula profile export"));
        const std::string ver = "\"schema_version\": " + std::to_string(tula::kSchemaVersion);
        CPPUNIT_ASSERT(contains(err(edit(ver, "\"schema_version\": " + std::to_string(tula::kSchemaVersion + 1))),
                                "upgrade tula"));
        CPPUNIT_ASSERT(contains(err(edit(ver, "\"schema_version\": 0")), "is not a version this tula reads"));
        CPPUNIT_ASSERT(contains(err(edit(ver, "\"schema_version\": \"2\"")), "schema_version"));
        CPPUNIT_ASSERT(contains(err(edit("\"noise_scale\": ", "\"noise_scale\": -")), "runs row 1: noise_scale must be > 0"));
        CPPUNIT_ASSERT(contains(err(edit("\"noise_scale\": ", "\"noise_scale\": \"x\", \"y\": ")),
                                "runs row 1: noise_scale must be a number"));
        CPPUNIT_ASSERT(contains(err(edit("\"noise_observations\": 37", "\"noise_observations\": -1")),
                                "runs row 1: noise_observations"));
        CPPUNIT_ASSERT(contains(err(edit("\"optimizer\": \"lamb\"", "\"optimizer\": \"LAMB; x\"")),
                                "runs row 1: optimizer must be"));
        CPPUNIT_ASSERT(contains(err(edit("\"optimizer\": \"lamb\"", "\"optimizer\": 3")),
                                "runs row 1: optimizer must be a string"));
        CPPUNIT_ASSERT(contains(err(edit("\"local_batch\": 16", "\"local_batch\": \"16\"")),
                                "compute row 1: local_batch must be an integer"));
        CPPUNIT_ASSERT(contains(err(edit("\"local_batch\": 32", "\"local_batch\": 0")), "compute row 2: local_batch"));
        CPPUNIT_ASSERT(contains(err(edit("\"local_batch\": 64", "\"local_batch\": 6.5")), "compute row 3"));
        CPPUNIT_ASSERT(contains(err(edit("\"nodes\": 4,", "\"nodes\": -4,")), "allreduce row 2: nodes"));
        CPPUNIT_ASSERT(contains(err(edit("\"seconds_per_iter\": ", "\"seconds_per_iter\": -")),
                                "compute row 1: seconds_per_iter must be > 0"));
        CPPUNIT_ASSERT(contains(err(edit("\"seconds_per_iter\": ", "\"seconds_per_iter\": \"NaN\", \"x\": ")),
                                "compute row 1: seconds_per_iter must be a number"));
        CPPUNIT_ASSERT(contains(err(edit("\"seconds_per_iter\": ", "\"seconds_per_iter\": NaN, \"x\": ")),
                                "not valid JSON"));
        // A number too large for a double (found by tests/fuzz/fuzz_import.cpp) is an error, not a crash.
        CPPUNIT_ASSERT(contains(err(edit("\"seconds_per_iter\": ", "\"seconds_per_iter\": 1e99999, \"x\": ")),
                                "not valid JSON"));
        CPPUNIT_ASSERT(contains(err(edit("\"measured_seconds\": ", "\"measured_seconds\": 0, \"x\": ")),
                                "runs row 1: measured_seconds must be > 0"));
        CPPUNIT_ASSERT(contains(err(edit("\"host\": ", "\"hostx\": ")), "has no field \"host\""));
        CPPUNIT_ASSERT(contains(err(edit("\"allreduce\": [", "\"allreduce\": 5, \"x\": [")), "\"allreduce\" must be a JSON array"));
        // a run's parts: a count >= 1, part_seconds null or one number >= 0 per part
        CPPUNIT_ASSERT(contains(err(edit("\"parts\": 1", "\"parts\": 0")), "runs row 1: parts must be a count >= 1"));
        CPPUNIT_ASSERT(contains(err(edit("\"parts\": 1", "\"parts\": \"1\"")), "runs row 1: parts must be an integer"));
        CPPUNIT_ASSERT(contains(err(edit("\"part_seconds\": null", "\"part_seconds\": [1, 2]")),
                                "runs row 1: part_seconds must be null or a list of one number per part (1 parts)"));
        CPPUNIT_ASSERT(contains(err(edit("\"parts\": 1,\n      \"part_seconds\": null", "\"parts\": 2, \"part_seconds\": [1, -2]")),
                                "runs row 1: part_seconds must be >= 0"));
        CPPUNIT_ASSERT(contains(err(edit("\"parts\": 1,\n      \"part_seconds\": null", "\"parts\": 2, \"part_seconds\": [1, null]")),
                                "runs row 1: part_seconds must hold numbers, not null"));
        CPPUNIT_ASSERT(contains(err(edit("\"part_seconds\": null", "\"part_seconds\": 5")),
                                "runs row 1: part_seconds must be null or a list"));
        // Nothing of the rejected files was added.
        CPPUNIT_ASSERT(db.workloads().empty());
        CPPUNIT_ASSERT(db.compute_samples("").empty());
        CPPUNIT_ASSERT(db.allreduce_samples().empty());
        CPPUNIT_ASSERT(db.runs().empty());
    }

    void test_prune() {
        TempDir d;
        const std::string p = d / "a.db";
        auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
        fill_random(db, 10);
        CPPUNIT_ASSERT(!error_of([&] { db.prune(0, ""); }).empty());
        // Age the first two compute samples of each workload and one allreduce sample.
        raw_exec(p, "UPDATE compute_profile SET created = 1000 WHERE local_batch IN (16, 32)");
        raw_exec(p, "UPDATE allreduce_profile SET created = 1000 WHERE nodes = 2");
        const size_t runs_before = raw_rows(p, "SELECT id FROM run WHERE created < 1.75e9").size();
        CPPUNIT_ASSERT_EQUAL(size_t(2), runs_before);
        auto n = db.prune(1.75e9, "");  // samples added now (> 1.75e9) stay; the runs (~1.7e9) go
        CPPUNIT_ASSERT_EQUAL(size_t(4), n.compute);
        CPPUNIT_ASSERT_EQUAL(size_t(1), n.allreduce);
        CPPUNIT_ASSERT_EQUAL(runs_before, n.runs);
        CPPUNIT_ASSERT_EQUAL(size_t(0), n.workloads);  // both still have compute samples
        CPPUNIT_ASSERT_EQUAL(size_t(4), raw_rows(p, "SELECT id FROM compute_profile").size());
        CPPUNIT_ASSERT_EQUAL(size_t(0), raw_rows(p, "SELECT run_id FROM run_epoch").size());
        // One workload, any age: its samples and its workload row go; the other stays.
        n = db.prune(0, "lenet5@fashion-mnist");
        CPPUNIT_ASSERT_EQUAL(size_t(2), n.compute);
        CPPUNIT_ASSERT_EQUAL(size_t(1), n.workloads);
        CPPUNIT_ASSERT_EQUAL(size_t(0), n.allreduce);
        CPPUNIT_ASSERT(!db.workload("lenet5@fashion-mnist"));
        CPPUNIT_ASSERT(db.workload("fmnist-cnn@fashion-mnist"));
        CPPUNIT_ASSERT_EQUAL(size_t(2), db.compute_samples("fmnist-cnn@fashion-mnist").size());
        CPPUNIT_ASSERT_EQUAL(size_t(1), db.allreduce_samples().size());
    }

    // prune(0, "", K) against a naive count over the rows read back: what was measured on more
    // than K nodes goes (a compute sample's nodes: ranks / ranks_per_node), with a removed run's
    // per-epoch rows; everything else stays.
    void test_prune_above_nodes() {
        TempDir d;
        const std::string p = d / "a.db";
        auto db = tula::ProfileDb::open(p, tula::ProfileDb::Mode::ReadWrite);
        fill_random(db, 11);
        tula::ComputeSample c = db.compute_samples("lenet5@fashion-mnist").front();
        c.ranks = 6, c.ranks_per_node = 2;  // 3 nodes of 2 ranks
        db.add_compute(c);
        c.ranks = 4;  // 2 nodes of 2 ranks: stays
        db.add_compute(c);
        tula::RunRecord r = tula_test::run_record("9", "lenet5@fashion-mnist", 3, 192, 2, 50, 1.7e9);
        r.epoch_seconds = {20, 30};
        db.add_run(r);
        size_t compute = 0, allreduce = 0, runs = 0;
        for (const auto& s : db.compute_samples("")) compute += s.ranks > 2 * s.ranks_per_node;
        for (const auto& s : db.allreduce_samples()) allreduce += s.nodes > 2;
        for (const auto& s : db.runs()) runs += s.nodes > 2;
        CPPUNIT_ASSERT(compute >= 1 && allreduce >= 1 && runs == 1);
        const size_t compute_before = db.compute_samples("").size(), runs_before = db.runs().size();
        const auto n = db.prune(0, "", 2);
        CPPUNIT_ASSERT_EQUAL(compute, n.compute);
        CPPUNIT_ASSERT_EQUAL(allreduce, n.allreduce);
        CPPUNIT_ASSERT_EQUAL(runs, n.runs);
        CPPUNIT_ASSERT_EQUAL(size_t(0), n.workloads);
        CPPUNIT_ASSERT_EQUAL(compute_before - compute, db.compute_samples("").size());
        CPPUNIT_ASSERT_EQUAL(runs_before - runs, db.runs().size());
        for (const auto& s : db.allreduce_samples()) CPPUNIT_ASSERT(s.nodes <= 2);
        CPPUNIT_ASSERT(raw_rows(p, "SELECT run_id FROM run_epoch WHERE run_id NOT IN (SELECT id FROM run)").empty());
        // again: nothing left to remove
        CPPUNIT_ASSERT_EQUAL(size_t(0), db.prune(0, "", 2).total());
    }
};


CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaDbExchangeTest);
