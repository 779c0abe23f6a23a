// Unit tests of libtula's C API (tula.h): tula_plan_job end to end on a temporary database,
// configuration and batch script, its error paths, and tula_parse_mode.
#include <cppunit/extensions/HelperMacros.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>

#include "record_builders.hpp"
#include "test_util.hpp"
#include "tula/conf.hpp"
#include "tula/db.hpp"
#include "tula/tula.h"

namespace {

using tula_test::contains;
using tula_test::hand_epochs;

using tula_test::TempDir;  // tests/unit/test_util.hpp

void write(const std::string& path, const std::string& text) {
    std::ofstream f(path);
    f << text;
}

// Model constants of the synthetic profile.
constexpr double kT0 = 2e-3, kT1 = 1.5e-4, kAlpha = 4e-5, kBeta = 2e-9;
constexpr int64_t kParams = 61706, kTrain = 60000;

// A system database with an exact compute and allreduce profile of lenet5@fashion-mnist.
void make_db(const std::string& path) {
    auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
    const tula::Workload w = tula_test::fmnist_workload("lenet5", kParams, kTrain);
    db.upsert_workload(w);
    for (int b : {16, 32, 64, 128, 256}) {
        tula::ComputeSample c;
        c.workload = w.name;
        c.local_batch = b;
        c.seconds_per_iter = kT0 + kT1 * b;
        db.add_compute(c);
    }
    for (int k : {2, 3, 4})
        for (int64_t n : {int64_t(4096), int64_t(1) << 20}) {
            tula::AllreduceSample a;
            a.nodes = k;
            a.bytes = n;
            a.seconds = 2.0 * (k - 1) * kAlpha + 2.0 * (k - 1) / k * n * kBeta;
            db.add_allreduce(a);
        }
}

// The prediction for (K, B), written out from the model formulas.
double hand_total(int K, int B, int epochs) {
    double iter = kT0 + kT1 * (static_cast<double>(B) / K);
    if (K > 1) iter += 2.0 * (K - 1) * kAlpha + 2.0 * (K - 1) / K * (4.0 * kParams) * kBeta;
    return epochs * std::floor(static_cast<double>(kTrain) / B) * iter;
}

const char* kScript =
    "#!/bin/bash\n#SBATCH --ntasks-per-node=1\n"
    "mpirun --allow-run-as-root -np \"${SLURM_JOB_NUM_NODES:-1}\" \\\n"
    "    tula-train --model lenet5 --data fashion-mnist --epochs 12\n";

}  // namespace

class LibtulaCApiTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaCApiTest);
    CPPUNIT_TEST(test_plan_job_end_to_end);
    CPPUNIT_TEST(test_plan_job_missing_db);
    CPPUNIT_TEST(test_plan_job_bad_inputs);
    CPPUNIT_TEST(test_parse_mode);
    CPPUNIT_TEST(test_parse_epochs_mode);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_plan_job_end_to_end() {
        TempDir d;
        make_db(d / "sys.db");
        write(d / "job.sbatch", kScript);
        write(d / "tula.conf", "global_batches = 128, 256, 512\nprice_per_node_hour = 1.5\ndefault_epochs = 3\nnoise_scale = 500\n");
        for (int nodes : {1, 2, 4}) {
            tula_job_query q{};
            const std::string conf = d / "tula.conf", sys = d / "sys.db", script = d / "job.sbatch", xdg = d / "xdg";
            q.conf_path = conf.c_str();
            q.system_db = sys.c_str();
            q.xdg_data_home = xdg.c_str();  // no user database there yet: skipped silently
            q.home = "/nonexistent";
            q.script_path = script.c_str();
            q.policy = "time";
            q.nodes = nodes;
            tula_job_plan out;
            std::memset(&out, 'x', sizeof out);
            const int rc = tula_plan_job(&q, &out);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(out.message, 0, rc);
            CPPUNIT_ASSERT_EQUAL(nodes, out.nodes);
            CPPUNIT_ASSERT_EQUAL(std::string("lenet5@fashion-mnist"), std::string(out.workload));
            CPPUNIT_ASSERT(std::strlen(out.message) < TULA_MSG_MAX);
            CPPUNIT_ASSERT(std::strncmp(out.message, "tula: ", 6) == 0);
            // policy time: the argmin over the configured batches of the time of the epochs each
            // trains, by hand: the script's 12 epochs (not the config's 3) at tula-train's
            // default batch 64, E(B) = 12 (1 + B/500) / (1 + 64/500) rounded up at batch B,
            // B_noise 500 (McCandlish et al. 2018, eq. 2.11)
            int best_b = 0;
            double best_t = INFINITY;
            for (int B : {128, 256, 512}) {
                const double t = hand_total(nodes, B, hand_epochs(500, B, 12, 64));
                if (t < best_t) {
                    best_t = t;
                    best_b = B;
                }
            }
            CPPUNIT_ASSERT_EQUAL(best_b, out.global_batch);
            CPPUNIT_ASSERT_EQUAL(hand_epochs(500, best_b, 12, 64), out.epochs);
            CPPUNIT_ASSERT(out.epochs > 12);  // every configured batch is above 64
            CPPUNIT_ASSERT_DOUBLES_EQUAL(best_t, out.predicted_seconds, 1e-6 * best_t);
        }
        // the workload given directly; epochs then come from the config when there is no script
        tula_job_query q{};
        const std::string conf = d / "tula.conf", sys = d / "sys.db";
        q.conf_path = conf.c_str();
        q.system_db = sys.c_str();
        q.home = d.path.c_str();
        q.workload = "lenet5@fashion-mnist";
        q.nodes = 2;
        tula_job_plan out;
        CPPUNIT_ASSERT_EQUAL_MESSAGE(out.message, 0, tula_plan_job(&q, &out));
        CPPUNIT_ASSERT_EQUAL(hand_epochs(500, out.global_batch, 3, 64), out.epochs);
        CPPUNIT_ASSERT_EQUAL(2, out.nodes);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(hand_total(2, out.global_batch, out.epochs), out.predicted_seconds, 1e-3);
        // a tula.conf without partition sections: the implicit partition, one rank per node
        CPPUNIT_ASSERT_EQUAL(std::string(), std::string(out.partition));
        CPPUNIT_ASSERT_EQUAL(1, out.ranks_per_node);
        // one partition section of 2 GPUs per node: its name, 2 ranks per node, 2 GPUs reach the caller
        const std::string pconf = d / "parts.conf";
        write(pconf, "global_batches = 128, 256, 512\ndefault_epochs = 3\nnoise_scale = 500\n"
                     "[partition gpu]\nnodes = 4\ngpus_per_node = 2\n");
        q.conf_path = pconf.c_str();
        CPPUNIT_ASSERT_EQUAL_MESSAGE(out.message, 0, tula_plan_job(&q, &out));
        CPPUNIT_ASSERT_EQUAL(std::string("gpu"), std::string(out.partition));
        CPPUNIT_ASSERT_EQUAL(2, out.ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(2, out.gpus_per_node);
        CPPUNIT_ASSERT_EQUAL(2, out.nodes);
        CPPUNIT_ASSERT_EQUAL(0, out.global_batch % 4);  // 2 nodes x 2 ranks
        q.conf_path = conf.c_str();
        // the workload given and a script: the epochs still come from the script
        const std::string script = d / "job.sbatch";
        q.script_path = script.c_str();
        CPPUNIT_ASSERT_EQUAL_MESSAGE(out.message, 0, tula_plan_job(&q, &out));
        CPPUNIT_ASSERT_EQUAL(hand_epochs(500, out.global_batch, 12, 64), out.epochs);
        q.script_path = nullptr;
        // a missing tula.conf means the built-in defaults
        const std::string none = d / "none.conf";
        q.conf_path = none.c_str();
        CPPUNIT_ASSERT_EQUAL_MESSAGE(out.message, 0, tula_plan_job(&q, &out));
        CPPUNIT_ASSERT_EQUAL(hand_epochs(tula::Config().noise_scale, out.global_batch, tula::Config().default_epochs, 64),
                             out.epochs);
    }

    void test_plan_job_missing_db() {
        TempDir d;
        write(d / "job.sbatch", kScript);
        const std::string sys = d / "nothing.db", script = d / "job.sbatch", conf = d / "none.conf";
        tula_job_query q{};
        q.conf_path = conf.c_str();
        q.system_db = sys.c_str();
        q.home = d.path.c_str();
        q.script_path = script.c_str();
        q.nodes = 2;
        tula_job_plan out;
        CPPUNIT_ASSERT_EQUAL(-1, tula_plan_job(&q, &out));
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "tula profile"));
        CPPUNIT_ASSERT_MESSAGE(out.message, std::strncmp(out.message, "tula: ", 6) == 0);
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "lenet5@fashion-mnist"));
        CPPUNIT_ASSERT_EQUAL(0, out.global_batch);
    }

    void test_plan_job_bad_inputs() {
        TempDir d;
        make_db(d / "sys.db");
        write(d / "job.sbatch", kScript);
        write(d / "plain.sh", "#!/bin/sh\npython train.py\n");
        write(d / "bad.conf", "max_nodes = 4\nnodes = 3\n");
        CPPUNIT_ASSERT_EQUAL(0, symlink((d / "job.sbatch").c_str(), (d / "link.sbatch").c_str()));
        const std::string sys = d / "sys.db", none = d / "none.conf";
        tula_job_plan out;
        auto run = [&](const std::string& script, const char* conf, const char* workload, const char* policy, int nodes) {
            tula_job_query q{};
            q.conf_path = conf ? conf : none.c_str();
            q.system_db = sys.c_str();
            q.home = d.path.c_str();
            q.script_path = script.empty() ? nullptr : script.c_str();
            q.workload = workload;
            q.policy = policy;
            q.nodes = nodes;
            const int rc = tula_plan_job(&q, &out);
            CPPUNIT_ASSERT(std::memchr(out.message, '\0', sizeof out.message) != nullptr);
            return rc;
        };
        CPPUNIT_ASSERT_EQUAL(-1, run(d / "plain.sh", nullptr, nullptr, nullptr, 2));
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "tula-workload"));
        CPPUNIT_ASSERT_EQUAL(-1, run(d / "link.sbatch", nullptr, nullptr, nullptr, 2));  // O_NOFOLLOW
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "symbolic link"));
        CPPUNIT_ASSERT_EQUAL(-1, run(d.path, nullptr, nullptr, nullptr, 2));  // a directory
        CPPUNIT_ASSERT_EQUAL(-1, run(d / "missing.sbatch", nullptr, nullptr, nullptr, 2));
        CPPUNIT_ASSERT_EQUAL(-1, run(d / "job.sbatch", (d / "bad.conf").c_str(), nullptr, nullptr, 2));
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "line 2"));
        CPPUNIT_ASSERT_EQUAL(-1, run(d / "job.sbatch", nullptr, nullptr, "fastest", 2));
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "auto, time, cost"));
        CPPUNIT_ASSERT_EQUAL(-1, run(d / "job.sbatch", nullptr, nullptr, nullptr, 0));
        CPPUNIT_ASSERT_EQUAL(-1, run("", nullptr, "no-at-sign", nullptr, 2));
        CPPUNIT_ASSERT_EQUAL(-1, run("", nullptr, nullptr, nullptr, 2));
        // a very long workload name: refused by the one grammar (tula_check_workload), with a
        // bounded, terminated message
        const std::string longname = std::string(3000, 'a') + "@" + std::string(3000, 'b');
        CPPUNIT_ASSERT_EQUAL(-1, run("", nullptr, longname.c_str(), nullptr, 2));
        CPPUNIT_ASSERT(std::memchr(out.message, '\0', sizeof out.message) != nullptr);
        CPPUNIT_ASSERT_MESSAGE(out.message, contains(out.message, "too long"));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plan_job(nullptr, &out));
        CPPUNIT_ASSERT_EQUAL(-1, tula_plan_job(nullptr, nullptr));
        CPPUNIT_ASSERT_EQUAL(0, run(d / "job.sbatch", nullptr, nullptr, nullptr, 2));  // the good case still works
    }

    void test_parse_mode() {
        char mode[16], err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode(nullptr, mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("auto"), std::string(mode));
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode("", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("auto"), std::string(mode));
        for (const char* v : {"auto", "time", "cost", "off", "dry-run"}) {
            CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode(v, mode, sizeof mode, err, sizeof err));
            CPPUNIT_ASSERT_EQUAL(std::string(v), std::string(mode));
        }
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_mode("TIME", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(std::string("time"), std::string(mode));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("fast", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_MESSAGE(err, contains(err, "auto, time, cost, off, dry-run") && contains(err, "'fast'"));
        CPPUNIT_ASSERT_MESSAGE(err, std::strncmp(err, "tula: ", 6) == 0);
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("auto\n", mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT_MESSAGE(err, !contains(err, "\n"));
        const std::string huge(10000, 'z');
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode(huge.c_str(), mode, sizeof mode, err, sizeof err));
        CPPUNIT_ASSERT(std::strlen(err) < sizeof err);
        char tiny[8];
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("auto", tiny, sizeof tiny, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("bogus", mode, sizeof mode, nullptr, 0));  // no err buffer: no crash
        char small_err[10];
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_mode("bogus", mode, sizeof mode, small_err, sizeof small_err));
        CPPUNIT_ASSERT_EQUAL(size_t(9), std::strlen(small_err));
    }

    void test_parse_epochs_mode() {
        char err[TULA_MSG_MAX];
        CPPUNIT_ASSERT_EQUAL(1, tula_parse_epochs_mode("fixed", err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(0, tula_parse_epochs_mode("follow", err, sizeof err));
        for (const char* bad : {"", "FIXED", "fix", "fixed ", "follow\n"}) {
            CPPUNIT_ASSERT_EQUAL_MESSAGE(bad, -1, tula_parse_epochs_mode(bad, err, sizeof err));
            CPPUNIT_ASSERT_MESSAGE(err, contains(err, "follow") && contains(err, "fixed") && !contains(err, "\n"));
            CPPUNIT_ASSERT(std::strncmp(err, "tula: ", 6) == 0);
        }
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_epochs_mode(nullptr, err, sizeof err));
        CPPUNIT_ASSERT_EQUAL(-1, tula_parse_epochs_mode("bogus", nullptr, 0));  // no err buffer: no crash
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaCApiTest);
