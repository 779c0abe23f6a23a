// Unit tests of the metrics-file commands (cli/metrics_commands.hpp): `tula db record` writes
// one run from a good file and nothing from a bad one; `tula profile compute --command` stores
// the samples a stub command prints and nothing when it omits a batch size.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "cli/metrics_commands.hpp"
#include "test_util.hpp"
#include "tula/db.hpp"

using tula_test::TempDir;

namespace {

void write_file(const std::string& path, const std::string& text) {
    std::ofstream o(path, std::ios::binary);
    o << text;
}

// (runs, workloads, compute samples) of the database at `path`; zeros when it does not exist.
std::string counts(const std::string& path) {
    if (::access(path.c_str(), F_OK) != 0) return "0 0 0";
    auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadOnly);
    return std::to_string(db.runs().size()) + " " + std::to_string(db.workloads().size()) + " " +
           std::to_string(db.compute_samples("").size());
}

const char* kRun =
    "{\"type\":\"run\",\"workload\":\"torch-cnn@fashion-mnist\",\"nodes\":2,\"ranks\":4,\"global_batch\":128,"
    "\"train_examples\":60000,\"test_examples\":10000,\"params\":1000,\"optimizer\":\"sgd\"}\n"
    "{\"type\":\"step\",\"step\":0,\"seconds\":0.05,\"examples\":128}\n"
    "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":10,\"test_accuracy\":0.8,\"train_loss\":0.5,\"noise_scale\":200}\n"
    "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":9.5,\"test_accuracy\":0.85,\"train_loss\":0.4,\"noise_scale\":null}\n";

// Sets an environment variable for the life of the object, then restores it.
struct EnvVar {
    std::string name, old;
    bool had;
    EnvVar(const std::string& n, const char* v) : name(n) {
        const char* o = std::getenv(n.c_str());
        had = o != nullptr;
        if (had) old = o;
        if (v) setenv(n.c_str(), v, 1);
        else unsetenv(n.c_str());
    }
    ~EnvVar() {
        if (had) setenv(name.c_str(), old.c_str(), 1);
        else unsetenv(name.c_str());
    }
};

}  // namespace

class CliMetricsCommandsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(CliMetricsCommandsTest);
    CPPUNIT_TEST(test_db_record_good_file);
    CPPUNIT_TEST(test_db_record_bad_file_writes_nothing);
    CPPUNIT_TEST(test_db_record_part_of_the_data_set);
    CPPUNIT_TEST(test_profile_command_stores_samples);
    CPPUNIT_TEST(test_profile_command_missing_batch_stores_nothing);
    CPPUNIT_TEST(test_combine_rank_profiles);
    CPPUNIT_TEST(test_db_record_profiles);
    CPPUNIT_TEST_SUITE_END();

