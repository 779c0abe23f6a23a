// Unit tests of the metrics-file reader (tula/metrics.hpp): a file tula-train's MetricsLog
// writes and one as the Python writer writes it are read; every kind of bad line is refused
// with its line number; a summary's parts and part seconds are read and checked; a 100 MB file
// is read in bounded memory.
#include <cppunit/extensions/HelperMacros.h>
#include <sys/resource.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "test_util.hpp"
#include "train/metrics.hpp"
#include "tula/metrics.hpp"

using tula_test::TempDir;

namespace {

// The Python writer's bytes: json.dumps(obj, separators=(",", ":")) + "\n" per object.
const char* kPythonFile =
    "{\"type\":\"run\",\"workload\":\"torch-fmnist-cnn@fashion-mnist\",\"nodes\":1,\"ranks\":2,\"global_batch\":64,"
    "\"epochs\":2,\"train_examples\":60000,\"test_examples\":10000,\"params\":421642,\"optimizer\":\"sgd\","
    "\"predicted_seconds\":30.5,\"job_id\":\"77\",\"hardware_class\":\"cpu\"}\n"
    "{\"type\":\"step\",\"step\":0,\"seconds\":0.05,\"examples\":64}\n"
    "{\"type\":\"step\",\"step\":1,\"seconds\":0.04,\"examples\":64}\n"
    "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":12.5,\"test_accuracy\":0.81,\"train_loss\":0.6,\"noise_scale\":null,"
    "\"noise_observations\":0}\n"
    "{\"type\":\"future\",\"anything\":[1,2]}\n"
    "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":11.5,\"test_accuracy\":0.86,\"train_loss\":null,\"noise_scale\":512.5,"
    "\"noise_observations\":4,\"unknown\":true}\n";

const char* kHeader = "{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":2,\"ranks\":4,\"global_batch\":32}\n";

// The message read_metrics_run gives for `text` ("" when it is accepted).
std::string run_error(const std::string& text) {
    std::istringstream in(text);
    return tula_test::error_of([&] { tula::read_metrics_run(in, "f.jsonl"); });
}

long peak_rss_kib() {
    struct rusage u {};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

}  // namespace

class LibtulaMetricsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaMetricsTest);
    CPPUNIT_TEST(test_reads_tula_train_metrics_log);
    CPPUNIT_TEST(test_reads_python_writer_file);
    CPPUNIT_TEST(test_refuses_bad_lines_with_line_numbers);
    CPPUNIT_TEST(test_resume_headers);
    CPPUNIT_TEST(test_profile_lines);
    CPPUNIT_TEST(test_profile_optional_fields_and_allreduce_lines);
    CPPUNIT_TEST(test_summary_line_gives_the_runs_noise_scale);
    CPPUNIT_TEST(test_summary_parts);
    CPPUNIT_TEST(test_100_mb_file_in_bounded_memory);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_reads_tula_train_metrics_log() {
        TempDir d("metrics");
        const std::string f = d / "m.jsonl";
        {
            tula::train::MetricsLog log(f, false);
            log.write({{"type", "run"}, {"workload", "lenet5@fashion-mnist"}, {"nodes", 1}, {"model", "lenet5"},
                       {"data", "fashion-mnist"}, {"params", 61706}, {"train_examples", 512}, {"test_examples", 256},
                       {"global_batch", 64}, {"ranks", 1}, {"epochs", 2}, {"steps_per_epoch", 8}, {"seed", 1},
                       {"optimizer", "sgd"}, {"peak_lr", 0.05}, {"resumed", false}, {"resumed_at_step", 0},
                       {"config_hash", 123}});
            int64_t t = 0;
            for (int e = 1; e <= 2; ++e) {
                for (int s = 0; s < 8; ++s, ++t) {
                    tula::train::StepRecord r;
                    r.step = t;
                    r.epoch = e;
                    r.step_in_epoch = s;
                    r.seconds = 0.01;
                    r.examples = 64;
                    r.loss = 1.0 / (t + 1);
                    log.step(r);
                }
                tula::train::EpochResult er;
                er.epoch = e;
                er.seconds = 0.5 * e;
                er.test_accuracy = 0.5 + 0.1 * e;
                er.train_loss = std::nan("");  // a diverged loss is written as null
                er.noise_scale = e == 2 ? 300 : 0;  // 0: not measured (null)
                log.epoch(er);
            }
        }
        const tula::MetricsRun m = tula::read_metrics_run_file(f);
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5@fashion-mnist"), m.run.workload);
        CPPUNIT_ASSERT_EQUAL(int64_t(16), m.steps);
        CPPUNIT_ASSERT_EQUAL(2, m.run.epochs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, m.run.measured_seconds, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.7, m.run.test_accuracy, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(300.0, m.run.noise_scale, 1e-12);
        CPPUNIT_ASSERT(std::isnan(m.run.epoch_train_loss[0]));
        CPPUNIT_ASSERT_EQUAL(int64_t(61706), m.header.params);
        CPPUNIT_ASSERT_EQUAL(std::string("sgd"), m.run.optimizer);
    }

    void test_reads_python_writer_file() {
        std::istringstream in(kPythonFile);
        const tula::MetricsRun m = tula::read_metrics_run(in, "py.jsonl");
        const tula::RunRecord& r = m.run;
        CPPUNIT_ASSERT_EQUAL(std::string("torch-fmnist-cnn@fashion-mnist"), r.workload);
        CPPUNIT_ASSERT_EQUAL(1, r.nodes);
        CPPUNIT_ASSERT_EQUAL(2, r.ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(64, r.global_batch);
        CPPUNIT_ASSERT_EQUAL(2, r.epochs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(24.0, r.measured_seconds, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.86, r.test_accuracy, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(512.5, r.noise_scale, 1e-12);
        CPPUNIT_ASSERT_EQUAL(int64_t(4), r.noise_observations);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(30.5, r.predicted_seconds, 1e-12);
        CPPUNIT_ASSERT_EQUAL(std::string("77"), r.job_id);
        CPPUNIT_ASSERT_EQUAL(std::string("cpu"), r.hardware_class);
        CPPUNIT_ASSERT_EQUAL(int64_t(60000), r.train_examples);
        CPPUNIT_ASSERT_EQUAL(size_t(2), r.epoch_seconds.size());
        CPPUNIT_ASSERT(std::isnan(r.epoch_train_loss[1]));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.6, r.epoch_train_loss[0], 1e-12);
        CPPUNIT_ASSERT_EQUAL(int64_t(421642), m.header.params);
    }

    void test_refuses_bad_lines_with_line_numbers() {
        const std::string h = kHeader;
        const std::string step0 = "{\"type\":\"step\",\"step\":0,\"seconds\":0.1,\"examples\":32}\n";
        const std::string ep1 = "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n";
        CPPUNIT_ASSERT_EQUAL(std::string(), run_error(h + step0 + ep1));  // the control: accepted
        struct Case {
            std::string text, needle;
        };
        const Case cases[] = {
            {h + step0 + "{\"type\":\"step\",\"step\":1,\"sec", "f.jsonl:3: not valid JSON"},  // truncated
            {h + "{\"type\":\"step\",\"step\":\"1\",\"seconds\":0.1,\"examples\":32}\n", "f.jsonl:2: \"step\" line: field \"step\" must be an integer"},
            {h + step0 + "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":-2,\"test_accuracy\":0.5}\n", "f.jsonl:3: \"epoch\" line: field \"seconds\" must be a finite number > 0"},
            {h + "{\"type\":\"step\",\"step\":0,\"seconds\":NaN,\"examples\":32}\n", "f.jsonl:2: not valid JSON"},
            {h + ep1 + "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":2,\"test_accuracy\":null}\n", "f.jsonl:3: \"epoch\" line: field \"test_accuracy\""},
            {h + step0 + step0 + ep1, "f.jsonl:3: \"step\" line: step 0 is not above the previous step number 0"},
            {h + ep1 + "{\"type\":\"epoch\",\"epoch\":3,\"seconds\":2,\"test_accuracy\":0.5}\n", "f.jsonl:3: \"epoch\" line: epoch 3 does not follow epoch 1"},
            {step0 + ep1, "f.jsonl:1: the first line must be the \"run\" header"},
            {h + ep1 + "{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":2,\"ranks\":4,\"global_batch\":64,\"resumed\":true}\n", "f.jsonl:3: \"run\" line: the resume's"},
            {h + ep1 + h, "f.jsonl:3: \"run\" line: a second header must be a resume"},
            {h + "{\"type\":\"step\",\"step\":0,\"seconds\":0.1,\"examples\":-32}\n" + ep1, "f.jsonl:2: \"step\" line: field \"examples\""},
            {"{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":2,\"ranks\":3,\"global_batch\":32}\n" + ep1, "f.jsonl:1: \"run\" line: ranks 3 must be a multiple of nodes 2"},
            {h + step0, "f.jsonl: no \"epoch\" line"},
            {h + "[1,2]\n", "f.jsonl:2: not a JSON object"},
            {h + std::string(70000, ' ') + "\n", "f.jsonl:2: the line is longer than 65536 bytes"},
            {"", "f.jsonl: the file is empty"},
        };
        for (const Case& c : cases) {
            const std::string m = run_error(c.text);
            CPPUNIT_ASSERT_MESSAGE("expected '" + c.needle + "', got '" + m + "'", tula_test::contains(m, c.needle));
            CPPUNIT_ASSERT_MESSAGE(m, m.rfind("tula: ", 0) == 0);
        }
    }

    void test_resume_headers() {
        const std::string h = kHeader;
        const std::string resume =
            "{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":2,\"ranks\":4,\"global_batch\":32,\"resumed\":true,"
            "\"resumed_at_step\":5}\n";
        const std::string step = "{\"type\":\"step\",\"step\":%d,\"seconds\":0.1,\"examples\":32}\n";
        auto st = [&](int n) {
            char b[128];
            std::snprintf(b, sizeof b, step.c_str(), n);
            return std::string(b);
        };
        const std::string ep1 = "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n";
        const std::string ep2 = "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":3,\"test_accuracy\":0.6}\n";
        // a killed job's steps 5 to 7 are done again after the resume with 5 steps done (steps
        // count from 0, as tula-train's: the next step is number 5)
        std::istringstream in(h + st(5) + st(6) + st(7) + ep1 + resume + st(5) + st(6) + ep2);
        const tula::MetricsRun m = tula::read_metrics_run(in, "r.jsonl");
        CPPUNIT_ASSERT_EQUAL(1, m.resumes);
        CPPUNIT_ASSERT_EQUAL(2, m.run.epochs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5.0, m.run.measured_seconds, 1e-12);
        // a step below resumed_at_step after the resume is refused
        const std::string e = run_error(h + ep1 + resume + st(4) + ep2);
        CPPUNIT_ASSERT_MESSAGE(e, tula_test::contains(e, "f.jsonl:4: \"step\" line: step 4 is not above"));
    }

    void test_profile_lines() {
        std::istringstream in(std::string("{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":1,\"ranks\":1}\n") +
                              "{\"type\":\"profile\",\"local_batch\":16,\"seconds\":0.02,\"steps\":10}\n"
                              "{\"type\":\"profile\",\"local_batch\":32,\"seconds\":0.035,\"steps\":12}");  // no last '\n'
        const tula::MetricsProfile p = tula::read_metrics_profile(in, "p.jsonl");
        CPPUNIT_ASSERT_EQUAL(size_t(2), p.lines.size());
        CPPUNIT_ASSERT_EQUAL(32, p.lines[1].local_batch);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.035, p.lines[1].seconds, 1e-15);
        CPPUNIT_ASSERT_EQUAL(int64_t(12), p.lines[1].steps);
        std::istringstream bad(std::string("{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":1,\"ranks\":1}\n") +
                               "{\"type\":\"profile\",\"local_batch\":0,\"seconds\":0.02,\"steps\":10}\n");
        tula_test::assert_throws_with([&] { tula::read_metrics_profile(bad, "p.jsonl"); },
                                      "p.jsonl:2: \"profile\" line: field \"local_batch\"");
    }

    // tula-train --profile-compute's optional fields, and --profile-allreduce's lines and
    // header without a workload; the kind of each file.
    void test_profile_optional_fields_and_allreduce_lines() {
        TempDir d("metrics-kinds");
        const std::string pf = d / "p.jsonl", af = d / "a.jsonl", rf = d / "r.jsonl", nf = d / "n.jsonl";
        std::ofstream(pf) << "{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":2,\"ranks\":4,\"host\":\"n1\","
                             "\"activation_floats\":99,\"params\":10,\"train_examples\":100}\n"
                             "{\"type\":\"profile\",\"local_batch\":8,\"seconds\":0.5,\"steps\":3,\"threads\":2,"
                             "\"startup_seconds\":0.25,\"synced_seconds\":0.75}\n"
                             "{\"type\":\"profile\",\"local_batch\":16,\"seconds\":1,\"steps\":3}\n";
        std::ofstream(af) << "{\"type\":\"run\",\"nodes\":2,\"ranks\":2}\n"
                             "{\"type\":\"allreduce\",\"bytes\":4096,\"seconds\":0.001,\"iters\":20}\n";
        std::ofstream(rf) << kHeader << "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n";
        std::ofstream(nf) << kHeader;
        CPPUNIT_ASSERT(tula::metrics_file_kind(pf) == tula::MetricsKind::Profile);
        CPPUNIT_ASSERT(tula::metrics_file_kind(af) == tula::MetricsKind::Allreduce);
        CPPUNIT_ASSERT(tula::metrics_file_kind(rf) == tula::MetricsKind::Run);
        tula_test::assert_throws_with([&] { tula::metrics_file_kind(nf); }, "nothing to record");
        const tula::MetricsProfile p = tula::read_metrics_profile_file(pf);
        CPPUNIT_ASSERT_EQUAL(std::string("n1"), p.header.host);
        CPPUNIT_ASSERT_EQUAL(int64_t(99), p.header.workload_row()->activation_floats);
        CPPUNIT_ASSERT_EQUAL(2, p.lines[0].threads);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25, p.lines[0].startup_seconds, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.75, p.lines[0].synced_seconds, 0);
        CPPUNIT_ASSERT_EQUAL(1, p.lines[1].threads);
        CPPUNIT_ASSERT(std::isnan(p.lines[1].startup_seconds) && std::isnan(p.lines[1].synced_seconds));
        const tula::MetricsProfile a = tula::read_metrics_allreduce_file(af);
        CPPUNIT_ASSERT_EQUAL(size_t(1), a.allreduce.size());
        CPPUNIT_ASSERT_EQUAL(int64_t(4096), a.allreduce[0].bytes);
        CPPUNIT_ASSERT_EQUAL(int64_t(20), a.allreduce[0].iters);
        CPPUNIT_ASSERT_EQUAL(1, a.header.ranks_per_node());
        // a compute profile's header needs its workload; an allreduce line needs its bytes
        std::ofstream(af) << "{\"type\":\"run\",\"nodes\":2,\"ranks\":2}\n{\"type\":\"allreduce\",\"seconds\":1,\"iters\":1}\n";
        tula_test::assert_throws_with([&] { tula::read_metrics_allreduce_file(af); }, "a.jsonl:2: \"allreduce\" line");
        std::ofstream(pf) << "{\"type\":\"run\",\"nodes\":1,\"ranks\":1}\n"
                             "{\"type\":\"profile\",\"local_batch\":8,\"seconds\":0.5,\"steps\":3}\n";
        tula_test::assert_throws_with([&] { tula::read_metrics_profile_file(pf); }, "\"workload\"");
    }

    // A "summary" line's noise scale (the run's median) and observations replace the epochs'
    // (the last epoch's estimate, the sum); null means none.
    void test_summary_line_gives_the_runs_noise_scale() {
        const std::string epochs = "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5,"
                                   "\"noise_scale\":300,\"noise_observations\":4}\n"
                                   "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":3,\"test_accuracy\":0.6,"
                                   "\"noise_scale\":500,\"noise_observations\":5}\n";
        std::istringstream plain(kHeader + epochs);
        const tula::MetricsRun a = tula::read_metrics_run(plain, "a.jsonl");
        CPPUNIT_ASSERT_DOUBLES_EQUAL(500.0, a.run.noise_scale, 0);
        CPPUNIT_ASSERT_EQUAL(int64_t(9), a.run.noise_observations);
        std::istringstream with(kHeader + epochs +
                                "{\"type\":\"summary\",\"noise_scale\":400,\"noise_observations\":7,\"train_seconds\":5}\n");
        const tula::MetricsRun b = tula::read_metrics_run(with, "b.jsonl");
        CPPUNIT_ASSERT_DOUBLES_EQUAL(400.0, b.run.noise_scale, 0);
        CPPUNIT_ASSERT_EQUAL(int64_t(7), b.run.noise_observations);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5.0, b.run.measured_seconds, 1e-12);
        std::istringstream none(kHeader + epochs + "{\"type\":\"summary\",\"noise_scale\":null,\"noise_observations\":0}\n");
        const tula::MetricsRun c = tula::read_metrics_run(none, "c.jsonl");
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, c.run.noise_scale, 0);
        CPPUNIT_ASSERT_EQUAL(int64_t(0), c.run.noise_observations);
    }

    // A "summary" line's "parts" and "part_seconds" (a run stopped and resumed): read when
    // valid, the last summary after the last resume header counting; without one, one part, or
    // one per process that wrote the file (its resume headers); bad values are refused naming
    // the line and the field.
    void test_summary_parts() {
        const std::string epochs = "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n"
                                   "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":3,\"test_accuracy\":0.6}\n";
        const std::string summary = "{\"type\":\"summary\",\"train_seconds\":5,";
        auto read = [&](const std::string& text) {
            std::istringstream in(text);
            return tula::read_metrics_run(in, "f.jsonl").run;
        };
        const tula::RunRecord two = read(kHeader + epochs + summary + "\"parts\":2,\"part_seconds\":[3.5,1.5]}\n");
        CPPUNIT_ASSERT_EQUAL(2, two.parts);
        CPPUNIT_ASSERT(two.part_seconds == std::vector<double>({3.5, 1.5}));
        const tula::RunRecord one = read(kHeader + epochs + summary + "\"parts\":1,\"part_seconds\":[5]}\n");
        CPPUNIT_ASSERT_EQUAL(1, one.parts);
        CPPUNIT_ASSERT(one.part_seconds.empty());  // one part: its seconds are measured_seconds
        const tula::RunRecord plain = read(kHeader + epochs);
        CPPUNIT_ASSERT_EQUAL(1, plain.parts);
        CPPUNIT_ASSERT(plain.part_seconds.empty());
        const tula::RunRecord counted = read(kHeader + epochs + summary + "\"parts\":3}\n");
        CPPUNIT_ASSERT_EQUAL(3, counted.parts);
        CPPUNIT_ASSERT(counted.part_seconds.empty());
        // a metrics file appended across a resume: two parts, their seconds not known
        const std::string resume = "{\"type\":\"run\",\"workload\":\"m@d\",\"nodes\":2,\"ranks\":4,\"global_batch\":32,"
                                   "\"resumed\":true,\"resumed_at_step\":5}\n";
        const std::string ep1 = "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n";
        const std::string ep2 = "{\"type\":\"epoch\",\"epoch\":2,\"seconds\":3,\"test_accuracy\":0.6}\n";
        const tula::RunRecord resumed = read(kHeader + ep1 + resume + ep2);
        CPPUNIT_ASSERT_EQUAL(2, resumed.parts);
        CPPUNIT_ASSERT(resumed.part_seconds.empty());
        // tula.Metrics writes a summary as each part closes: the last one holds every part
        const std::string s1 = "{\"type\":\"summary\",\"parts\":1,\"part_seconds\":[2]}\n";
        const std::string s2 = "{\"type\":\"summary\",\"parts\":2,\"part_seconds\":[2,3]}\n";
        const tula::RunRecord python = read(kHeader + ep1 + s1 + resume + ep2 + s2);
        CPPUNIT_ASSERT_EQUAL(2, python.parts);
        CPPUNIT_ASSERT(python.part_seconds == std::vector<double>({2, 3}));
        // a part killed before its summary: the earlier part's summary does not count for the run
        const tula::RunRecord killed = read(kHeader + ep1 + s1 + resume + ep2);
        CPPUNIT_ASSERT_EQUAL(2, killed.parts);
        CPPUNIT_ASSERT(killed.part_seconds.empty());
        // bad values
        const std::string at = "f.jsonl:4: \"summary\" line: field ";
        const struct {
            const char* fields;
            const char* needle;
        } bad[] = {
            {"\"parts\":0}", "\"parts\" must be an integer in 1.."},
            {"\"parts\":1.5}", "\"parts\" must be an integer >= 1"},
            {"\"parts\":\"2\"}", "\"parts\" must be an integer >= 1"},
            {"\"parts\":2,\"part_seconds\":[1]}", "\"part_seconds\" has 1 values, \"parts\" is 2"},
            {"\"parts\":2,\"part_seconds\":[1,2,3]}", "\"part_seconds\" has 3 values, \"parts\" is 2"},
            {"\"part_seconds\":[1,2]}", "\"part_seconds\" has 2 values, \"parts\" is 1 (absent)"},
            {"\"parts\":2,\"part_seconds\":[1,-2]}", "\"part_seconds\" must hold finite numbers >= 0, not -2"},
            {"\"parts\":2,\"part_seconds\":[1,null]}", "\"part_seconds\" must hold finite numbers >= 0, not null"},
            {"\"parts\":2,\"part_seconds\":[1,\"2\"]}", "\"part_seconds\" must hold finite numbers >= 0"},
            {"\"parts\":2,\"part_seconds\":5}", "\"part_seconds\" must be a list of seconds"},
            {"\"parts\":2,\"part_seconds\":[]}", "\"part_seconds\" must be a list of seconds"},
        };
        for (const auto& b : bad) {
            const std::string e = run_error(kHeader + epochs + summary + b.fields + "\n");
            CPPUNIT_ASSERT_MESSAGE(std::string(b.fields) + " -> " + e, tula_test::contains(e, at + b.needle));
        }
    }

    void test_100_mb_file_in_bounded_memory() {
        TempDir d("metrics-big");
        const std::string f = d / "big.jsonl";
        int64_t steps = 0;
        {
            std::ofstream o(f, std::ios::binary);
            o << kHeader;
            std::string line;
            const std::string pad(60, 'x');  // an unknown field: lines of about 120 bytes
            for (int64_t bytes = 0; bytes < 100 * 1000 * 1000; bytes += static_cast<int64_t>(line.size()), ++steps) {
                line = "{\"type\":\"step\",\"step\":" + std::to_string(steps) +
                       ",\"seconds\":0.0125,\"examples\":32,\"note\":\"" + pad + "\"}\n";
                o << line;
            }
            o << "{\"type\":\"epoch\",\"epoch\":1,\"seconds\":2,\"test_accuracy\":0.5}\n";
        }
        // in a child process, whose peak RSS starts at its RSS at the fork, not at this
        // process's earlier peaks
        const pid_t pid = fork();
        if (pid == 0) {
            int rc = 3;
            try {
                const long before = peak_rss_kib();
                const tula::MetricsRun m = tula::read_metrics_run_file(f);
                const long grown = peak_rss_kib() - before;
                std::printf("     100 MB file: %lld steps, peak RSS grew by %ld KiB\n", static_cast<long long>(m.steps), grown);
                rc = m.steps != steps ? 2 : grown >= 32 * 1024 ? 1 : 0;
            } catch (const std::exception& e) {
                std::printf("     %s\n", e.what());
            }
            std::fflush(stdout);
            _exit(rc);
        }
        int status = 0;
        CPPUNIT_ASSERT(pid > 0 && waitpid(pid, &status, 0) == pid);
        CPPUNIT_ASSERT_MESSAGE("exit status " + std::to_string(status) + " (1: RSS grew by 32 MiB or more, 2: wrong step count, 3: error)",
                               WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaMetricsTest);
