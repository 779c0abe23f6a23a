// Unit tests of the evaluation of the test set after each epoch (Predictor::evaluation_seconds,
// Candidate::evaluation_seconds): a hardware plan's and a profiled plan's evaluation against
// tula-train's sharding of the test set written out rank by rank, the time limit and --time-min
// against their formulas by hand, the hardware file's workload.eval_batch, and the job
// prediction (Predictor::job) that holds the evaluation with the training and the cost.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hardware_fixtures.hpp"
#include "planner_fixtures.hpp"
#include "record_builders.hpp"
#include "test_util.hpp"
#include "tula/error.hpp"
#include "tula/hardware.hpp"
#include "tula/planner.hpp"
#include "tula/predict.hpp"
#include "tula/stop.hpp"

namespace {

using Json = nlohmann::json;

// tula-train's evaluation (evaluate_sharded): rank r of P evaluates examples
// [r T / P, (r+1) T / P) in batches of at most `eval_batch`; the slowest rank's forward passes,
// each 1/3 of a training step at the batch `batch_of(largest shard)` (2N of 6N FLOPs).
template <class Step>
double naive_evaluation(int64_t T, int P, int eval_batch, int max_batch, Step step) {
    int64_t largest = 0;
    for (int64_t r = 0; r < P; ++r) largest = std::max(largest, (r + 1) * T / P - r * T / P);
    int b = static_cast<int>(std::min<int64_t>(eval_batch, largest));
    if (max_batch > 0) b = std::min(b, max_batch);
    int64_t passes = 0;
    for (int64_t s = 0; s < largest; s += b) ++passes;
    return passes * step(b) / 3.0;
}

}  // namespace

class LibtulaEvaluationTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaEvaluationTest);
    CPPUNIT_TEST(test_hardware_plan_vs_naive);
    CPPUNIT_TEST(test_profiled_plan_vs_naive);
    CPPUNIT_TEST(test_time_limit_and_time_min);
    CPPUNIT_TEST(test_eval_batch_key);
    CPPUNIT_TEST(test_job_holds_evaluation);
    CPPUNIT_TEST(test_job_prediction_by_hand);
    CPPUNIT_TEST(test_run_of_measuring_job_has_no_startup);
    CPPUNIT_TEST(test_limit_test_and_val_split);
    CPPUNIT_TEST_SUITE_END();