public:
    // tula-train --profile-compute's and --profile-allreduce's files, as tula db record stores
    // them: every field of a line and of the header reaches its sample.
    void test_db_record_profiles() {
        TempDir d("record-profile");
        const std::string db = d / "p.db", pf = d / "p.jsonl", af = d / "a.jsonl";
        write_file(pf,
                   "{\"type\":\"run\",\"workload\":\"lenet5@fashion-mnist\",\"nodes\":2,\"ranks\":4,\"host\":\"n1\","
                   "\"hardware_class\":\"cpu-a\",\"params\":61706,\"train_examples\":2000,\"dataset_train_examples\":60000,"
                   "\"test_examples\":100,\"dataset_test_examples\":10000,\"activation_floats\":15386}\n"
                   "{\"type\":\"profile\",\"local_batch\":8,\"seconds\":0.5,\"steps\":3,\"threads\":2,"
                   "\"startup_seconds\":0.25,\"synced_seconds\":0.75}\n");
        write_file(af, "{\"type\":\"run\",\"nodes\":1,\"ranks\":2,\"host\":\"n2\",\"hardware_class\":\"\"}\n"
                       "{\"type\":\"allreduce\",\"bytes\":4096,\"seconds\":0.001,\"iters\":20}\n"
                       "{\"type\":\"allreduce\",\"bytes\":65536,\"seconds\":0.002,\"iters\":20}\n");
        std::vector<std::string> warnings;
        const tula::cli::RecordedProfile p = tula::cli::record_profile_file(pf, "77", db, &warnings);
        CPPUNIT_ASSERT_EQUAL(size_t(1), p.samples);
        const tula::cli::RecordedProfile a = tula::cli::record_profile_file(af, "", db, &warnings);
        CPPUNIT_ASSERT_EQUAL(size_t(2), a.samples);
        CPPUNIT_ASSERT(warnings.empty());
        auto x = tula::ProfileDb::open(db, tula::ProfileDb::Mode::ReadOnly);
        const std::vector<tula::ComputeSample> c = x.compute_samples("lenet5@fashion-mnist");
        CPPUNIT_ASSERT_EQUAL(size_t(1), c.size());
        CPPUNIT_ASSERT_EQUAL(std::string("n1"), c[0].host);
        CPPUNIT_ASSERT_EQUAL(8, c[0].local_batch);
        CPPUNIT_ASSERT_EQUAL(2, c[0].threads);
        CPPUNIT_ASSERT_EQUAL(4, c[0].ranks);
        CPPUNIT_ASSERT_EQUAL(2, c[0].ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(3, c[0].iters);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, c[0].seconds_per_iter, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25, c[0].startup_seconds, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.75, c[0].synced_seconds_per_iter, 0);
        CPPUNIT_ASSERT_EQUAL(std::string("cpu-a"), c[0].hardware_class);
        CPPUNIT_ASSERT_EQUAL(std::string("77"), c[0].job_id);  // --job
        const auto w = x.workload("lenet5@fashion-mnist");
        CPPUNIT_ASSERT(w);
        CPPUNIT_ASSERT_EQUAL(int64_t(60000), w->train_examples);
        CPPUNIT_ASSERT_EQUAL(int64_t(10000), w->test_examples);
        CPPUNIT_ASSERT_EQUAL(int64_t(15386), w->activation_floats);
        const std::vector<tula::AllreduceSample> r = x.allreduce_samples();
        CPPUNIT_ASSERT_EQUAL(size_t(2), r.size());
        CPPUNIT_ASSERT_EQUAL(std::string("n2"), r[1].host);
        CPPUNIT_ASSERT_EQUAL(1, r[1].nodes);
        CPPUNIT_ASSERT_EQUAL(2, r[1].ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(int64_t(65536), r[1].bytes);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.002, r[1].seconds, 0);
        // a run file is not a profile
        const std::string rf = d / "r.jsonl";
        write_file(rf, kRun);
        tula_test::assert_throws_with([&] { tula::cli::record_profile_file(rf, "", db, &warnings); }, "a run file");
    }

    void test_db_record_good_file() {
        TempDir d("record");
        const std::string db = d / "p.db", f = d / "run.jsonl";
        write_file(f, kRun);
        EnvVar job("SLURM_JOB_ID", "4242"), pred("TULA_PREDICTED_SECONDS", "17.5"), cls("TULA_HARDWARE_CLASS", "cpu");
        std::vector<std::string> warnings;
        const tula::cli::RecordedRun r = tula::cli::record_metrics_file(f, "", db, &warnings);
        CPPUNIT_ASSERT_EQUAL(std::string("1 1 0"), counts(db));
        auto d2 = tula::ProfileDb::open(db, tula::ProfileDb::Mode::ReadOnly);
        const tula::RunRecord x = d2.runs().at(0);
        CPPUNIT_ASSERT_EQUAL(r.id, x.id);
        CPPUNIT_ASSERT_EQUAL(std::string("4242"), x.job_id);
        CPPUNIT_ASSERT_EQUAL(2, x.nodes);
        CPPUNIT_ASSERT_EQUAL(2, x.ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(128, x.global_batch);
        CPPUNIT_ASSERT_EQUAL(2, x.epochs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(19.5, x.measured_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.85, x.test_accuracy, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(17.5, x.predicted_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(200.0, x.noise_scale, 1e-9);
        CPPUNIT_ASSERT_EQUAL(std::string("sgd"), x.optimizer);
        CPPUNIT_ASSERT_EQUAL(std::string("cpu"), x.hardware_class);
        CPPUNIT_ASSERT_EQUAL(int64_t(60000), x.train_examples);
        CPPUNIT_ASSERT_EQUAL(size_t(2), x.epoch_seconds.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(9.5, x.epoch_seconds[1], 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.4, x.epoch_train_loss[1], 1e-9);
        const auto w = d2.workload("torch-cnn@fashion-mnist");
        CPPUNIT_ASSERT(w && w->params == 1000 && w->train_examples == 60000 && w->test_examples == 10000);
        const std::string line = tula::cli::recorded_line(r, db);
        CPPUNIT_ASSERT_MESSAGE(line, tula_test::contains(line, "tula: recorded run 1 of torch-cnn@fashion-mnist (2 nodes x 2 ranks, global batch 128, 2 epochs, 19.50 s) in "));
        // --job wins over the environment
        const tula::cli::RecordedRun r2 = tula::cli::record_metrics_file(f, "99", db, &warnings);
        CPPUNIT_ASSERT_EQUAL(std::string("99"), r2.run.job_id);
        // the plan's prediction is kept for the plan's row (128 x 2 epochs) and dropped, with a
        // warning, for a run that trained another global batch or other epochs than the plan's
        {
            EnvVar b("TULA_BATCH_SIZE", "128"), e("TULA_EPOCHS", "2");
            CPPUNIT_ASSERT_DOUBLES_EQUAL(17.5, tula::cli::record_metrics_file(f, "7", db, &warnings).run.predicted_seconds, 1e-9);
        }
        for (const auto& [batch, epochs] : {std::pair<const char*, const char*>{"512", "2"}, {"128", "30"}}) {
            EnvVar b("TULA_BATCH_SIZE", batch), e("TULA_EPOCHS", epochs);
            std::vector<std::string> w;
            CPPUNIT_ASSERT_EQUAL(0.0, tula::cli::record_metrics_file(f, "8", db, &w).run.predicted_seconds);
            CPPUNIT_ASSERT(w.size() == 1 && tula_test::contains(w[0], "not recording the plan's prediction"));
        }
    }

    // A run on part of the data set (train_examples 640) records its own examples per epoch
    // but never shrinks the workload's size; dataset_train_examples sets the size of a new row.
    void test_db_record_part_of_the_data_set() {
        TempDir d("record-part");
        const std::string db = d / "p.db", f = d / "run.jsonl", g = d / "part.jsonl", h = d / "new.jsonl";
        std::vector<std::string> warnings;
        write_file(f, kRun);  // train_examples 60000: the workload row
        tula::cli::record_metrics_file(f, "1", db, &warnings);
        const std::string head = "{\"type\":\"run\",\"workload\":\"torch-cnn@fashion-mnist\",\"nodes\":1,\"ranks\":1,"
                                 "\"global_batch\":64,\"params\":1000,\"train_examples\":640,\"test_examples\":500";
        const std::string epoch = "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n";
        write_file(g, head + "}\n" + epoch);
        const tula::cli::RecordedRun r = tula::cli::record_metrics_file(g, "2", db, &warnings);
        CPPUNIT_ASSERT_EQUAL(int64_t(640), r.run.train_examples);
        auto d2 = tula::ProfileDb::open(db, tula::ProfileDb::Mode::ReadOnly);
        const auto w = d2.workload("torch-cnn@fashion-mnist");
        CPPUNIT_ASSERT(w && w->train_examples == 60000 && w->test_examples == 10000);
        // a new database: the data set's sizes from dataset_*_examples, not the run's part
        const std::string db2 = d / "q.db";
        write_file(h, head + ",\"dataset_train_examples\":60000,\"dataset_test_examples\":10000}\n" + epoch);
        tula::cli::record_metrics_file(h, "3", db2, &warnings);
        const auto w2 = tula::ProfileDb::open(db2, tula::ProfileDb::Mode::ReadOnly).workload("torch-cnn@fashion-mnist");
        CPPUNIT_ASSERT(w2 && w2->train_examples == 60000 && w2->test_examples == 10000);
    }

    void test_db_record_bad_file_writes_nothing() {
        TempDir d("record-bad");
        const std::string db = d / "p.db", f = d / "run.jsonl";
        write_file(f, kRun);
        std::vector<std::string> warnings;
        tula::cli::record_metrics_file(f, "1", db, &warnings);
        CPPUNIT_ASSERT_EQUAL(std::string("1 1 0"), counts(db));
        // a bad last line: nothing more
        write_file(f, std::string(kRun) + "{\"type\":\"epoch\",\"epoch\":3,\"seconds\":1,\"test_accuracy\":1.5}\n");
        tula_test::assert_throws_with([&] { tula::cli::record_metrics_file(f, "1", db, &warnings); }, "run.jsonl:5:");
        CPPUNIT_ASSERT_EQUAL(std::string("1 1 0"), counts(db));
        // an unknown workload without params: refused, naming the missing fields, and no file created
        const std::string db2 = d / "new.db";
        write_file(f, "{\"type\":\"run\",\"workload\":\"x@y\",\"nodes\":1,\"ranks\":1,\"global_batch\":8}\n"
                      "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":1,\"test_accuracy\":0.5}\n");
        tula_test::assert_throws_with([&] { tula::cli::record_metrics_file(f, "1", db2, &warnings); },
                                      "has no \"params\" and \"train_examples\"");
        CPPUNIT_ASSERT_EQUAL(std::string("0 0 0"), counts(db2));
    }

    void test_profile_command_stores_samples() {
        TempDir d("profcmd");
        const std::string db = d / "p.db";
        tula::cli::CommandProfile p;
        p.workload = "stub@data";
        p.batch_sizes = {16, 32};
        p.min_seconds = 0.5;
        p.rounds = 2;
        p.hardware_class = "cpu";
        // the stub checks the contract's environment and prints the header and one line per batch
        p.command = "test \"$TULA_PROFILE_BATCHES\" = 16,32 && test \"$TULA_PROFILE_MIN_SECONDS\" = 0.5 && "
                    "test \"$TULA_WORKLOAD\" = stub@data && "
                    "printf '%s\\n' '{\"type\":\"run\",\"workload\":\"stub@data\",\"nodes\":1,\"ranks\":1,\"params\":77,"
                    "\"train_examples\":1000}' '{\"type\":\"profile\",\"local_batch\":16,\"seconds\":0.01,\"steps\":20}' "
                    "'{\"type\":\"profile\",\"local_batch\":32,\"seconds\":0.018,\"steps\":11}' > \"$TULA_METRICS\"";
        const auto got = tula::cli::profile_with_command(p, db);
        CPPUNIT_ASSERT_EQUAL(size_t(4), got.size());
        auto d2 = tula::ProfileDb::open(db, tula::ProfileDb::Mode::ReadOnly);
        const auto s = d2.compute_samples("stub@data");
        CPPUNIT_ASSERT_EQUAL(size_t(4), s.size());
        CPPUNIT_ASSERT_EQUAL(32, s[1].local_batch);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.018, s[1].seconds_per_iter, 1e-15);
        CPPUNIT_ASSERT_EQUAL(11, s[1].iters);
        CPPUNIT_ASSERT_EQUAL(1, s[1].ranks);
        CPPUNIT_ASSERT_EQUAL(1, s[1].ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(1, s[1].threads);
        CPPUNIT_ASSERT_EQUAL(std::string("cpu"), s[1].hardware_class);
        CPPUNIT_ASSERT(std::isnan(s[1].startup_seconds));
        const auto w = d2.workload("stub@data");
        CPPUNIT_ASSERT(w && w->params == 77);
    }

    void test_profile_command_missing_batch_stores_nothing() {
        TempDir d("profcmd-miss");
        const std::string db = d / "p.db";
        tula::cli::CommandProfile p;
        p.workload = "stub@data";
        p.batch_sizes = {16, 32};
        p.command = "printf '%s\\n' '{\"type\":\"run\",\"workload\":\"stub@data\",\"nodes\":1,\"ranks\":1}' "
                    "'{\"type\":\"profile\",\"local_batch\":16,\"seconds\":0.01,\"steps\":20}' > \"$TULA_METRICS\"";
        tula_test::assert_throws_with([&] { tula::cli::profile_with_command(p, db); }, "no \"profile\" line for local batch 32");
        CPPUNIT_ASSERT_EQUAL(std::string("0 0 0"), counts(db));
        p.command = "exit 3";
        tula_test::assert_throws_with([&] { tula::cli::profile_with_command(p, db); }, "exited with status 3");
        p.command = "true";
        tula_test::assert_throws_with([&] { tula::cli::profile_with_command(p, db); }, "wrote no metrics file");
        CPPUNIT_ASSERT_EQUAL(std::string("0 0 0"), counts(db));
    }

    void test_combine_rank_profiles() {
        auto sample = [](int b, double s, int it) {
            tula::ComputeSample c;
            c.workload = "m@d";
            c.local_batch = b;
            c.seconds_per_iter = s;
            c.iters = it;
            return c;
        };
        const auto out = tula::cli::combine_rank_profiles({{sample(16, 0.01, 10), sample(32, 0.02, 10)},
                                                           {sample(16, 0.015, 8), sample(32, 0.018, 12)}},
                                                          2);
        CPPUNIT_ASSERT_EQUAL(size_t(2), out.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.015, out[0].seconds_per_iter, 1e-15);
        CPPUNIT_ASSERT_EQUAL(8, out[0].iters);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.02, out[1].seconds_per_iter, 1e-15);
        CPPUNIT_ASSERT_EQUAL(2, out[1].ranks);
        CPPUNIT_ASSERT_EQUAL(2, out[1].ranks_per_node);
        tula_test::assert_throws_with([&] { tula::cli::combine_rank_profiles({{sample(16, 0.01, 10)}, {sample(32, 0.01, 10)}}, 1); },
                                      "rank 1 has no \"profile\" line for local batch 16");
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(CliMetricsCommandsTest);
