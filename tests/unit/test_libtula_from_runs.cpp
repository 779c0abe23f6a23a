// Unit tests of a workload planned from its runs (profile_from_runs, load_plan_data): a
// database with finished runs of a workload and no compute profile plans it, the compute part
// from its fewest-node runs and the rest through the runs' step model; what cannot stand in for
// a profile is refused with what to run.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <string>
#include <vector>

#include "tula/predict.hpp"
#include "planner_fixtures.hpp"
#include "record_builders.hpp"

namespace {

using tula_test::error_of;
using tula_test::TempDir;

constexpr double kT0 = 2e-3, kT1 = 1.5e-4;  // the runs' compute: t0 + t1 b seconds per step
constexpr int kExamples = 6400;

// A run of `name` on K x 1 at global batch B, one epoch of floor(6400 / B) steps of `step` s.
tula::RunRecord run_of(const std::string& name, int K, int B, double step, double created) {
    tula::RunRecord r = tula_test::run_record(std::to_string(static_cast<int>(created)), name, K, B, 1,
                                              std::floor(static_cast<double>(kExamples) / B) * step, created);
    r.train_examples = kExamples;
    return r;
}

}  // namespace

class LibtulaFromRunsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaFromRunsTest);
    CPPUNIT_TEST(test_runs_stand_in_for_the_profile);
    CPPUNIT_TEST(test_what_cannot_stand_in_is_refused);
    CPPUNIT_TEST_SUITE_END();

public:
    // Runs at 1 node (B = 32, 64, 128, at t0 + t1 b) and at 2 nodes (B = 128, 10 ms slower than
    // the compute), no workload row, no compute sample: load_plan_data says it plans from the
    // runs; the 1-node step at a batch never run is the runs' line (naive reference: t0 + t1 b),
    // and the 2-node step moves from the compute alone toward the 2-node runs.
    void test_runs_stand_in_for_the_profile() {
        TempDir d;
        const std::string db_path = d / "p.db";
        {
            auto db = tula::ProfileDb::open(db_path, tula::ProfileDb::Mode::ReadWrite);
            planner_test::add_ring_allreduce(db, 4e-5, 2e-9);
            double t = 1.7e9;
            for (int B : {32, 64, 128})
                for (int rep = 0; rep < 2; ++rep) db.add_run(run_of("net@data", 1, B, kT0 + kT1 * B, t++));
            for (int rep = 0; rep < 4; ++rep) db.add_run(run_of("net@data", 2, 128, kT0 + kT1 * 64 + 0.01, t++));
        }
        std::vector<std::string> warn;
        const tula::PlanData data = tula::load_plan_data({db_path}, "net@data", &warn);
        CPPUNIT_ASSERT_EQUAL(10, data.profile_runs);
        CPPUNIT_ASSERT_EQUAL(size_t(6), data.compute.size());
        CPPUNIT_ASSERT_EQUAL(int64_t(kExamples), data.workload.train_examples);
        CPPUNIT_ASSERT_EQUAL(std::string("net"), data.workload.model);
        bool said = false;
        for (const std::string& s : warn) said = said || s.find("no compute profile: planned from its 10 finished run") != std::string::npos;
        CPPUNIT_ASSERT_MESSAGE("the warning says the plan is made from the runs", said);
        const tula::TimeModels m =
            tula::fit_time_models(tula::Config{}, data.workload, data.compute, data.allreduce, data.runs, tula::Corrections{}, &warn);
        const tula::Predictor p(m, m.run_target(""));
        const double one = p.step(1, 1, 96).seconds, want = kT0 + kT1 * 96;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(want, one, 0.03 * want);
        const double measured = kT0 + kT1 * 64 + 0.01, compute = kT0 + kT1 * 64;
        const double two = p.step(2, 1, 64).seconds;
        CPPUNIT_ASSERT_MESSAGE("2 nodes: " + std::to_string(two), two > compute + 0.5 * (measured - compute) && two < 1.5 * measured);
        // and the planner takes it
        tula::Config cfg;
        cfg.max_nodes = 2;
        cfg.global_batches = {64, 128};
        const tula::Plan plan = tula::plan_workload(cfg, {db_path}, "net@data", 1, 2, 2, tula::Policy::Auto, &warn);
        CPPUNIT_ASSERT_EQUAL(2, plan.choice().nodes);
    }

    void test_what_cannot_stand_in_is_refused() {
        TempDir d;
        const std::string db_path = d / "p.db";
        {
            auto db = tula::ProfileDb::open(db_path, tula::ProfileDb::Mode::ReadWrite);
            for (int rep = 0; rep < 3; ++rep) db.add_run(run_of("one@batch", 1, 64, 0.01, 1.7e9 + rep));
            tula::RunRecord r = run_of("no@examples", 1, 64, 0.01, 1.8e9);
            r.train_examples = 0;
            db.add_run(r);
        }
        std::vector<std::string> warn;
        const std::string none = error_of([&] { tula::load_plan_data({db_path}, "never@run", &warn); });
        CPPUNIT_ASSERT_MESSAGE(none, none.find("no profile for workload never@run; run `tula profile compute") != std::string::npos);
        const std::string one = error_of([&] { tula::load_plan_data({db_path}, "one@batch", &warn); });
        CPPUNIT_ASSERT_MESSAGE(one, one.find("at 1 local batch size(s); planning from runs needs at least 2") != std::string::npos);
        const std::string ex = error_of([&] { tula::load_plan_data({db_path}, "no@examples", &warn); });
        CPPUNIT_ASSERT_MESSAGE(ex, ex.find("do not record the examples of an epoch") != std::string::npos);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaFromRunsTest);
