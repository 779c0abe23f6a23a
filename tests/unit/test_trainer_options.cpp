// Unit tests of tula-train's option rules (trainer/app/options.cpp, parse_args): the auto
// optimizer's choice and its why-line, the defaults that follow the update rule, where the
// global batch comes from, and the refusals of bad usage (exit status 2). Expected values are
// the rules of tula-train(1), written out by hand here.
#include <cppunit/extensions/HelperMacros.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "app/app.hpp"

namespace {

using tula::train::app::Options;

// parse_args on "tula-train ARGS..." as rank 1 (prints nothing); returns its status.
int parse(std::vector<std::string> args, Options* o) {
    args.insert(args.begin(), "tula-train");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    return tula::train::app::parse_args(static_cast<int>(args.size()), argv.data(), *o, false);
}

}  // namespace

class TrainerOptionsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerOptionsTest);
    CPPUNIT_TEST(test_auto_optimizer);
    CPPUNIT_TEST(test_defaults_follow_the_update_rule);
    CPPUNIT_TEST(test_batch_source);
    CPPUNIT_TEST(test_plan_epochs);
    CPPUNIT_TEST(test_bad_usage);
    CPPUNIT_TEST_SUITE_END();

public:
    void setUp() override {
        unsetenv("TULA_BATCH_SIZE");
        unsetenv("TULA_EPOCHS");
    }
    void tearDown() override { setUp(); }

    // auto: plain SGD up to 4 x --lr-base-batch (or --sgd-max-batch), AGS above.
    void test_auto_optimizer() {
        struct Case { std::vector<std::string> args; const char* want; const char* why; } cases[] = {
            {{"--model", "lenet5", "--optimizer", "auto", "--batch-size", "256"}, "sgd", "256 <= 256 = 4 x --lr-base-batch"},
            {{"--model", "lenet5", "--optimizer", "auto", "--batch-size", "257"}, "ags", "257 > 256 = 4 x --lr-base-batch"},
            {{"--model", "lenet5", "--optimizer", "auto", "--batch-size", "512", "--lr-base-batch", "128"}, "sgd",
             "512 <= 512 = 4 x --lr-base-batch"},
            {{"--model", "lenet5", "--optimizer", "auto", "--batch-size", "1024", "--sgd-max-batch", "2048"}, "sgd",
             "1024 <= 2048 --sgd-max-batch"},
        };
        for (auto& c : cases) {
            Options o;
            CPPUNIT_ASSERT_EQUAL(-1, parse(c.args, &o));
            CPPUNIT_ASSERT_EQUAL(std::string(c.want), o.optimizer);
            CPPUNIT_ASSERT_MESSAGE(o.optimizer_why, o.optimizer_why.find(c.why) != std::string::npos);
            CPPUNIT_ASSERT_EQUAL(10, o.noise_every);  // measured either way for the planner
        }
    }

    // AGS: trust 0.2, noise scale every 10 steps, warmup threshold 0.05, noise rate scaling,
    // no --lr-max cap; SGD: trust 0.02, no noise scale, fixed warmup, linear scaling, the cap.
    void test_defaults_follow_the_update_rule() {
        struct Rule {
            std::vector<std::string> args;
            const char* optimizer;
            double eta_trust;
            int noise_every;
            double warmup_threshold;
            const char* lr_scaling;
            double lr_max;
        };
        const Rule rules[] = {{{"--model", "lenet5", "--optimizer", "ags"}, "ags", 0.2, 10, 0.05, "noise", 0.0},
                              {{"--model", "lenet5"}, "sgd", 0.02, 0, 0.0, "linear", 0.4}};
        for (const Rule& r : rules) {
            Options o;
            CPPUNIT_ASSERT_EQUAL(-1, parse(r.args, &o));
            CPPUNIT_ASSERT_EQUAL(std::string(r.optimizer), o.optimizer);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(r.eta_trust, o.eta_trust, 0.0);
            CPPUNIT_ASSERT_EQUAL(r.noise_every, o.noise_every);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(r.warmup_threshold, o.warmup_threshold, 0.0);
            CPPUNIT_ASSERT_EQUAL(std::string(r.lr_scaling), o.lr_scaling);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(r.lr_max, o.lr_max, 0.0);
        }
        Options l;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--optimizer", "lars", "--lr-max", "0.3"}, &l));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.3, l.lr_max, 0.0);  // given: kept
    }

    // --batch-size, else $TULA_BATCH_SIZE (the plugin's), else 64; a malformed variable is ignored.
    void test_batch_source() {
        Options a;
        setenv("TULA_BATCH_SIZE", "384", 1);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5"}, &a));
        CPPUNIT_ASSERT_EQUAL(384, a.batch);
        CPPUNIT_ASSERT_EQUAL(std::string("TULA_BATCH_SIZE"), a.batch_source);
        Options b;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--batch-size", "32"}, &b));
        CPPUNIT_ASSERT_EQUAL(32, b.batch);
        CPPUNIT_ASSERT_EQUAL(std::string("--batch-size"), b.batch_source);
        for (const char* junk : {"12x", "-5", "0", "99999999999"}) {
            Options c;
            setenv("TULA_BATCH_SIZE", junk, 1);
            CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5"}, &c));
            CPPUNIT_ASSERT_EQUAL(64, c.batch);
            CPPUNIT_ASSERT_EQUAL(std::string("default"), c.batch_source);
        }
    }

    // A job planned by Tula (its batch from TULA_BATCH_SIZE) trains the plan's TULA_EPOCHS and
    // says where they came from; an explicit --batch-size keeps --epochs (the plan's epochs are
    // for the plan's batch); a bad TULA_EPOCHS keeps --epochs.
    void test_plan_epochs() {
        setenv("TULA_BATCH_SIZE", "512", 1);
        setenv("TULA_EPOCHS", "18", 1);
        Options a;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--epochs", "12"}, &a));
        CPPUNIT_ASSERT_EQUAL(18, a.epochs);
        CPPUNIT_ASSERT_EQUAL(std::string("12 at batch 64 -> 18 at batch 512, tula plan"), a.epochs_note);
        Options same;
        setenv("TULA_EPOCHS", "12", 1);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--epochs", "12"}, &same));
        CPPUNIT_ASSERT_EQUAL(12, same.epochs);
        CPPUNIT_ASSERT(same.epochs_note.empty());
        Options own;
        setenv("TULA_EPOCHS", "18", 1);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--epochs", "12", "--batch-size", "256"}, &own));
        CPPUNIT_ASSERT_EQUAL(12, own.epochs);
        for (const char* junk : {"0", "x", "-3", "100001", "7.5"}) {
            Options c;
            setenv("TULA_EPOCHS", junk, 1);
            CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--epochs", "12"}, &c));
            CPPUNIT_ASSERT_EQUAL_MESSAGE(junk, 12, c.epochs);
        }
        unsetenv("TULA_BATCH_SIZE");
        Options none;
        setenv("TULA_EPOCHS", "18", 1);
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--epochs", "12"}, &none));
        CPPUNIT_ASSERT_EQUAL(12, none.epochs);  // no plan's batch: the plan's epochs do not apply
    }

    void test_bad_usage() {
        const std::vector<std::vector<std::string>> bad = {
            {"--model", "lenet5", "--device", "tpu"},
            {"--model", "lenet5", "--batch-size", "0"},
            {"--model", "lenet5", "--data", "imagenet"},
            {"--model", "lenet5", "--precision", "bf16"},  // bf16 is for --device cuda only
            {"--model", "lenet5", "--no-such-option"},
            {"--model", "lenet5", "--label-smoothing", "1"},
            {"--model", "lenet5", "--label-smoothing", "-0.1"},
            {"--model", "lenet5", "--label-smoothing", "0.1", "--device", "cuda"},
            {"--model", "lenet5", "--val-split", "-1"},
            {"--model", "lenet5", "--target-accuracy", "1.5"},
            {"--model", "lenet5", "--target-accuracy", "-0.5"},
            {"--model", "lenet5", "--ags-rate-rule", "cube"},
            {"--model", "lenet5", "--batch-test-beta", "1"},
        };
        for (const auto& args : bad) {
            Options o;
            CPPUNIT_ASSERT_EQUAL_MESSAGE(args.back(), 2, parse(args, &o));
        }
        Options h;
        CPPUNIT_ASSERT_EQUAL(0, parse({"--help"}, &h));
        Options ls;
        CPPUNIT_ASSERT_EQUAL(-1, parse({"--model", "lenet5", "--label-smoothing", "0.1"}, &ls));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.1, ls.label_smoothing, 0.0);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerOptionsTest);