public:
    // A hardware file with 50,000 test examples in passes of 256 per GPU: every candidate's
    // evaluation is its epochs x the slowest rank's passes of the roofline step at that batch,
    // and it enters the overhead per step but not total_seconds.
    void test_hardware_plan_vs_naive() {
        Json j = tula_test::cluster(12.5e9, 5e-6);
        j["workload"]["test_examples"] = 50000;
        j["workload"]["eval_batch"] = 256;
        const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
        tula::PolicySpec pol;
        pol.policy = tula::Policy::Cost;
        const tula::Plan p = tula::plan_hardware(tula::Config{}, h, 0, 0, 0, pol);
        CPPUNIT_ASSERT(p.candidates.size() > 20);
        auto roofline = [](int b) { return b * 1e10 / (100e12 * 0.5); };
        bool small_shard = false;
        for (const auto& c : p.candidates) {
            const int P = c.nodes * 4;
            const double want = c.epochs * naive_evaluation(50000, P, 256, 0, roofline);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.evaluation_seconds, 1e-12 * want);
            const double steps = c.epochs * std::ceil(1e6 / c.global_batch);
            CPPUNIT_ASSERT_DOUBLES_EQUAL((c.startup_seconds + want) / steps, c.overhead_step_seconds, 1e-12 * want);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.epochs * c.epoch_seconds + c.startup_seconds, c.total_seconds,
                                         1e-12 * c.total_seconds);
            small_shard = small_shard || 50000 / P < 256;
        }
        CPPUNIT_ASSERT(small_shard);  // some candidates evaluate fewer than eval_batch examples per GPU
        // no test examples: no evaluation
        j["workload"]["test_examples"] = 0;
        const tula::Plan none = tula::plan_hardware(tula::Config{}, tula::parse_hardware_partitions(j.dump()).front(), 0, 0, 0, pol);
        for (const auto& c : none.candidates) CPPUNIT_ASSERT_EQUAL(0.0, c.evaluation_seconds);
    }

    // A profiled partition (t0 + t1 b, profiled up to local batch 256; 2 ranks per node at 1.5 x
    // the one-rank step): the passes are of at most the profiled batch, not tula-train's 500.
    void test_profiled_plan_vs_naive() {
        const double t0 = 2e-3, t1 = 1e-4;
        std::vector<tula::ComputeSample> rows;
        for (int ranks : {1, 4})
            for (int b : {16, 32, 64, 128, 256}) {
                tula::ComputeSample c;
                c.workload = "lenet5@fashion-mnist";
                c.local_batch = b;
                c.seconds_per_iter = (ranks == 1 ? 1.0 : 1.5) * (t0 + t1 * b);
                c.ranks = ranks;
                c.ranks_per_node = ranks == 1 ? 1 : 2;
                rows.push_back(c);
            }
        std::vector<tula::PartitionTarget> ts(1);
        ts[0].conf.name = "duo";
        ts[0].conf.nodes = 4;
        ts[0].conf.ranks_per_node = 2;
        ts[0].compute = tula::ComputeModel::fit(rows);
        ts[0].allreduce = planner_test::alpha_beta(1e-4, 1e-9);
        CPPUNIT_ASSERT_EQUAL(256, ts[0].compute.max_batch);
        const tula::Workload w = planner_test::workload(61706, 60000);  // 10,000 test examples
        CPPUNIT_ASSERT_EQUAL(tula::kTrainerEvalBatch, w.eval_batch);
        const tula::Plan p = tula::make_site_plan(planner_test::request(w, 3, 2, 4, {64, 256, 1024}), ts);
        CPPUNIT_ASSERT(p.candidates.size() >= 6);
        for (const auto& c : p.candidates) {
            const int P = c.nodes * 2;  // 4 to 8 ranks, 2 per node: the 1.5 x profile
            const double want = c.epochs * naive_evaluation(10000, P, 500, 256, [&](int b) { return 1.5 * (t0 + t1 * b); });
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.evaluation_seconds, 1e-9 * want);
        }
    }

    // The time limit holds the evaluation with the training, both with the margin; --time-min
    // holds the start-up, one epoch with its evaluation, and the stop allowance.
    void test_time_limit_and_time_min() {
        tula::Candidate c;
        c.total_seconds = 1000;
        c.total_seconds_upper = 1200;
        c.epochs = 4;
        c.epoch_seconds = 240;
        c.startup_seconds = 30;
        c.evaluation_seconds = 400;
        c.signal_seconds = 40;
        const double margin = 0.1, overhead = 120;
        const int want = static_cast<int>(std::ceil(((1200 + 400) * 1.1 + 120 + 40 + tula::kSlurmSignalResolution) / 60));
        CPPUNIT_ASSERT_EQUAL(want, tula::candidate_time_limit(c, margin, overhead, 0));
        CPPUNIT_ASSERT_EQUAL(10, tula::candidate_time_limit(c, margin, overhead, 10));  // MaxTime
        const int part = static_cast<int>(std::ceil((30 + 240 + 100 + 40 + tula::kSlurmSignalResolution) / 60.0));
        CPPUNIT_ASSERT_EQUAL(std::max(part, static_cast<int>(std::ceil(want * tula::kTimeMinShareOfLimit))),
                             tula::candidate_time_min(c, want));
        c.evaluation_seconds = 0;
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(std::ceil((1200 * 1.1 + 120 + 40 + tula::kSlurmSignalResolution) / 60)),
                             tula::candidate_time_limit(c, margin, overhead, 0));
    }

    // The job is the training and the evaluations after its epochs: its node-hours, cost and
    // time to result count both, and a partition's MaxTime leaves out a candidate whose training
    // fits but whose job does not. A test set of 2,000,000 examples makes the evaluation minutes.
    void test_job_holds_evaluation() {
        tula::Workload w = planner_test::workload(61706, 60000);
        w.test_examples = 2000000;
        tula::PlanRequest r = planner_test::request(w, 12, 1, 4, {32, 64, 128, 256, 512, 1024});
        r.policy = tula::Policy::Time;
        tula::PartitionTarget t;
        t.conf.name = "cpu";
        t.conf.nodes = 4;
        t.conf.price_per_node_hour = 2;
        t.compute = tula_test::linear_compute(3e-3, 2e-4, 16, 256);
        t.allreduce = planner_test::alpha_beta(1e-4, 1e-9);
        const tula::Plan free = tula::make_site_plan(r, {t});
        double max_time = 0;  // minutes: a MaxTime some candidate's training fits and its job does not
        for (const auto& c : free.candidates) {
            const double job = c.total_seconds + c.evaluation_seconds;
            CPPUNIT_ASSERT(c.evaluation_seconds > 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.nodes * job / 3600.0, c.node_hours, 1e-12 * job);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0 * c.nodes * job / 3600.0, c.cost, 1e-12 * job);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(job, c.time_to_target, 1e-12 * job);
            const double m = std::floor(job / 60.0);
            if (m >= 1 && c.total_seconds <= 60.0 * m && m > max_time) max_time = m;
        }
        CPPUNIT_ASSERT(max_time >= 1);
        t.conf.max_time_minutes = static_cast<int>(max_time);
        const tula::Plan cut = tula::make_site_plan(r, {t});
        size_t kept = 0;
        for (const auto& c : free.candidates) kept += c.total_seconds + c.evaluation_seconds <= 60.0 * max_time;
        CPPUNIT_ASSERT_EQUAL(kept, cut.candidates.size());
        for (const auto& c : cut.candidates) CPPUNIT_ASSERT(c.total_seconds + c.evaluation_seconds <= 60.0 * max_time);
        CPPUNIT_ASSERT_MESSAGE(free.reason, free.reason.find(" evaluating the test set after them") != std::string::npos);
    }

    // Predictor::job against its sums by hand on a GPU partition (a node price, a GPU price,
    // watts): the training of E epochs of D / B steps of the Predictor's step, the E
    // evaluations tula-train's sharding gives, the job's node-hours, GPU-hours, energy, cost and
    // cost at the interval's upper end; and the planner's candidate of the same shape carries
    // the same figures.
    void test_job_prediction_by_hand() {
        const double t0 = 2e-3, t1 = 1e-4;
        tula::PartitionTarget t;
        t.conf.name = "gpu";
        t.conf.nodes = 4;
        t.conf.gpus_per_node = 2;
        t.conf.ranks_per_node = 2;
        t.conf.price_per_node_hour = 3;
        t.conf.price_per_gpu_hour = 1.5;
        t.conf.watts_per_node = 800;
        t.compute = tula_test::linear_compute(t0, t1, 16, 256);
        t.allreduce = planner_test::alpha_beta(1e-4, 1e-9);
        const tula::Workload w = planner_test::workload(61706, 61440);  // 10,000 test examples
        const tula::Predictor pred(t, w, tula::OverlapModel{}, tula::TimeCalibration{});
        const int K = 3, R = 2, B = 384, E = 4;  // local batch 64; 160 steps an epoch
        const tula::JobPrediction j = pred.job(K, R, B, E, 61440.0);
        const tula::StepPrediction s = pred.step(K, R, 64);
        const double steps = E * (61440.0 / B);
        const double run = steps * s.seconds + s.startup_seconds;
        const double evaluation = E * naive_evaluation(10000, K * R, 500, 256, [&](int b) { return t0 + t1 * b; });
        const double job = run + evaluation;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(run, j.run.seconds, 1e-12 * run);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(evaluation, j.evaluation_seconds, 1e-9 * evaluation);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(job, j.seconds, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(steps * s.upper + s.startup_seconds + evaluation, j.upper, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(K * job / 3600.0, j.node_hours, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * K * job / 3600.0, j.gpu_hours, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8 * K * job / 3600.0, j.energy_kwh, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL((3 + 2 * 1.5) * K * job / 3600.0, j.cost, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL((3 + 2 * 1.5) * K * j.upper / 3600.0, j.cost_upper, 1e-9 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL((s.startup_seconds + evaluation) / steps, j.overhead_step_seconds(), 1e-9 * job);
        // the planner's candidate at the same shape (the request's epochs fixed)
        tula::PlanRequest r = planner_test::request(w, E, 1, 4, {B});
        r.fixed_epochs = true;
        const tula::Plan plan = tula::make_site_plan(r, {t});
        const auto c = std::find_if(plan.candidates.begin(), plan.candidates.end(),
                                    [&](const tula::Candidate& x) { return x.nodes == K && x.global_batch == B; });
        CPPUNIT_ASSERT(c != plan.candidates.end());
        CPPUNIT_ASSERT_EQUAL(E, c->epochs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(j.run.seconds, c->total_seconds, 1e-12 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(j.evaluation_seconds, c->evaluation_seconds, 1e-12 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(j.node_hours, c->node_hours, 1e-12 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(j.cost, c->cost, 1e-12 * job);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(j.cost_upper, c->cost_upper, 1e-12 * job);
    }

    // A recorded run of a job that measured its own step before training (its id among the
    // profile's job ids) trained warm: Predictor::run of it is the steps alone; a run of any
    // other job, and the same shape asked for afresh, pay the start-up s(b).
    void test_run_of_measuring_job_has_no_startup() {
        tula::PartitionTarget t;
        t.conf.name = "gpu";
        t.conf.nodes = 2;
        t.compute = tula_test::linear_compute(2e-3, 1e-4, 16, 256);
        t.compute.startup_knots = {{16, 3.0}, {256, 5.0}};
        t.compute.measured_jobs = {"101"};
        t.allreduce = planner_test::alpha_beta(1e-4, 1e-9);
        const tula::Workload w = planner_test::workload(61706, 61440);
        const tula::Predictor pred(t, w, tula::OverlapModel{}, tula::TimeCalibration{});
        tula::RunRecord r;
        r.workload = w.name;
        r.nodes = 1;
        r.global_batch = 128;
        r.epochs = 2;
        const tula::StepPrediction s = pred.step(1, 1, 128);
        const double steps = 2 * (61440.0 / 128);
        const double startup = 3.0 + 2.0 * (128 - 16) / 240;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(startup, s.startup_seconds, 1e-12);
        r.job_id = "101";
        CPPUNIT_ASSERT_DOUBLES_EQUAL(steps * s.seconds, pred.run(r).seconds, 1e-12 * steps * s.seconds);
        r.job_id = "102";
        CPPUNIT_ASSERT_DOUBLES_EQUAL(steps * s.seconds + startup, pred.run(r).seconds, 1e-12 * steps * s.seconds);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(pred.run(1, 1, 128, 2, 61440.0).seconds, pred.run(r).seconds, 1e-12 * steps);
    }

    // tula-train --limit-test and --val-split (PlanRequest::examples): an epoch trains the
    // limited training set less the split and evaluates the first limit-test test examples,
    // then the split, each sharded over the ranks as tula-train shards them; a split of every
    // training example is refused with one message.
    void test_limit_test_and_val_split() {
        const double t0 = 2e-3, t1 = 1e-4;
        tula::PartitionTarget t;
        t.conf.name = "cpu";
        t.conf.nodes = 4;
        t.compute = tula_test::linear_compute(t0, t1, 16, 256);
        t.allreduce = planner_test::alpha_beta(1e-4, 1e-9);
        const tula::Workload w = planner_test::workload(61706, 60000);  // 10,000 test examples
        tula::PlanRequest r = planner_test::request(w, 3, 1, 4, {64, 256, 1024});
        r.examples = tula::EpochExamples{20000, 512, 3000};
        CPPUNIT_ASSERT_EQUAL(int64_t(17000), r.examples_per_epoch());
        const tula::Plan p = tula::make_site_plan(r, {t});
        CPPUNIT_ASSERT_EQUAL(int64_t(17000), p.train_examples);
        auto step = [&](int b) { return t0 + t1 * b; };
        for (const auto& c : p.candidates) {
            const int P = c.nodes;
            const double want = c.epochs * (naive_evaluation(512, P, 500, 256, step) + naive_evaluation(3000, P, 500, 256, step));
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.evaluation_seconds, 1e-9 * want);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(std::floor(17000.0 / c.global_batch) * c.iter_seconds, c.epoch_seconds,
                                         1e-9 * c.epoch_seconds);
        }
        CPPUNIT_ASSERT_MESSAGE(p.reason, p.reason.find("the test set and the validation split after them") != std::string::npos);
        CPPUNIT_ASSERT_MESSAGE(p.reason, p.reason.find("17000 of the 60000 training examples per epoch "
                                                       "(tula-train --limit-train, --val-split 3000)") != std::string::npos);
        r.examples = tula::EpochExamples{0, 0, 60000};
        tula_test::assert_throws_with([&] { tula::make_site_plan(r, {t}); },
                                      "--val-split 60000 holds out all 60000 training examples");
    }

    // workload.eval_batch: tula-train's 500 by default, a whole number of at least 1.
    void test_eval_batch_key() {
        Json j = tula_test::cluster(12.5e9, 5e-6);
        CPPUNIT_ASSERT_EQUAL(tula::kTrainerEvalBatch, tula::parse_hardware_partitions(j.dump()).front().workload.eval_batch);
        j["workload"]["eval_batch"] = 64;
        CPPUNIT_ASSERT_EQUAL(64, tula::parse_hardware_partitions(j.dump()).front().workload.eval_batch);
        for (const Json& bad : {Json(0), Json(1.5), Json("64"), Json(-3)}) {
            j["workload"]["eval_batch"] = bad;
            tula_test::assert_throws_with([&] { tula::parse_hardware_partitions(j.dump()); }, "eval_batch");
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaEvaluationTest);
