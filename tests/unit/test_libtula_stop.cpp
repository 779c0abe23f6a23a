// Unit tests of the stop-before-the-time-limit rule (tula/stop.hpp) against the numbers worked
// by hand, and of the planner's use of it: each candidate's signal_seconds from its upper step
// time and the workload's checkpoint, and a time limit that leaves the signal and Slurm's 60 s
// resolution beyond the predicted training; and the two-part time to result of a start in a
// backfill hole (hole_time_to_result) on cases worked by hand.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <limits>

#include "planner_fixtures.hpp"
#include "tula/planner.hpp"
#include "tula/stop.hpp"

using namespace planner_test;

class StopRuleTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(StopRuleTest);
    CPPUNIT_TEST(test_rule_by_hand);
    CPPUNIT_TEST(test_planner_leaves_the_allowance);
    CPPUNIT_TEST(test_hole_by_hand);
    CPPUNIT_TEST(test_slower_than_planned_by_hand);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_rule_by_hand() {
        // ResNet-50: 25,557,032 parameters -> 306,684,384 bytes -> 3.06684384 s at 100 MB/s
        CPPUNIT_ASSERT_DOUBLES_EQUAL(306684384.0, tula::checkpoint_bytes(25557032), 0.5);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3.06684384, tula::checkpoint_write_seconds(306684384.0), 1e-12);
        // 30 + 2 x 0.4 + 3.06684384 = 33.86684384 -> S = 34
        CPPUNIT_ASSERT_DOUBLES_EQUAL(33.86684384, tula::stop_reserve_seconds(0.4, 3.06684384), 1e-12);
        CPPUNIT_ASSERT_EQUAL(34, tula::signal_seconds(0.4, 3.06684384));
        // bad inputs count as 0; S stays within Slurm's 16 bits
        const double nan = std::numeric_limits<double>::quiet_NaN();
        CPPUNIT_ASSERT_DOUBLES_EQUAL(30.0, tula::stop_reserve_seconds(-1, nan), 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, tula::checkpoint_bytes(-5), 0);
        CPPUNIT_ASSERT_EQUAL(65535, tula::signal_seconds(1e6, 0));
        CPPUNIT_ASSERT_EQUAL(30, tula::signal_seconds(0, 0));
        // --time-min: start-up 20 s + epoch 100 s + S 34 s + 60 s = 214 s -> 4 minutes
        CPPUNIT_ASSERT_EQUAL(4, tula::time_min_minutes(20, 100, 34, 0));
        CPPUNIT_ASSERT_EQUAL(3, tula::time_min_minutes(20, 100, 34, 3));  // at most the time limit
        // at least half the time limit: 4 minutes of the useful part, 10 of a 19-minute limit
        CPPUNIT_ASSERT_EQUAL(4, tula::time_min_minutes(20, 100, 34, 7));
        CPPUNIT_ASSERT_EQUAL(10, tula::time_min_minutes(20, 100, 34, 19));
        CPPUNIT_ASSERT_EQUAL(1, tula::time_min_minutes(0, 0, 1, 1));
        CPPUNIT_ASSERT_EQUAL(2, tula::time_min_minutes(nan, -5, 30, 0));  // 90 s
    }

    // A part slower than planned: the ratio past 1.25, and the next part's limit from the
    // measured speed, against the arithmetic by hand.
    void test_slower_than_planned_by_hand() {
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0, tula::slower_than_planned(0.2, 0.1), 1e-12);
        CPPUNIT_ASSERT_EQUAL(0.0, tula::slower_than_planned(0.125, 0.1));  // 1.25 exactly is within the plan
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.26, tula::slower_than_planned(0.126, 0.1), 1e-12);
        const double nan = std::numeric_limits<double>::quiet_NaN();
        CPPUNIT_ASSERT_EQUAL(0.0, tula::slower_than_planned(0.2, 0));     // not planned
        CPPUNIT_ASSERT_EQUAL(0.0, tula::slower_than_planned(nan, 0.1));
        // 1000 steps left at 0.3 s = 300 s; x 1.25 = 375; + 120 overhead + S 31 + 60 = 586 s -> 10 min
        CPPUNIT_ASSERT_EQUAL(10, tula::next_part_time_limit(1000, 0.3, 0, 0.25, 120, 31));
        // with a start-up of 20 s: 320 x 1.25 = 400 + 211 = 611 s -> 11 min
        CPPUNIT_ASSERT_EQUAL(11, tula::next_part_time_limit(1000, 0.3, 20, 0.25, 120, 31));
        CPPUNIT_ASSERT_EQUAL(3, tula::next_part_time_limit(0, nan, -1, -1, 120, 0));  // 180 s
        CPPUNIT_ASSERT_EQUAL(2, tula::slurm_time_limit_minutes(61, 0, 0));
        CPPUNIT_ASSERT_EQUAL(1, tula::slurm_time_limit_minutes(nan, 0.25, 0));
    }

    void test_planner_leaves_the_allowance() {
        const int64_t params = 61706;
        tula::PlanRequest r = request(workload(params, 60000), 5, 1, 4, {64, 128, 256, 512});
        r.time_margin = 0.25;
        r.time_overhead = 120;
        tula::PartitionTarget t;
        t.conf.name = "cpu";
        t.conf.nodes = 4;
        t.conf.price_per_node_hour = 1;
        t.compute = tula_test::linear_compute(0.01, 2e-4, 16, 256);
        t.allreduce = alpha_beta(5e-5, 1e-9);
        const tula::Plan p = tula::make_site_plan(r, {t});
        for (const tula::Candidate& c : p.candidates) {
            // the upper step time: the upper total less the start-up, over the steps
            const double steps = c.epochs * std::floor(60000.0 / c.global_batch);
            const double step_upper = (c.total_seconds_upper - c.startup_seconds) / steps;
            const double want = std::ceil(30 + 2 * step_upper + 12.0 * params / 100e6);
            CPPUNIT_ASSERT_EQUAL(static_cast<int>(want), c.signal_seconds);
        }
        const tula::Candidate& ch = p.choice();
        CPPUNIT_ASSERT(ch.signal_seconds >= 30);
        const int limit = static_cast<int>(
            std::ceil((std::max(ch.total_seconds, ch.total_seconds_upper) * 1.25 + 120 + ch.signal_seconds + 60) / 60));
        CPPUNIT_ASSERT_EQUAL(limit, p.time_limit_minutes);
    }

    void test_hole_by_hand() {
        // start-up u = 10 s, training 1200 s (T = 1210 s), S = 30 s, Slurm's resolution 60 s,
        // requeue delay 120 s. A part of limit L trains c = L - 100 s.
        // A 10-minute hole now, parts of 10 min, the full limit in 3000 s: part 1 trains 500 s
        // (0-600 s), requeued, eligible at 720 s, but 720 + 600 > 600: the rest (700 s) waits
        // for 3000 s and takes 2 parts, 3000 + (600 + 120) + 10 + 200 = 3930 s instead of
        // 3000 + 1210 = 4210 s.
        tula::HoleStart h = tula::hole_time_to_result(0, 600, 3000, 1210, 10, 30, 600);
        CPPUNIT_ASSERT(h.used);
        CPPUNIT_ASSERT_EQUAL(1, h.hole_parts);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(500.0, h.train_seconds, 1e-9);
        CPPUNIT_ASSERT_EQUAL(2, h.rest_parts);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3000.0, h.rest_wait_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(930.0, h.rest_train_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3930.0, h.time_to_result, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4210.0, h.full_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(600.0, h.part_seconds, 0);
        // Parts of 5 min (c = 200 s): the rest (1000 s) takes 5 parts, 3000 + 4 x 420 + 210 =
        // 4890 s: later than without the hole, not used.
        h = tula::hole_time_to_result(0, 600, 3000, 1210, 10, 30, 300);
        CPPUNIT_ASSERT(!h.used);
        CPPUNIT_ASSERT_EQUAL(5, h.rest_parts);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4890.0, h.time_to_result, 1e-9);
        // The full limit would start in 300 s: the rest starts when the requeued job may,
        // 720 s, and ends at 720 + 720 + 210 = 1650 s, later than 300 + 1210 = 1510 s.
        h = tula::hole_time_to_result(0, 600, 300, 1210, 10, 30, 600);
        CPPUNIT_ASSERT(!h.used);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(720.0, h.rest_wait_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1650.0, h.time_to_result, 1e-9);
        // A 30-minute hole, parts of 10 min: two fit (0-600, 720-1320; a third from 1440 would
        // end after 1800), training 1000 s; the last 200 s in 1 part from 3000 s: 3210 s.
        h = tula::hole_time_to_result(0, 1800, 3000, 1210, 10, 30, 600);
        CPPUNIT_ASSERT(h.used);
        CPPUNIT_ASSERT_EQUAL(2, h.hole_parts);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1000.0, h.train_seconds, 1e-9);
        CPPUNIT_ASSERT_EQUAL(1, h.rest_parts);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(210.0, h.rest_train_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3210.0, h.time_to_result, 1e-9);
        // A 30-minute hole in 100 s with parts of 30 min finishes everything in one part
        // (c = 1700 s >= 1200 s): result 100 + 1210 = 1310 s.
        h = tula::hole_time_to_result(100, 1800, 3000, 1210, 10, 30, 1800);
        CPPUNIT_ASSERT(h.used);
        CPPUNIT_ASSERT_EQUAL(1, h.hole_parts);
        CPPUNIT_ASSERT_EQUAL(0, h.rest_parts);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1200.0, h.train_seconds, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, h.rest_wait_seconds, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, h.rest_train_seconds, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1310.0, h.time_to_result, 1e-9);
        // Parts no longer than the stop allowance (90 s < 10 + 30 + 60) train nothing; a hole
        // shorter than a part holds none: not used.
        h = tula::hole_time_to_result(0, 90, 3000, 1210, 10, 30, 90);
        CPPUNIT_ASSERT(!h.used);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, h.train_seconds, 0);
        CPPUNIT_ASSERT(!tula::hole_time_to_result(0, 300, 3000, 1210, 10, 30, 600).used);
        // No hole at all (0 s) is never used; bad inputs count as 0; a part limit of 0 is the hole.
        CPPUNIT_ASSERT(!tula::hole_time_to_result(0, 0, 3000, 1210, 10, 30, 0).used);
        const double nan = std::numeric_limits<double>::quiet_NaN();
        CPPUNIT_ASSERT(!tula::hole_time_to_result(nan, nan, 3000, 1210, 10, 30, nan).used);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3930.0, tula::hole_time_to_result(0, 600, 3000, 1210, 10, 30, 0).time_to_result, 1e-9);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(StopRuleTest);
