// Unit tests of the batch-script scanner parse_train_command (workload.hpp).
#include <cppunit/extensions/HelperMacros.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "tula/workload.hpp"

namespace {

// CPU seconds parse_train_command(script) takes (tula_test::thread_cpu_seconds), measured in a
// child process (tula_test::seconds_in_child): +infinity when it has not answered within `limit`
// seconds of wall time, so that a quadratic scanner fails the bound instead of stalling the suite.
// *found: the result's `found` (parsed again here when the child was in time).
double parse_seconds(const std::string& script, double limit, bool* found) {
    const double s = tula_test::seconds_in_child(
        [&] {
            const double t = tula_test::thread_cpu_seconds();
            tula::parse_train_command(script);
            return tula_test::thread_cpu_seconds() - t;
        },
        limit);
    if (std::isfinite(s)) *found = tula::parse_train_command(script).found;
    return s;
}

// `unit` repeated to `bytes` bytes (the last copy cut short).
std::string repeat(const std::string& unit, size_t bytes) {
    std::string s;
    s.reserve(bytes + unit.size());
    while (s.size() < bytes) s += unit;
    s.resize(bytes);
    return s;
}

}  // namespace

// The tula-train command that `script` runs; fails the test when none is found.
static tula::TrainCommand found_command(const std::string& script) {
    const auto c = tula::parse_train_command(script);
    CPPUNIT_ASSERT_MESSAGE("no tula-train command found in: " + script, c.found);
    return c;
}

// The --epochs of that command (0: none given).
static int found_epochs(const std::string& script) { return found_command(script).epochs; }

class LibtulaWorkloadTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaWorkloadTest);
    CPPUNIT_TEST(test_workload_name);
    CPPUNIT_TEST(test_steps_per_epoch);
    CPPUNIT_TEST(test_plain);
    CPPUNIT_TEST(test_mpirun_prefix_and_path);
    CPPUNIT_TEST(test_continuation_and_comments);
    CPPUNIT_TEST(test_flag_equals_value_and_quotes);
    CPPUNIT_TEST(test_not_found);
    CPPUNIT_TEST(test_variables);
    CPPUNIT_TEST(test_operators_end_the_command);
    CPPUNIT_TEST(test_escaped_backslash_at_end);
    CPPUNIT_TEST(test_random_shapes);
    CPPUNIT_TEST(test_limit_train);
    CPPUNIT_TEST(test_limit_test_and_val_split);
    CPPUNIT_TEST(test_directive);
    CPPUNIT_TEST(test_directive_malformed);
    CPPUNIT_TEST(test_pathological_scripts_are_linear);
    CPPUNIT_TEST(test_large_scripts_still_parse);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_workload_name() {
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5@fashion-mnist"), tula::workload_name("lenet5", "fashion-mnist"));
        tula::TrainCommand c;
        c.model = "m";
        c.dataset = "d";
        CPPUNIT_ASSERT_EQUAL(std::string("m@d"), c.workload());
    }

    // Steps per epoch against the batches a trainer's loop forms: a batch of B from each offset
    // 0, B, 2B, ... below D, the last one kept only when it is full (drop) or always (keep).
    void test_steps_per_epoch() {
        auto loop = [](int64_t D, int64_t B, bool keep) {
            int64_t steps = 0;
            for (int64_t at = 0; at < D; at += B)
                if (keep || at + B <= D) ++steps;
            return steps;
        };
        std::mt19937 rng(5);
        for (int i = 0; i < 2000; ++i) {
            const int64_t B = 1 + static_cast<int64_t>(rng() % 5000);
            const int64_t D = 1 + static_cast<int64_t>(rng() % 200000);
            for (bool keep : {false, true}) {
                const auto last = keep ? tula::LastBatch::Keep : tula::LastBatch::Drop;
                CPPUNIT_ASSERT_EQUAL(double(loop(D, B, keep)), tula::steps_per_epoch(double(D), double(B), last));
            }
        }
        // ImageNet at MLPerf's global batches: one step apart when B does not divide D
        CPPUNIT_ASSERT_EQUAL(392.0, tula::steps_per_epoch(1281167, 3264, tula::LastBatch::Drop));
        CPPUNIT_ASSERT_EQUAL(393.0, tula::steps_per_epoch(1281167, 3264, tula::LastBatch::Keep));
        CPPUNIT_ASSERT_EQUAL(1000.0, tula::steps_per_epoch(64000, 64, tula::LastBatch::Keep));
        CPPUNIT_ASSERT_EQUAL(0.0, tula::steps_per_epoch(0, 64, tula::LastBatch::Keep));
        CPPUNIT_ASSERT_EQUAL(0.0, tula::steps_per_epoch(100, 0, tula::LastBatch::Drop));
        CPPUNIT_ASSERT_EQUAL(std::string("keep"), std::string(tula::last_batch_name(tula::LastBatch::Keep)));
        CPPUNIT_ASSERT_EQUAL(std::string("drop"), std::string(tula::last_batch_name(tula::LastBatch::Drop)));
    }

    void test_plain() {
        const auto c = tula::parse_train_command("#!/bin/bash\ntula-train --model lenet5 --data fashion-mnist --epochs 12\n");
        CPPUNIT_ASSERT(c.found);
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5"), c.model);
        CPPUNIT_ASSERT_EQUAL(std::string("fashion-mnist"), c.dataset);
        CPPUNIT_ASSERT_EQUAL(12, c.epochs);
        CPPUNIT_ASSERT_EQUAL(0, c.batch_size);
        // --data absent: fashion-mnist
        const auto d = tula::parse_train_command("tula-train --model fmnist-cnn --batch-size 256");
        CPPUNIT_ASSERT(d.found);
        CPPUNIT_ASSERT_EQUAL(std::string("fashion-mnist"), d.dataset);
        CPPUNIT_ASSERT_EQUAL(0, d.epochs);
        CPPUNIT_ASSERT_EQUAL(256, d.batch_size);
    }

    void test_mpirun_prefix_and_path() {
        const std::string s =
            "#!/bin/bash\n#SBATCH --job-name=x\n#SBATCH --ntasks-per-node=1\n"
            "mpirun --allow-run-as-root -np \"${SLURM_JOB_NUM_NODES:-1}\" --map-by node "
            "/opt/tula/bin/tula-train --model lenet5 --data fashion-mnist --epochs 12\n";
        const auto c = found_command(s);
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5"), c.model);
        CPPUNIT_ASSERT_EQUAL(12, c.epochs);
        // a word merely ending in "tula-train" is not the trainer
        CPPUNIT_ASSERT(!tula::parse_train_command("my-tula-train --model lenet5\n").found);
        // --model before tula-train belongs to another program
        CPPUNIT_ASSERT(!tula::parse_train_command("wrapper --model lenet5 tula-train --epochs 3\n").found);
    }

    void test_continuation_and_comments() {
        // The repository's example batch script, as written.
        const std::string s =
            "#!/bin/bash\n"
            "# tula-train --model commented-out --epochs 99\n"
            "#SBATCH --output=fashion-mnist-%j.out\n"
            "\n"
            "mpirun --allow-run-as-root --oversubscribe -np \"${SLURM_JOB_NUM_NODES:-1}\" --map-by node --bind-to none \\\n"
            "    tula-train --model lenet5 \\\r\n"
            "        --data fashion-mnist \\\n"
            "        --epochs 12   # twelve epochs\n"
            "tula-train --model other --epochs 1\n";
        const auto c = found_command(s);
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5"), c.model);
        CPPUNIT_ASSERT_EQUAL(std::string("fashion-mnist"), c.dataset);
        CPPUNIT_ASSERT_EQUAL(12, c.epochs);
        // an invocation without --model (e.g. --list-models) is skipped
        const auto d = tula::parse_train_command("tula-train --list-models\nsrun tula-train --model vgg11 --epochs 2\n");
        CPPUNIT_ASSERT(d.found);
        CPPUNIT_ASSERT_EQUAL(std::string("vgg11"), d.model);
        CPPUNIT_ASSERT_EQUAL(2, d.epochs);
    }

    void test_flag_equals_value_and_quotes() {
        const auto c = tula::parse_train_command(
            "exec tula-train --model=resnet18 --data='fashion-mnist' --epochs=\"30\" --batch-size=512 --lr 0.1\n");
        CPPUNIT_ASSERT(c.found);
        CPPUNIT_ASSERT_EQUAL(std::string("resnet18"), c.model);
        CPPUNIT_ASSERT_EQUAL(std::string("fashion-mnist"), c.dataset);
        CPPUNIT_ASSERT_EQUAL(30, c.epochs);
        CPPUNIT_ASSERT_EQUAL(512, c.batch_size);
    }

    void test_not_found() {
        CPPUNIT_ASSERT(!tula::parse_train_command("").found);
        CPPUNIT_ASSERT(!tula::parse_train_command("#!/bin/sh\npython train.py --model lenet5\n").found);
        CPPUNIT_ASSERT(!tula::parse_train_command("# tula-train --model lenet5\n").found);
        CPPUNIT_ASSERT(!tula::parse_train_command("tula-train --model\n").found);       // no value
        CPPUNIT_ASSERT(!tula::parse_train_command("tula-train --model ; ls\n").found);  // no value
        CPPUNIT_ASSERT(!tula::parse_train_command("tula-train --model le/net\n").found);
        CPPUNIT_ASSERT(!tula::parse_train_command("tula-train --model lenet5 --data '../x y'\n").found);
        CPPUNIT_ASSERT(!tula::parse_train_command(std::string("tula-train --model \x01\n")).found);
        // beyond the first 1 MiB is not read
        std::string big(1 << 20, '\n');
        big += "tula-train --model lenet5\n";
        CPPUNIT_ASSERT(!tula::parse_train_command(big).found);
    }

    void test_variables() {
        // a $VAR model cannot be known
        CPPUNIT_ASSERT(!tula::parse_train_command("tula-train --model \"$MODEL\" --epochs 3\n").found);
        // non-numeric epochs and batch are treated as absent
        for (const char* script : {"tula-train --model lenet5 --epochs $EPOCHS --batch-size=${B}\n",
                                   "tula-train --model lenet5 --epochs -3 --batch-size 1e3\n"}) {
            CPPUNIT_ASSERT_EQUAL(0, found_epochs(script));
            CPPUNIT_ASSERT_EQUAL(0, tula::parse_train_command(script).batch_size);
        }
    }

    void test_operators_end_the_command() {
        CPPUNIT_ASSERT_EQUAL(0, found_epochs("tula-train --model lenet5 && echo --epochs 5\n"));
        CPPUNIT_ASSERT_EQUAL(4, found_epochs("cd /tmp; tula-train --model lenet5 --epochs 4 > log 2>&1\n"));
        // a `#` inside a line starts a comment only at the start of a word
        CPPUNIT_ASSERT_EQUAL(0, found_epochs("tula-train --model lenet5 # --epochs 5\n"));
        const auto f = tula::parse_train_command("tula-train --model=lenet5#x --epochs 5\n");
        CPPUNIT_ASSERT(!f.found);  // '#' inside the word is part of it: not a plain name
    }

    // An odd number of trailing backslashes continues the line; an even number is literal.
    void test_escaped_backslash_at_end() {
        CPPUNIT_ASSERT_EQUAL(3, found_epochs("tula-train --model lenet5 --lr 0.1\\\\\\\n  --epochs 3\n"));
        CPPUNIT_ASSERT_EQUAL(0, found_epochs("tula-train --model lenet5 --lr 0.1\\\\\n  --epochs 3\n"));
    }

    // Scripts generated at random in every supported shape; the values written are the truth.
    void test_random_shapes() {
        std::mt19937 rng(12345);
        const std::vector<std::string> models = {"lenet5", "fmnist-cnn", "resnet18", "mobilenetv3-small", "a.b_c"};
        const std::vector<std::string> data = {"fashion-mnist", "cifar10", "mnist"};
        const std::vector<std::string> prefixes = {"",
                                                   "srun ",
                                                   "mpirun -np 4 ",
                                                   "mpirun --allow-run-as-root -np \"${N:-1}\" --map-by node ",
                                                   "exec ",
                                                   "time "};
        const std::vector<std::string> paths = {"tula-train", "./tula-train", "/usr/local/bin/tula-train",
                                                "\"$HOME/bin\"/tula-train"};
        for (int trial = 0; trial < 300; ++trial) {
            const std::string model = models[rng() % models.size()];
            const bool with_data = rng() % 2;
            const std::string ds = data[rng() % data.size()];
            const bool with_epochs = rng() % 2;
            const int epochs = 1 + static_cast<int>(rng() % 200);
            const bool with_batch = rng() % 2;
            const int batch = 1 + static_cast<int>(rng() % 4096);
            std::vector<std::pair<std::string, std::string>> flags = {{"--model", model}, {"--lr", "0.05"}};
            if (with_data) flags.push_back({"--data", ds});
            if (with_epochs) flags.push_back({"--epochs", std::to_string(epochs)});
            if (with_batch) flags.push_back({"--batch-size", std::to_string(batch)});
            std::shuffle(flags.begin(), flags.end(), rng);
            std::string cmd = prefixes[rng() % prefixes.size()] + paths[rng() % paths.size()];
            for (const auto& f : flags) {
                const bool cont = rng() % 3 == 0;
                if (cont) cmd += " \\\n   ";
                switch (rng() % 3) {
                    case 0: cmd += " " + f.first + " " + f.second; break;
                    case 1: cmd += " " + f.first + "=" + f.second; break;
                    default: cmd += " " + f.first + " '" + f.second + "'"; break;
                }
            }
            std::string script = "#!/bin/bash\n#SBATCH -N 1\n# comment\necho start\n";
            if (rng() % 2) script += "# tula-train --model decoy --epochs 7\n";
            script += cmd + (rng() % 2 ? "  # trailing comment\n" : "\n");
            script += "echo done\n";
            const tula::TrainCommand c = tula::parse_train_command(script);
            CPPUNIT_ASSERT_MESSAGE(script, c.found);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(script, model, c.model);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(script, with_data ? ds : std::string("fashion-mnist"), c.dataset);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(script, with_epochs ? epochs : 0, c.epochs);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(script, with_batch ? batch : 0, c.batch_size);
        }
    }

    // --limit-train N in both forms (the examples per epoch the job trains on); absent, 0,
    // not a plain count, or beyond 10^8: 0 (all). It consumes its value like the others.
    void test_limit_train() {
        const auto a = tula::parse_train_command("tula-train --model lenet5 --limit-train 6000 --epochs 3\n");
        CPPUNIT_ASSERT(a.found);
        CPPUNIT_ASSERT_EQUAL(6000, a.limit_train);
        CPPUNIT_ASSERT_EQUAL(3, a.epochs);
        const auto b = tula::parse_train_command("srun tula-train --limit-train=12345 \\\n  --model=fmnist-cnn\n");
        CPPUNIT_ASSERT(b.found);
        CPPUNIT_ASSERT_EQUAL(12345, b.limit_train);
        CPPUNIT_ASSERT_EQUAL(std::string("fmnist-cnn"), b.model);
        for (const char* v : {"", " 0", " $N", " -5", " 1e4", " 100000001", "=", "=abc"}) {
            const auto c = tula::parse_train_command(std::string("tula-train --model lenet5 --limit-train") + v + "\n");
            CPPUNIT_ASSERT_MESSAGE(v, c.found);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, 0, c.limit_train);
        }
        // a value word is consumed: --limit-train --epochs 4 leaves --epochs unread
        const auto d = tula::parse_train_command("tula-train --model lenet5 --limit-train --epochs 4\n");
        CPPUNIT_ASSERT_EQUAL(0, d.limit_train);
        CPPUNIT_ASSERT_EQUAL(0, d.epochs);
        // another program's --limit-train, or one after an operator, is not tula-train's
        CPPUNIT_ASSERT_EQUAL(0, tula::parse_train_command("tula-train --model lenet5; x --limit-train 5\n").limit_train);
        // --limit-training is another flag
        CPPUNIT_ASSERT_EQUAL(0, tula::parse_train_command("tula-train --model lenet5 --limit-training 5\n").limit_train);
    }

    // --limit-test N and --val-split N, read as --limit-train is, and the examples of the
    // line's epochs (EpochExamples) against the arithmetic by hand.
    void test_limit_test_and_val_split() {
        const auto a = tula::parse_train_command(
            "tula-train --model lenet5 --limit-train 6000 --limit-test=512 --val-split 1000 --epochs 3\n");
        CPPUNIT_ASSERT(a.found);
        CPPUNIT_ASSERT_EQUAL(512, a.limit_test);
        CPPUNIT_ASSERT_EQUAL(1000, a.val_split);
        CPPUNIT_ASSERT_EQUAL(3, a.epochs);
        tula::Workload w;
        w.train_examples = 60000;
        w.test_examples = 10000;
        const tula::EpochExamples e = a.epoch_examples();
        CPPUNIT_ASSERT_EQUAL(int64_t(6000), e.limited_train(w));
        CPPUNIT_ASSERT_EQUAL(int64_t(5000), e.trained(w));  // 6000 less the 1000 held out
        CPPUNIT_ASSERT_EQUAL(int64_t(1000), e.held_out(w));
        CPPUNIT_ASSERT_EQUAL(int64_t(512), e.tested(w));
        for (const char* v : {"", " 0", " $N", " -5", "=x"}) {
            const auto c = tula::parse_train_command(std::string("tula-train --model lenet5 --limit-test") + v +
                                                     " --val-split" + v + "\n");
            CPPUNIT_ASSERT_MESSAGE(v, c.found);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, 0, c.limit_test);
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, 0, c.val_split);
            const auto t = tula::parse_train_command(std::string("tula-train --model lenet5 --threads") + v + "\n");
            CPPUNIT_ASSERT_EQUAL_MESSAGE(v, 0, t.threads);
        }
        CPPUNIT_ASSERT_EQUAL(2, tula::parse_train_command("mpirun tula-train --threads 2 --model lenet5\n").threads);
        CPPUNIT_ASSERT_EQUAL(4, tula::parse_train_command("tula-train --model lenet5 --threads=4\n").threads);
        // no options: the workload's whole sets; a limit above a set is capped at it, and a split
        // of the whole training set leaves nothing to train
        const tula::EpochExamples none;
        CPPUNIT_ASSERT_EQUAL(int64_t(60000), none.trained(w));
        CPPUNIT_ASSERT_EQUAL(int64_t(10000), none.tested(w));
        CPPUNIT_ASSERT_EQUAL(int64_t(0), none.held_out(w));
        const tula::EpochExamples big{int64_t(1) << 40, int64_t(1) << 40, 60000};
        CPPUNIT_ASSERT_EQUAL(int64_t(10000), big.tested(w));
        CPPUNIT_ASSERT_EQUAL(int64_t(60000), big.held_out(w));
        CPPUNIT_ASSERT_EQUAL(int64_t(0), big.trained(w));
    }

    // Pathological content parses in time linear in its size (the scanner is one pass; a scan
    // from every tula-train word to the end of its command took minutes on the first): the
    // time at 1 MiB over the time at 1/8 MiB is well under the 64 of a quadratic scanner (the
    // least of 3 timings each; 1 ms is added to the smaller, below which the ratio measures
    // timer noise). No absolute time is asserted: the machine may be busy.
    void test_pathological_scripts_are_linear() {
        auto cases = [](size_t bytes) {
            std::string many_lines;
            for (size_t i = 0; i < bytes / 10; ++i) many_lines += "tula-train x\n";
            std::string named = repeat("tula-train ", bytes - 32);
            named.resize(named.rfind(' ') + 1);  // whole words only
            named += "--model lenet5\n";
            return std::vector<std::pair<std::string, std::string>>{
                {"tula-train repeated", repeat("tula-train ", bytes)},
                {"tula-train repeated, --model at the end", named},
                {"--model repeated", repeat("--model ", bytes)},
                {"one line of continuations", repeat("tula-train \\\n", bytes)},
                {"backslashes", repeat("\\", bytes)},
                {"single quotes", repeat("'", bytes)},
                {"double quotes", repeat("\"", bytes)},
                {"escaped quotes in double quotes", "\"" + repeat("\\\"", bytes)},
                {"operators", repeat("tula-train;", bytes)},
                {"comment lines in a continuation", repeat("a \\\n#c\n", bytes)},
                {"lines of tula-train", many_lines},
                {"blank lines", repeat("\r\n", bytes)},
            };
        };
        const size_t mib = size_t(1) << 20;
        const auto small = cases(mib / 8), large = cases(mib);
        for (size_t i = 0; i < large.size(); ++i) {
            const std::string& name = large[i].first;
            double t_small = 1e300, t_large = 1e300;
            bool found = false;
            for (int rep = 0; rep < 3; ++rep) {
                t_small = std::min(t_small, parse_seconds(small[i].second, 10.0, &found));
                t_large = std::min(t_large, parse_seconds(large[i].second, 10.0, &found));
            }
            const std::string times = name + ": " + std::to_string(t_small * 1000) + " ms at 128 KiB, " +
                                      std::to_string(t_large * 1000) + " ms at 1 MiB";
            CPPUNIT_ASSERT_MESSAGE(times, std::isfinite(t_large) && t_large / (t_small + 1e-3) < 24);
            const bool want = name == "tula-train repeated, --model at the end";
            CPPUNIT_ASSERT_EQUAL_MESSAGE(name, want, found);
        }
    }

    // Correctness on large inputs: the first tula-train with --model after a megabyte of
    // other commands is found, its flags read, up to the 1 MiB limit.
    void test_large_scripts_still_parse() {
        std::string s;
        for (int i = 0; i < 40000; ++i) s += "tula-train --list-models\n";  // 1,000,000 bytes
        s += "mpirun -np 2 tula-train --model lenet5 --epochs 7 --limit-train=6000\n";
        const auto c = found_command(s);
        CPPUNIT_ASSERT_EQUAL(std::string("lenet5"), c.model);
        CPPUNIT_ASSERT_EQUAL(7, c.epochs);
        CPPUNIT_ASSERT_EQUAL(6000, c.limit_train);
        // one logical line of 200,000 continued words, then the flags
        std::string cont;
        for (int i = 0; i < 200000; ++i) cont += "w \\\n";
        const auto d = tula::parse_train_command(cont + "tula-train --model fmnist-cnn --batch-size 64\n");
        CPPUNIT_ASSERT(d.found);
        CPPUNIT_ASSERT_EQUAL(64, d.batch_size);
        // the same cut at 1 MiB inside the invocation: the part read is all there is
        std::string cut = repeat("#", (size_t(1) << 20) - 37) + "\ntula-train --model lenet5 --epochs 12\n";
        const auto e = tula::parse_train_command(cut);  // "--epochs 1" is what the first 1 MiB holds
        CPPUNIT_ASSERT(e.found);
        CPPUNIT_ASSERT_EQUAL(1, e.epochs);
    }
    // `# tula: workload=... epochs=... batch=... limit_train=...` names the workload of any
    // trainer; its values override those of a tula-train line, which fills the rest.
    void test_directive() {
        const auto c = tula::parse_train_command(
            "#!/bin/bash\n#SBATCH -N 2\n#  tula:\tworkload=torch-fmnist-cnn@fashion-mnist epochs=3 batch=128 "
            "limit_train=6400\nsrun python3 train.py\n");
        CPPUNIT_ASSERT(c.found);
        CPPUNIT_ASSERT(c.from_directive);
        CPPUNIT_ASSERT_EQUAL(std::string("torch-fmnist-cnn@fashion-mnist"), c.workload());
        CPPUNIT_ASSERT_EQUAL(3, c.epochs);
        CPPUNIT_ASSERT_EQUAL(128, c.batch_size);
        CPPUNIT_ASSERT_EQUAL(6400, c.limit_train);
        CPPUNIT_ASSERT_EQUAL(std::string(""), c.optimizer);
        // --optimizer of a tula-train line, overridden by a directive's optimizer=
        CPPUNIT_ASSERT_EQUAL(std::string("ags"), found_command("tula-train --model m --optimizer=ags\n").optimizer);
        CPPUNIT_ASSERT_EQUAL(std::string(""), found_command("tula-train --model m --optimizer \"$OPT\"\n").optimizer);
        CPPUNIT_ASSERT_EQUAL(std::string("sgd"),
                             found_command("tula-train --model m --optimizer ags\n# tula: workload=m@d optimizer=sgd\n").optimizer);
        CPPUNIT_ASSERT_EQUAL(128, c.reference_batch());
        // only the workload: the trainer's default batch is the reference
        const auto d = tula::parse_train_command("# tula: workload=m@d\npython3 x.py\n");
        CPPUNIT_ASSERT(d.found);
        CPPUNIT_ASSERT_EQUAL(0, d.epochs);
        CPPUNIT_ASSERT_EQUAL(tula::kTrainerDefaultBatch, d.reference_batch());
        // after a tula-train line too; the directive's workload and epochs win, the line's batch stays
        const auto e = tula::parse_train_command(
            "tula-train --model lenet5 --epochs 12 --batch-size 256\n# tula: workload=custom@fashion-mnist epochs=5\n");
        CPPUNIT_ASSERT(e.found && e.from_directive);
        CPPUNIT_ASSERT_EQUAL(std::string("custom@fashion-mnist"), e.workload());
        CPPUNIT_ASSERT_EQUAL(5, e.epochs);
        CPPUNIT_ASSERT_EQUAL(256, e.batch_size);
        // other comments are not directives
        CPPUNIT_ASSERT(!tula::parse_train_command("# tulax: workload=m@d\n# tula workload=m@d\necho\n").found);
        const auto f = tula::parse_train_command("# tula-train --model x\ntula-train --model lenet5\n");
        CPPUNIT_ASSERT(f.found && !f.from_directive);
    }

    // A malformed directive: not found, with the reason in `problem`.
    void test_directive_malformed() {
        const char* bad[] = {"# tula: workload=nodataset\n", "# tula: workload=a@b epochs=x\n",
                             "# tula: workload=a@b epochs=0\n", "# tula: workload=a@b speed=3\n",
                             "# tula: epochs=3\n", "# tula: workload=a b@c\n", "# tula: workload=a;rm@b\n"};
        for (const char* s : bad) {
            const auto c = tula::parse_train_command(std::string(s) + "tula-train --model lenet5\n");
            CPPUNIT_ASSERT_MESSAGE(s, !c.found);
            CPPUNIT_ASSERT_MESSAGE(s, c.problem.find("`# tula:` directive") != std::string::npos);
        }
        CPPUNIT_ASSERT(tula::parse_train_command("tula-train --model lenet5\n").problem.empty());
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaWorkloadTest);
