// Unit tests of the planner (planner.hpp): Pareto front against a naive dominance check,
// Kneedle on curves with a known knee, predictions against a hand computation from the
// model formulas, policies against naive argmins (plan_workload: test_libtula_plan_workload.cpp).
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>

#include "planner_fixtures.hpp"
#include "record_builders.hpp"

using namespace planner_test;

class LibtulaPlannerTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaPlannerTest);
    CPPUNIT_TEST(test_parse_policy);
    CPPUNIT_TEST(test_policy_spec);
    CPPUNIT_TEST(test_deadline_budget_vs_naive);
    CPPUNIT_TEST(test_memory_bound);
    CPPUNIT_TEST(test_overlap_and_interval);
    CPPUNIT_TEST(test_pareto_front_vs_naive);
    CPPUNIT_TEST(test_knee_of_inverse_curve);
    CPPUNIT_TEST(test_knee_of_corner);
    CPPUNIT_TEST(test_knee_of_concave_front);
    CPPUNIT_TEST(test_knee_small_and_errors);
    CPPUNIT_TEST(test_make_plan_predictions);
    CPPUNIT_TEST(test_accuracy_bound);
    CPPUNIT_TEST(test_accuracy_not_counted_twice);
    CPPUNIT_TEST(test_make_plan_policies);
    CPPUNIT_TEST(test_make_plan_ties);
    CPPUNIT_TEST(test_make_plan_without_allreduce);
    CPPUNIT_TEST(test_candidates_every_divisible_shape);
    CPPUNIT_TEST(test_make_plan_infeasible);
    CPPUNIT_TEST(test_make_plan_limit_train);
    CPPUNIT_TEST(test_epochs_follow_the_batch);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_parse_policy() {
        CPPUNIT_ASSERT(tula::parse_policy_spec("auto").policy == tula::Policy::Auto);
        CPPUNIT_ASSERT(tula::parse_policy_spec("time").policy == tula::Policy::Time);
        CPPUNIT_ASSERT(tula::parse_policy_spec("cost").policy == tula::Policy::Cost);
        for (auto p : {tula::Policy::Auto, tula::Policy::Time, tula::Policy::Cost})
            CPPUNIT_ASSERT(tula::parse_policy_spec(tula::policy_name(p)).policy == p);
        const std::string e = error_of([] { tula::parse_policy_spec("fast"); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "auto, time, cost") && contains(e, "fast"));
        CPPUNIT_ASSERT(!error_of([] { tula::parse_policy_spec(""); }).empty());
    }

    void test_pareto_front_vs_naive() {
        std::mt19937 rng(31);
        for (int trial = 0; trial < 200; ++trial) {
            const size_t n = 1 + rng() % 40;
            const bool coarse = trial % 2 == 0;  // small integer grid: many ties and duplicates
            std::vector<tula::Candidate> c(n);
            for (auto& x : c) {
                if (coarse) {
                    x.time_to_target = static_cast<double>(rng() % 6);
                    x.cost_to_target = static_cast<double>(rng() % 6);
                } else {
                    x.time_to_target = std::uniform_real_distribution<double>(1, 100)(rng);
                    x.cost_to_target = std::uniform_real_distribution<double>(1, 100)(rng);
                }
            }
            if (trial % 4 == 1)  // a few times or costs not finite: such a point is on no front
                for (size_t k = 0; k < 3; ++k) {
                    tula::Candidate& x = c[rng() % n];
                    const double bad = k == 0 ? std::nan("") : (k == 1 ? 1.0 : -1.0) * HUGE_VAL;
                    (rng() % 2 ? x.time_to_target : x.cost_to_target) = bad;
                }
            std::vector<tula::Candidate> finite;
            std::vector<size_t> where;
            for (size_t i = 0; i < n; ++i)
                if (std::isfinite(c[i].time_to_target) && std::isfinite(c[i].cost_to_target)) {
                    finite.push_back(c[i]);
                    where.push_back(i);
                }
            std::set<size_t> want;
            for (size_t i : naive_front(finite)) want.insert(where[i]);
            const std::vector<size_t> f = tula::pareto_front(c);
            CPPUNIT_ASSERT_EQUAL(want.size(), f.size());
            CPPUNIT_ASSERT(std::set<size_t>(f.begin(), f.end()) == want);
            for (size_t i = 1; i < f.size(); ++i) {
                const tula::Candidate &a = c[f[i - 1]], &b = c[f[i]];
                CPPUNIT_ASSERT(a.time_to_target <= b.time_to_target);
                if (a.time_to_target == b.time_to_target && a.cost_to_target == b.cost_to_target)
                    CPPUNIT_ASSERT(f[i - 1] < f[i]);  // exact duplicates in input order
            }
        }
        CPPUNIT_ASSERT(tula::pareto_front({}).empty());
    }

    // y = 1/x on [1, 10]: after normalization D(x) = 1 - (1/x - 0.1)/0.9 - (x - 1)/9, which
    // is largest where 1/(0.9 x^2) = 1/9, at x = sqrt(10).
    void test_knee_of_inverse_curve() {
        std::vector<double> x, y;
        const double step = 0.01;
        for (double v = 1.0; v <= 10.0 + 1e-9; v += step) {
            x.push_back(v);
            y.push_back(1.0 / v);
        }
        // shuffled: the index returned must refer to the input order
        std::vector<size_t> perm(x.size());
        for (size_t i = 0; i < perm.size(); ++i) perm[i] = i;
        std::shuffle(perm.begin(), perm.end(), std::mt19937(5));
        std::vector<double> xs, ys;
        for (size_t i : perm) {
            xs.push_back(x[i]);
            ys.push_back(y[i]);
        }
        const size_t k = tula::knee_point(xs, ys);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(std::sqrt(10.0), xs[k], step);
        // scaling either axis does not move the knee (normalization)
        for (auto& v : xs) v *= 1000;
        for (auto& v : ys) v = 5 + 0.01 * v;
        CPPUNIT_ASSERT_EQUAL(k, tula::knee_point(xs, ys));
    }

    // Two straight pieces with a corner at x = 3: steep from (0, 10) to (3, 1), then flat to
    // (10, 0). The corner is farthest from the chord.
    void test_knee_of_corner() {
        std::vector<double> x, y;
        for (int i = 0; i <= 10; ++i) {
            x.push_back(i);
            y.push_back(i <= 3 ? 10.0 - 3.0 * i : 1.0 - (i - 3) / 7.0);
        }
        CPPUNIT_ASSERT_EQUAL(size_t(3), tula::knee_point(x, y));
        std::reverse(x.begin(), x.end());
        std::reverse(y.begin(), y.end());
        CPPUNIT_ASSERT_EQUAL(size_t(7), tula::knee_point(x, y));
    }

    // A front with no point below the chord has no knee; its ends tie at D = 0, and taking the
    // first in x order picked the fastest, most expensive end. The front is fmnist-cnn's at a
    // 100 Mbit/s link on the testbed (seconds, node-hours; 4, 2 and 1 nodes): x y = 5330, 5969
    // and 3202, so the 1-node end. A straight front: x y = 3, 4, 3, the tie to the cheaper end.
    void test_knee_of_concave_front() {
        const std::vector<double> t{2190, 3278, 3396}, c{2.434, 1.821, 0.943};
        CPPUNIT_ASSERT_EQUAL(size_t(2), tula::knee_point(t, c));
        std::vector<double> t1000;
        for (double v : t) t1000.push_back(1000 * v);
        CPPUNIT_ASSERT_EQUAL(size_t(2), tula::knee_point(t1000, c));  // x y is scale-free too
        CPPUNIT_ASSERT_EQUAL(size_t(2), tula::knee_point({1.0, 2.0, 3.0}, {3.0, 2.0, 1.0}));
        // one point below the chord is a knee again
        CPPUNIT_ASSERT_EQUAL(size_t(1), tula::knee_point({2190, 2300, 3396}, {2.434, 1.0, 0.943}));
    }

    void test_knee_small_and_errors() {
        CPPUNIT_ASSERT_EQUAL(size_t(0), tula::knee_point({5.0}, {7.0}));
        // two points: no knee; the least x y (9 x 1 = 9 against 2 x 8 = 16)
        CPPUNIT_ASSERT_EQUAL(size_t(0), tula::knee_point({9.0, 2.0}, {1.0, 8.0}));
        CPPUNIT_ASSERT_EQUAL(size_t(1), tula::knee_point({9.0, 2.0}, {1.0, 4.0}));  // 9 against 8
        // an increasing pair: the lower-left one is nearest the origin
        CPPUNIT_ASSERT_EQUAL(size_t(1), tula::knee_point({9.0, 2.0}, {8.0, 1.0}));
        // equal maxima (a duplicated point): the first in x order, input order among equal x
        CPPUNIT_ASSERT_EQUAL(size_t(1), tula::knee_point({3.0, 1.0, 0.0, 1.0}, {0.0, 0.5, 3.0, 0.5}));
        // not positive: nearest the origin after normalization; (0, 1) and (1, 0) tie, the
        // last in x order wins
        CPPUNIT_ASSERT_EQUAL(size_t(1), tula::knee_point({0.0, 1.0}, {1.0, 0.0}));
        CPPUNIT_ASSERT(!error_of([] { tula::knee_point({}, {}); }).empty());
        CPPUNIT_ASSERT(!error_of([] { tula::knee_point({1.0, 2.0}, {1.0}); }).empty());
    }

    // The models of the hand-computed tests: t(b) = 3 ms + 0.2 ms b, profiled at b = 16..256;
    // allreduce alpha 50 us, beta 1 ns per byte (hand_total uses the same figures).
    static tula::ComputeModel lenet5_like_compute() {
        tula::ComputeModel cm = tula_test::linear_compute(3e-3, 2e-4, 16, 256);
        return cm;
    }
    static tula::AllreduceModel lenet5_like_allreduce() {
        tula::AllreduceModel am;
        am.alpha = 5e-5;
        am.beta = 1e-9;
        return am;
    }

    void test_make_plan_predictions() {
        const tula::ComputeModel cm = lenet5_like_compute();
        const tula::AllreduceModel am = lenet5_like_allreduce();
        tula::PlanRequest r = request(workload(61706, 60000), 7, 1, 5, {1024, 24, 64, 3, 2048, 64, 512});
        r.price_per_node_hour = 2.0;
        r.time_margin = 0.3;
        r.time_overhead = 90;
        const tula::Plan p = planner_test::make_plan(r, cm, &am);
        // the feasible set, enumerated independently: B % K == 0 and b = B/K in [16/4, 256*4]
        std::set<std::pair<int, int>> want;
        for (int K = 1; K <= 5; ++K)
            for (int B : {3, 24, 64, 512, 1024, 2048})
                if (B % K == 0 && B / K >= 4 && B / K <= 1024) want.insert({K, B});
        std::set<std::pair<int, int>> got;
        for (const auto& c : p.candidates) got.insert({c.nodes, c.global_batch});
        CPPUNIT_ASSERT(want == got);
        CPPUNIT_ASSERT_EQUAL(want.size(), p.candidates.size());  // no duplicates
        CPPUNIT_ASSERT(got.count({1, 2048}) == 0);  // b = 2048 > 4 x 256
        CPPUNIT_ASSERT(got.count({1, 3}) == 0);     // b = 3 < 16 / 4
        CPPUNIT_ASSERT(got.count({3, 64}) == 0);    // not divisible
        for (size_t i = 1; i < p.candidates.size(); ++i) {
            const auto& a = p.candidates[i - 1];
            const auto& b = p.candidates[i];
            CPPUNIT_ASSERT(a.nodes < b.nodes || (a.nodes == b.nodes && a.global_batch < b.global_batch));
        }
        for (const auto& c : p.candidates) {
            // 7 epochs at the reference batch (the request's smallest, 3), E(B) whole epochs at B
            const int e = hand_epochs(r.convergence.noise_scale, c.global_batch, 7, 3);
            CPPUNIT_ASSERT_EQUAL(e, c.epochs);
            const double t = hand_total(c.nodes, c.global_batch, e, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
            CPPUNIT_ASSERT_EQUAL(c.global_batch / c.nodes, c.local_batch);
            // the job's node-hours hold its training and the evaluations after its epochs
            // (evaluation_seconds, checked against tula-train's sharding in test_libtula_evaluation)
            CPPUNIT_ASSERT(c.evaluation_seconds > 0);
            const double job = t + c.evaluation_seconds;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.nodes * job / 3600.0, c.node_hours, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0 * c.nodes * job / 3600.0, c.cost, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(job, c.time_to_target, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t / e, c.epoch_seconds, 1e-9 * t);
        }
        // the Pareto flags match the naive dominance check
        const std::set<size_t> front = naive_front(p.candidates);
        for (size_t i = 0; i < p.candidates.size(); ++i) CPPUNIT_ASSERT_EQUAL(front.count(i) == 1, p.candidates[i].pareto);
        CPPUNIT_ASSERT(p.choice().pareto);
        const double T = p.choice().total_seconds + p.choice().evaluation_seconds;
        // the time limit leaves the stop signal and Slurm's 60 s resolution (tula/stop.hpp) beyond it
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(std::ceil((T * 1.3 + 90 + p.choice().signal_seconds + 60) / 60)), p.time_limit_minutes);
        CPPUNIT_ASSERT_MESSAGE(p.reason, contains(p.reason, "knee"));
        CPPUNIT_ASSERT(p.reason.find('\n') == std::string::npos);
        for (const auto& c : p.candidates) {  // no GPUs or watts in the request: none reported
            CPPUNIT_ASSERT_EQUAL(0.0, c.gpu_hours);
            CPPUNIT_ASSERT_EQUAL(0.0, c.energy_kwh);
        }

        // GPU-hours priced on top of the node, and energy: checked against the hand formula.
        r.gpus_per_node = 4;
        r.price_per_gpu_hour = 0.75;
        r.watts_per_node = 2500;
        const tula::Plan g = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(p.candidates.size(), g.candidates.size());
        for (const auto& c : g.candidates) {
            const double t = hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9) +
                             c.evaluation_seconds;  // the job: its training and evaluations
            const double upper = c.total_seconds_upper + c.evaluation_seconds;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(4.0 * c.nodes * t / 3600.0, c.gpu_hours, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2500.0 * c.nodes * t / 3.6e6, c.energy_kwh, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL((2.0 * c.nodes + 0.75 * 4 * c.nodes) * t / 3600.0, c.cost, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL((2.0 + 0.75 * 4) * c.nodes * upper / 3600.0, c.cost_upper, 1e-9 * upper);
        }
        // The time calibration from finished runs scales every time and cost by its factor.
        r.watts_per_node = 0;
        r.calibration.factor = 0.5;
        r.calibration.runs = 2;
        const tula::Plan half = planner_test::make_plan(r, cm, &am);
        for (const auto& c : half.candidates) {
            const double t = 0.5 * hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
        }
        CPPUNIT_ASSERT_MESSAGE(half.reason, contains(half.reason, "x0.5 from 2 finished runs"));
        // Separate factors for single-node and multi-node candidates once each group has 2 runs.
        r.calibration.factor_single = 0.8;
        r.calibration.runs_single = 2;
        r.calibration.factor_multi = 1.5;
        r.calibration.runs_multi = 3;
        const tula::Plan split = planner_test::make_plan(r, cm, &am);
        for (const auto& c : split.candidates) {
            const double t = (c.nodes == 1 ? 0.8 : 1.5) * hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
        }
        // A multi-node ratio curve over the local batch: 1.0 at b <= 64, 2.0 at b >= 256, linear in
        // log b between (1.5 at 128); single-node candidates keep their median.
        r.calibration.curve_multi = {{64.0, 1.0}, {256.0, 2.0}};
        const tula::Plan curved = planner_test::make_plan(r, cm, &am);
        int multi = 0;
        for (const auto& c : curved.candidates) {
            const double b = static_cast<double>(c.global_batch) / c.nodes;
            const double f = c.nodes == 1 ? 0.8 : b <= 64 ? 1.0 : b >= 256 ? 2.0 : 1.0 + std::log2(b / 64.0) / 2.0;
            const double t = f * hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
            multi += c.nodes > 1 && b > 64 && b < 256;
        }
        CPPUNIT_ASSERT(multi > 0);  // some candidates fall between the knots
        r.calibration = tula::TimeCalibration{};
        // A concurrency factor for 2+ nodes (2 ranks profiled at once) multiplies their compute
        // part only, and the start-up is added once to the total and the time to target (with the
        // evaluations after the epochs).
        r.watts_per_node = 0;
        tula::ComputeModel cc = cm;
        cc.concurrent[2] = {{64.0, 1.5}};  // one batch size: 1.5 everywhere
        cc.startup_knots = {{64, 2.0}};    // one knot: 2 s x b / 64
        const tula::Plan conc = planner_test::make_plan(r, cc, &am);
        CPPUNIT_ASSERT_EQUAL(p.candidates.size(), conc.candidates.size());
        for (const auto& c : conc.candidates) {
            const double b = static_cast<double>(c.global_batch) / c.nodes;
            const double f = c.nodes >= 2 ? 1.5 : 1.0;
            const double t = hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, f * 3e-3, f * 2e-4, 5e-5, 1e-9) +
                             2.0 * b / 64;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0 * b / 64, c.startup_seconds, 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.epochs * c.epoch_seconds + 2.0 * b / 64 + c.evaluation_seconds, c.time_to_target,
                                         1e-9 * t);
        }
        // A synchronized-step profile of 2 ranks (local batch 64 only: flat) multiplies every
        // multi-node step by synced / modelled at b = 64; once 2 multi-node runs are in the
        // history, their residual factor multiplies it.
        tula::ComputeModel cs = cm;
        const double step64 = 3e-3 + 2e-4 * 64 + 2.0 * 5e-5 + 4.0 * 61706 * 1e-9;  // hand: compute + ring allreduce, K = 2
        cs.synced[2] = {{64.0, 1.3 * step64}};
        const tula::Plan sync = planner_test::make_plan(r, cs, &am);
        int synced_multi = 0;
        for (const auto& c : sync.candidates) {
            const double f = c.nodes >= 2 ? 1.3 : 1.0;
            const double t = f * hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(f, c.time_factor, 1e-12);
            CPPUNIT_ASSERT_EQUAL(c.nodes >= 2, c.synced_profile);
            synced_multi += c.synced_profile;
        }
        CPPUNIT_ASSERT(synced_multi > 0);
        if (sync.choice().nodes >= 2) CPPUNIT_ASSERT(contains(sync.reason, "synchronized-step profile"));
        r.calibration.factor = r.calibration.factor_multi = 0.5;
        r.calibration.runs = r.calibration.runs_multi = 2;
        for (const auto& c : planner_test::make_plan(r, cs, &am).candidates) {
            // multi-node: the profile's 1.3 times the runs' residual 0.5; 1 node: no single
            // runs, the pooled 0.5
            const double f = c.nodes >= 2 ? 1.3 * 0.5 : 0.5;
            const double t = f * hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
            CPPUNIT_ASSERT_EQUAL(c.nodes >= 2, c.synced_profile);
        }
        r.min_nodes = r.max_nodes = 2;  // the why line names both factors
        CPPUNIT_ASSERT(contains(planner_test::make_plan(r, cs, &am).reason,
                                "x0.65: the synchronized-step profile of 2 ranks at once (x1.3) and 2 finished multi-node runs (x0.5"));
        // one run on exactly 2 nodes (residual 0.8) serves 2-node candidates; 3 and more nodes keep
        // the multi-node 0.5
        r.calibration.by_nodes[{2, 1}] = {0.8, 1, {}};
        r.max_nodes = 4;
        for (const auto& c : planner_test::make_plan(r, cs, &am).candidates)
            if (c.nodes >= 2) CPPUNIT_ASSERT_DOUBLES_EQUAL(1.3 * (c.nodes == 2 ? 0.8 : 0.5), c.time_factor, 1e-12);
        r.max_nodes = 2;
        CPPUNIT_ASSERT(contains(planner_test::make_plan(r, cs, &am).reason,
                                "x1.04: the synchronized-step profile of 2 ranks at once (x1.3) and 1 finished 2-node run (x0.8"));
        r.min_nodes = 1;
        r.max_nodes = 5;
        r.calibration = tula::TimeCalibration{};
        r.watts_per_node = -1;
        CPPUNIT_ASSERT(contains(error_of([&] { planner_test::make_plan(r, cm, &am); }), "watts must be finite"));
    }

    // Candidates whose expected accuracy acc(B) = a + c log2(B) (run history) is more than
    // max_accuracy_loss below the best are dropped; checked against the formula by hand.
    void test_accuracy_bound() {
        const tula::ComputeModel cm = lenet5_like_compute();
        const tula::AllreduceModel am = lenet5_like_allreduce();
        tula::PlanRequest r = request(workload(61706, 60000), 4, 1, 4, {32, 64, 128, 256, 512, 1024});
        r.fixed_epochs = true;  // the bound applies where every candidate trains the same epochs
        r.accuracy.a = 0.95;
        r.accuracy.c = -0.01;  // one point per doubling of the batch
        r.accuracy.runs = 4;
        r.max_accuracy_loss = 1.0;  // keep all
        const tula::Plan all = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(0, all.accuracy_excluded);
        for (double loss : {0.01, 0.025, 0.0}) {
            r.max_accuracy_loss = loss;
            const tula::Plan p = planner_test::make_plan(r, cm, &am);
            double best = 0;
            for (const auto& c : all.candidates) best = std::max(best, 0.95 - 0.01 * std::log2(c.global_batch));
            std::set<std::pair<int, int>> want, got;
            for (const auto& c : all.candidates)
                if (0.95 - 0.01 * std::log2(c.global_batch) >= best - loss - 1e-9) want.insert({c.nodes, c.global_batch});
            for (const auto& c : p.candidates) got.insert({c.nodes, c.global_batch});
            CPPUNIT_ASSERT(want == got);
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(all.candidates.size() - want.size()), p.accuracy_excluded);
            CPPUNIT_ASSERT(p.accuracy_excluded > 0);
            CPPUNIT_ASSERT_MESSAGE(p.reason, contains(p.reason, "left out"));
            CPPUNIT_ASSERT(p.choice().global_batch <= (loss < 0.02 ? 64 : 128));
        }
        // Without run history nothing is dropped.
        r.accuracy = tula::AccuracyModel{};
        r.max_accuracy_loss = 0.0;
        CPPUNIT_ASSERT_EQUAL(all.candidates.size(), planner_test::make_plan(r, cm, &am).candidates.size());
    }

    // When the epochs follow the batch, a candidate trains epochs_to_target to reach the
    // target: its accuracy loss at the requested epochs is already paid in epochs, so the
    // accuracy bound must not drop it as well (the loss would count twice).
    void test_accuracy_not_counted_twice() {
        const tula::ComputeModel cm = lenet5_like_compute();
        const tula::AllreduceModel am = lenet5_like_allreduce();
        tula::PlanRequest r = request(workload(61706, 60000), 4, 1, 4, {32, 64, 128, 256, 512, 1024});
        r.accuracy.a = 0.95;
        r.accuracy.c = -0.01;
        r.accuracy.runs = 4;
        r.max_accuracy_loss = 1.0;
        const tula::Plan all = planner_test::make_plan(r, cm, &am);
        r.max_accuracy_loss = 0.0;  // would keep only the best batch's candidates
        const tula::Plan p = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT(!p.fixed_epochs);
        CPPUNIT_ASSERT_EQUAL(0, p.accuracy_excluded);
        CPPUNIT_ASSERT_EQUAL(all.candidates.size(), p.candidates.size());
        // every candidate trains more epochs at a larger batch: the penalty is in the epochs
        for (const auto& c : p.candidates)
            for (const auto& d : p.candidates)
                if (c.global_batch < d.global_batch) CPPUNIT_ASSERT(c.epochs_to_target < d.epochs_to_target);
    }

    void test_make_plan_policies() {
        std::mt19937 rng(11);
        for (int trial = 0; trial < 50; ++trial) {
            tula::ComputeModel cm = tula_test::linear_compute(std::uniform_real_distribution<double>(0, 1e-2)(rng), std::uniform_real_distribution<double>(1e-6, 1e-3)(rng), 8, 512);
            tula::AllreduceModel am;
            am.alpha = std::uniform_real_distribution<double>(0, 1e-3)(rng);
            am.beta = std::uniform_real_distribution<double>(0, 1e-8)(rng);
            tula::PlanRequest r = request(workload(100000 + rng() % 1000000, 1000 + rng() % 100000), 1 + rng() % 20, 1, 1 + rng() % 8, {32, 64, 128, 256, 512, 1024});
            for (auto pol : {tula::Policy::Time, tula::Policy::Cost, tula::Policy::Auto}) {
                r.policy = pol;
                const tula::Plan p = planner_test::make_plan(r, cm, &am);
                // naive argmin with the tie-break: fewer nodes, then smaller batch
                size_t best = 0;
                for (size_t i = 0; i < p.candidates.size(); ++i) {
                    const auto& c = p.candidates[i];
                    const auto& b = p.candidates[best];
                    // the policies rank by the time and cost of the epochs each trains: E(B)
                    // rounded up to whole epochs, by hand
                    CPPUNIT_ASSERT_EQUAL(hand_epochs(r.convergence.noise_scale, c.global_batch, r.epochs, 32), c.epochs);
                    const double vc = pol == tula::Policy::Cost ? c.cost : c.total_seconds + c.evaluation_seconds;
                    const double vb = pol == tula::Policy::Cost ? b.cost : b.total_seconds + b.evaluation_seconds;
                    if (vc < vb || (vc == vb && (c.nodes < b.nodes || (c.nodes == b.nodes && c.global_batch < b.global_batch))))
                        best = i;
                }
                if (pol != tula::Policy::Auto) {
                    CPPUNIT_ASSERT_EQUAL(best, p.chosen);
                    CPPUNIT_ASSERT_MESSAGE(p.reason, contains(p.reason, tula::policy_name(pol)));
                } else {
                    CPPUNIT_ASSERT(p.choice().pareto);
                }
            }
        }
    }

    // Exact ties (powers of two, no overhead, free communication): every candidate costs the
    // same and the time depends only on the node count. Ties go to fewer nodes, then smaller batch.
    void test_make_plan_ties() {
        tula::ComputeModel cm = tula_test::linear_compute(0, 1.0 / 1024, 16, 256);
        tula::AllreduceModel am;  // alpha = beta = 0
        tula::PlanRequest r = request(workload(1000, 65536), 2, 1, 4, {256, 64, 128});
        r.price_per_node_hour = 1;
        r.convergence.noise_scale = 1e300;  // every batch needs the same epochs: exact ties
        for (const auto& c : planner_test::make_plan(r, cm, &am).candidates) CPPUNIT_ASSERT(c.nodes != 3);
        r.policy = tula::Policy::Time;
        tula::Plan p = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(4, p.choice().nodes);
        CPPUNIT_ASSERT_EQUAL(64, p.choice().global_batch);
        r.policy = tula::Policy::Cost;
        p = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(1, p.choice().nodes);
        CPPUNIT_ASSERT_EQUAL(64, p.choice().global_batch);
        r.policy = tula::Policy::Auto;  // the front is three identical points (4 nodes)
        p = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(4, p.choice().nodes);
        CPPUNIT_ASSERT_EQUAL(64, p.choice().global_batch);
        size_t on_front = 0;
        for (const auto& c : p.candidates) on_front += c.pareto;
        CPPUNIT_ASSERT_EQUAL(size_t(3), on_front);
    }

    // The candidates are every (K, B) with K R dividing B, fewest nodes first, then the smallest
    // batch: against a naive loop over every node count and batch.
    void test_candidates_every_divisible_shape() {
        const tula::AllreduceModel ar = alpha_beta(1e-4, 1e-9);
        const std::vector<int> batches = {720, 32, 48, 64, 96, 120, 128, 360, 1024, 96, 7};
        for (int R : {1, 3, 4})
            for (auto [lo, hi] : {std::pair<int, int>{1, 1}, {1, 64}, {3, 40}, {5, 1024}}) {
                tula::PlanRequest r = request(workload(61706, 60000), 5, lo, hi, batches);
                tula::PartitionTarget t = tula::implicit_target(r, tula_test::linear_compute(2e-3, 1e-4, 0, 0), &ar);
                t.conf.ranks_per_node = R;
                t.conf.nodes = 1 << 12;
                std::vector<std::pair<int, int>> naive, got;
                for (int K = lo; K <= hi; ++K)
                    for (int B : std::set<int>(batches.begin(), batches.end()))
                        if (B % (K * R) == 0) naive.emplace_back(K, B);
                std::vector<tula::Candidate> cs;
                try {
                    cs = tula::make_site_plan(r, {t}).candidates;
                } catch (const tula::Error&) {
                    CPPUNIT_ASSERT(naive.empty());  // no divisible shape: the plan says so
                }
                for (const tula::Candidate& c : cs) got.emplace_back(c.nodes, c.global_batch);
                CPPUNIT_ASSERT_MESSAGE("R " + std::to_string(R) + " nodes " + std::to_string(lo) + ".." + std::to_string(hi),
                                       naive == got);
            }
    }

    void test_make_plan_without_allreduce() {
        tula::ComputeModel cm = tula_test::linear_compute(1e-3, 1e-4, 16, 256);
        tula::PlanRequest r = request(workload(1000, 5000), 2, 1, 4, {64, 128, 256});
        const tula::Plan p = planner_test::make_plan(r, cm, nullptr);
        CPPUNIT_ASSERT_EQUAL(size_t(3), p.candidates.size());
        for (const auto& c : p.candidates) CPPUNIT_ASSERT_EQUAL(1, c.nodes);
        CPPUNIT_ASSERT_MESSAGE(p.reason, contains(p.reason, "allreduce"));
        r.min_nodes = 2;
        CPPUNIT_ASSERT(contains(error_of([&] { planner_test::make_plan(r, cm, nullptr); }), "tula profile allreduce"));
    }

    void test_make_plan_infeasible() {
        tula::ComputeModel cm = tula_test::linear_compute(1e-3, 1e-4, 16, 32);
        tula::AllreduceModel am;
        am.alpha = 1e-5;
        tula::PlanRequest r = request(workload(1000, 5000), 2, 2, 2, {3, 5, 4096});  // odd, or a local batch far beyond 4 x 32
        const std::string e = error_of([&] { planner_test::make_plan(r, cm, &am); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "no feasible"));
        r.epochs = 0;
        r.global_batches = {64};
        CPPUNIT_ASSERT(!error_of([&] { planner_test::make_plan(r, cm, &am); }).empty());
        r.epochs = 1;
        r.workload.train_examples = 0;
        CPPUNIT_ASSERT(!error_of([&] { planner_test::make_plan(r, cm, &am); }).empty());
    }

    void test_policy_spec() {
        auto d = tula::parse_policy_spec("deadline=01:30:00");
        CPPUNIT_ASSERT(d.policy == tula::Policy::Deadline);
        CPPUNIT_ASSERT_EQUAL(5400.0, d.deadline_seconds);
        CPPUNIT_ASSERT_EQUAL(5400.0, tula::parse_policy_spec("deadline=90:00").deadline_seconds);
        CPPUNIT_ASSERT_EQUAL(86400.0 + 61.0, tula::parse_policy_spec("deadline=1-00:01:01").deadline_seconds);
        auto b = tula::parse_policy_spec("budget=2.5");
        CPPUNIT_ASSERT(b.policy == tula::Policy::Budget);
        CPPUNIT_ASSERT_EQUAL(2.5, b.budget);
        CPPUNIT_ASSERT(tula::parse_policy_spec("budget=3").policy == tula::Policy::Budget);
        for (const char* bad : {"deadline=", "deadline=1:60:00", "deadline=-1:00", "deadline=00:00:00", "deadline=1",
                                "deadline=a:b:c", "budget=0", "budget=-1", "budget=abc", "budget=nan", "budget=",
                                "deadline", "budget"}) {
            const std::string e = error_of([&] { tula::parse_policy_spec(bad); });
            CPPUNIT_ASSERT_MESSAGE(bad, !e.empty());
        }
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_policy_spec("deadline=1:99:00"); }), "HH:MM:SS"));
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_policy_spec("budget=x"); }), "budget"));
    }

    static tula::ComputeModel noisy_compute() {
        tula::ComputeModel m = tula_test::with_interval(tula_test::linear_compute(2e-3, 1e-4, 0, 0), 5e-4, 6, 0.5, -2e-3, 2e-5);
        return m;
    }

    void test_deadline_budget_vs_naive() {
        const tula::AllreduceModel ar = alpha_beta(1e-4, 1e-9);
        tula::PlanRequest r = request(workload(61706, 60000), 5, 1, 8, {32, 64, 128, 256, 512, 1024});
        r.price_per_node_hour = 3;
        const auto m = noisy_compute();
        r.policy = tula::Policy::Time;
        const auto all = planner_test::make_plan(r, m, &ar).candidates;
        // the job's upper bound: the training's and the evaluations after its epochs
        auto upper = [](const tula::Candidate& c) { return c.total_seconds_upper + c.evaluation_seconds; };
        std::vector<double> times;
        for (const auto& c : all) {
            CPPUNIT_ASSERT(c.total_seconds_upper > c.total_seconds);
            CPPUNIT_ASSERT(c.evaluation_seconds > 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.nodes * upper(c) / 3600.0 * 3, c.cost_upper, 1e-12 * c.cost_upper);
            times.push_back(upper(c));
        }
        std::sort(times.begin(), times.end());
        for (double deadline : {times[0], times[times.size() / 3], times[times.size() / 2], times.back() * 2}) {
            r.policy = tula::Policy::Deadline;
            r.deadline_seconds = deadline;
            const auto p = planner_test::make_plan(r, m, &ar);
            double naive = INFINITY;
            for (const auto& c : all)
                if (upper(c) <= deadline) naive = std::min(naive, c.cost);
            CPPUNIT_ASSERT(upper(p.choice()) <= deadline);  // the whole job meets it
            CPPUNIT_ASSERT_DOUBLES_EQUAL(naive, p.choice().cost_to_target, 1e-12 * naive);  // cheapest to the target
            // The time limit covers the upper bound plus the margins.
            CPPUNIT_ASSERT(p.time_limit_minutes * 60.0 >= upper(p.choice()) * (1 + r.time_margin) + r.time_overhead);
        }
        r.deadline_seconds = times[0] * 0.5;
        CPPUNIT_ASSERT(contains(error_of([&] { planner_test::make_plan(r, m, &ar); }), "deadline"));
        std::vector<double> costs;
        for (const auto& c : all) costs.push_back(c.cost_upper);
        std::sort(costs.begin(), costs.end());
        r.policy = tula::Policy::Budget;
        for (double budget : {costs[0], costs[costs.size() / 2], costs.back()}) {
            r.budget = budget;
            const auto p = planner_test::make_plan(r, m, &ar);
            double naive = INFINITY;
            for (const auto& c : all)
                if (c.cost_upper <= budget) naive = std::min(naive, c.total_seconds + c.evaluation_seconds);
            CPPUNIT_ASSERT(p.choice().cost_upper <= budget);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(naive, p.choice().time_to_target, 1e-12 * naive);
        }
        r.budget = costs[0] * 0.5;
        CPPUNIT_ASSERT(contains(error_of([&] { planner_test::make_plan(r, m, &ar); }), "budget"));
    }

    void test_memory_bound() {
        const tula::AllreduceModel ar = alpha_beta(1e-4, 1e-9);
        tula::PlanRequest r = request(workload(61706, 60000), 2, 1, 4, {32, 64, 128, 256, 512});
        tula::ComputeModel m;
        m.t0 = 1e-3;
        m.t1 = 1e-4;
        const auto free = planner_test::make_plan(r, m, &ar).candidates;
        tula::MemoryModel mem;
        mem.static_bytes = 1e6;
        mem.per_example_bytes = 1e4;
        r.memory = mem;
        r.device_memory_bytes = 1e6 + 1e4 * 100;  // local batch <= 100
        const auto p = planner_test::make_plan(r, m, &ar);
        CPPUNIT_ASSERT_EQUAL(100, p.max_local_batch);
        size_t want = 0;
        for (const auto& c : free) want += c.local_batch <= 100;
        CPPUNIT_ASSERT_EQUAL(want, p.candidates.size());
        for (const auto& c : p.candidates) {
            CPPUNIT_ASSERT(c.local_batch <= 100);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1e6 + 1e4 * c.local_batch, c.memory_bytes, 1e-6);
        }
        r.device_memory_bytes = 1e6 + 1e4 * 7;  // nothing fits (smallest local batch is 8)
        const std::string e = error_of([&] { planner_test::make_plan(r, m, &ar); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "largest local batch that fits is 7") && contains(e, "device_memory_bytes"));
    }

    void test_overlap_and_interval() {
        const tula::AllreduceModel ar = alpha_beta(1e-3, 1e-8);
        tula::PlanRequest r = request(workload(61706, 60000), 3, 1, 4, {64, 256});
        r.overlap.gamma = 3.0;
        const auto m = noisy_compute();
        const auto p = planner_test::make_plan(r, m, &ar);
        for (const auto& c : p.candidates) {
            const double b = c.local_batch;
            const double tc = m.t0 + m.t1 * b;
            const double tm = c.nodes > 1 ? 2.0 * (c.nodes - 1) * ar.alpha + 2.0 * (c.nodes - 1) / c.nodes * 4.0 * 61706 * ar.beta : 0;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(std::cbrt(tc * tc * tc + tm * tm * tm), c.iter_seconds, 1e-12);
            // Upper bound: compute time raised by the prediction interval's half-width.
            const double tu = tc + m.interval(b);
            CPPUNIT_ASSERT_EQUAL(hand_epochs(1024, c.global_batch, 3, 64), c.epochs);
            const double iters = std::floor(60000.0 / c.global_batch) * c.epochs;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(std::cbrt(tu * tu * tu + tm * tm * tm) * iters, c.total_seconds_upper,
                                         1e-9 * c.total_seconds_upper);
            // Convergence column: (1 + B/Bn) / (1 + 64/Bn) times the epochs.
            CPPUNIT_ASSERT_DOUBLES_EQUAL(3.0 * (1 + c.global_batch / 1024.0) / (1 + 64 / 1024.0), c.epochs_to_target, 1e-12);
        }
    }

    // The epochs a candidate trains: the requested 12 define the target at the reference batch 64
    // (the script's own); at batch B the job trains E(B) = 12 (1 + B/B_noise) / (1 + 64/B_noise)
    // rounded up (McCandlish et al. 2018, eq. 2.11), fewer below 64; its time, cost and the time
    // limit are those epochs'. With the epochs fixed every candidate trains the 12, and the plan
    // ranks them so.
    void test_epochs_follow_the_batch() {
        const tula::ComputeModel cm = lenet5_like_compute();
        const tula::AllreduceModel am = lenet5_like_allreduce();
        tula::PlanRequest r = request(workload(61706, 60000), 12, 1, 4, {32, 64, 256, 1024});
        r.convergence.noise_scale = 300;
        r.reference_batch = 64;
        r.policy = tula::Policy::Time;
        const tula::Plan p = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(64, p.reference_batch);
        CPPUNIT_ASSERT(!p.fixed_epochs);
        bool fewer = false, more = false;
        for (const auto& c : p.candidates) {
            const int e = hand_epochs(300, c.global_batch, 12, 64);
            CPPUNIT_ASSERT_EQUAL(e, c.epochs);
            fewer |= e < 12;
            more |= e > 12;
            const double t = hand_total(c.nodes, c.global_batch, e, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
            CPPUNIT_ASSERT_EQUAL(c.total_seconds + c.evaluation_seconds, c.time_to_target);
            CPPUNIT_ASSERT_EQUAL(c.cost, c.cost_to_target);
        }
        CPPUNIT_ASSERT(fewer && more);  // 32 trains fewer than 12, 1024 (4.4x the epochs) more
        const tula::Candidate& ch = p.choice();
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(std::ceil((ch.total_seconds_upper * 1.25 + 120 + ch.signal_seconds + 60) / 60)),
                             p.time_limit_minutes);
        if (ch.epochs != 12)
            CPPUNIT_ASSERT_MESSAGE(p.reason, contains(p.reason, "(12 at batch 64 -> " + std::to_string(ch.epochs) +
                                                                    " at batch " + std::to_string(ch.global_batch) + ")"));
        // the fastest by hand over what each trains
        double best = INFINITY;
        for (const auto& c : p.candidates) best = std::min(best, c.total_seconds);
        CPPUNIT_ASSERT_EQUAL(best, ch.total_seconds);

        r.fixed_epochs = true;
        const tula::Plan f = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT(f.fixed_epochs);
        for (const auto& c : f.candidates) {
            CPPUNIT_ASSERT_EQUAL(12, c.epochs);
            const double t = hand_total(c.nodes, c.global_batch, 12, 60000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(t, c.total_seconds, 1e-9 * t);
        }
        // at fixed epochs the largest batch is the fastest here; following the batch it is not
        CPPUNIT_ASSERT_EQUAL(1024, f.choice().global_batch);
        CPPUNIT_ASSERT(ch.global_batch < 1024);
    }

    // PlanRequest::train_examples (tula-train --limit-train): 6,000 of 60,000 examples per
    // epoch gives floor(6000 / B) steps of the same length, about 1/10 of the full epoch,
    // checked against hand_total; above the training set or <= 0: the whole set.
    void test_make_plan_limit_train() {
        const tula::ComputeModel cm = lenet5_like_compute();
        const tula::AllreduceModel am = lenet5_like_allreduce();
        tula::PlanRequest r = request(workload(61706, 60000), 7, 1, 4, {64, 256, 1024});
        const tula::Plan full = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(int64_t(60000), full.train_examples);
        r.examples.train = 6000;
        CPPUNIT_ASSERT_EQUAL(int64_t(6000), r.examples_per_epoch());
        const tula::Plan lim = planner_test::make_plan(r, cm, &am);
        CPPUNIT_ASSERT_EQUAL(int64_t(6000), lim.train_examples);
        CPPUNIT_ASSERT_EQUAL(full.candidates.size(), lim.candidates.size());
        for (size_t i = 0; i < lim.candidates.size(); ++i) {
            const tula::Candidate& c = lim.candidates[i];
            CPPUNIT_ASSERT_EQUAL(full.candidates[i].epochs, c.epochs);  // the epochs do not depend on D
            const double want = hand_total(c.nodes, c.global_batch, c.epochs, 6000, 61706, 3e-3, 2e-4, 5e-5, 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.total_seconds, 1e-9 * want);
            // about a tenth: floor(6000 / B) of floor(60000 / B) steps (5 of 58 at B = 1024)
            const double ratio = c.epoch_seconds / full.candidates[i].epoch_seconds;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(std::floor(6000.0 / c.global_batch) / std::floor(60000.0 / c.global_batch), ratio,
                                         1e-12);
            CPPUNIT_ASSERT(ratio > 0.08 && ratio < 0.101);
        }
        CPPUNIT_ASSERT_MESSAGE(lim.reason, contains(lim.reason, "6000 of the 60000 training examples per epoch"));
        CPPUNIT_ASSERT(lim.time_limit_minutes <= full.time_limit_minutes);
        // capped at the training set; 0 and negative mean all of it
        for (int64_t n : {int64_t(60000), int64_t(1) << 40, int64_t(0), int64_t(-5)}) {
            r.examples.train = n;
            const tula::Plan p = planner_test::make_plan(r, cm, &am);
            CPPUNIT_ASSERT_EQUAL(int64_t(60000), p.train_examples);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(full.choice().total_seconds, p.choice().total_seconds, 0.0);
            CPPUNIT_ASSERT(!contains(p.reason, "--limit-train"));
        }
    }
};


CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaPlannerTest);
