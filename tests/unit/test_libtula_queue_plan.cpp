// Unit tests of planning with what Slurm says: a partition's MaxTime (candidates that cannot
// finish left out, the time limit clamped), a partition Slurm will not run (left out with its
// reason), and the ranking by time to result (apply_queue_starts) against a naive
// re-implementation: expected wait plus training time, the brute-force Pareto front, Kneedle on
// it, and the policies' definitions.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "planner_fixtures.hpp"
#include "tula/conf.hpp"
#include "tula/planner.hpp"

using namespace planner_test;

namespace {

// tula::apply_queue_starts with only the expected waits (seconds, one per candidate; no hole).
void apply_waits(tula::Plan* plan, const std::vector<double>& waits, const tula::PolicySpec& policy,
                 const std::string& workload, double margin, double overhead,
                 const std::vector<tula::PartitionConf>& partitions) {
    std::vector<tula::QueueStart> starts(waits.size());
    for (size_t i = 0; i < waits.size(); ++i) starts[i].wait_seconds = waits[i];
    tula::apply_queue_starts(plan, starts, policy, workload, margin, overhead, partitions);
}

tula::PartitionTarget part(const std::string& name, int nodes, double t0, double price) {
    tula::PartitionTarget t;
    t.conf.name = name;
    t.conf.nodes = nodes;
    t.conf.price_per_node_hour = price;
    t.compute = tula_test::linear_compute(t0, 2e-4, 16, 256);
    t.allreduce = alpha_beta(5e-5, 1e-9);
    return t;
}

tula::PlanRequest req4() { return request(workload(61706, 60000), 5, 1, 4, {64, 128, 256, 512}); }

// The chosen index by the policies' definitions, on time = wait + total_seconds + evaluation_seconds.
size_t naive_choice(const std::vector<tula::Candidate>& cs, const std::vector<double>& waits, tula::Policy pol) {
    std::vector<tula::Candidate> c = cs;
    // time to result: the wait, the training and the evaluations after its epochs
    for (size_t i = 0; i < c.size(); ++i) c[i].time_to_target = waits[i] + c[i].total_seconds + c[i].evaluation_seconds;
    if (pol == tula::Policy::Time) {
        size_t best = 0;
        for (size_t i = 1; i < c.size(); ++i)
            if (c[i].time_to_target < c[best].time_to_target) best = i;
        return best;
    }
    const std::set<size_t> front = naive_front(c);
    std::vector<size_t> f(front.begin(), front.end());
    std::sort(f.begin(), f.end(), [&](size_t a, size_t b) { return c[a].time_to_target < c[b].time_to_target; });
    std::vector<double> x, y;
    for (size_t i : f) x.push_back(c[i].time_to_target), y.push_back(c[i].cost_to_target);
    return f[tula::knee_point(x, y)];
}

}  // namespace

class LibtulaQueuePlanTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaQueuePlanTest);
    CPPUNIT_TEST(test_max_time_leaves_out_and_clamps);
    CPPUNIT_TEST(test_unavailable_partition_left_out);
    CPPUNIT_TEST(test_queue_waits_vs_naive);
    CPPUNIT_TEST(test_busy_fast_partition_loses_to_idle_slow_one);
    CPPUNIT_TEST(test_queue_conf_keys);
    CPPUNIT_TEST(test_hole_vs_naive);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_max_time_leaves_out_and_clamps() {
        tula::PlanRequest r = req4();
        r.epochs = 60;  // predictions of several minutes, so that whole-minute MaxTimes cut them
        tula::PartitionTarget slow = part("slow", 4, 3e-3, 1.0), fast = part("fast", 2, 1e-3, 2.0);
        const tula::Plan free = tula::make_site_plan(r, {slow, fast});
        double shortest = 1e300;  // the fast partition's shortest prediction, seconds
        for (const auto& c : free.candidates)
            if (c.partition == "fast") shortest = std::min(shortest, c.total_seconds + c.evaluation_seconds);
        // MaxTime below every prediction of fast: fast left out with the reason, none of its candidates
        fast.conf.max_time_minutes = static_cast<int>(std::ceil(shortest / 60.0)) - 1;
        CPPUNIT_ASSERT(fast.conf.max_time_minutes >= 1);
        const tula::Plan p = tula::make_site_plan(r, {slow, fast});
        for (const auto& c : p.candidates) CPPUNIT_ASSERT(c.partition != "fast");
        CPPUNIT_ASSERT_EQUAL(size_t(1), p.left_out.size());
        CPPUNIT_ASSERT(contains(p.left_out[0], "fast: ") && contains(p.left_out[0], "MaxTime"));
        // A MaxTime above the chosen prediction but below its time limit: kept, the limit clamped.
        fast.conf.max_time_minutes = 0;
        const tula::Candidate& ch = free.choice();
        const int unclamped = tula::candidate_time_limit(ch, r.time_margin, r.time_overhead, 0);
        const int ceiling = static_cast<int>(std::ceil((ch.total_seconds + ch.evaluation_seconds) / 60.0)) + 1;
        CPPUNIT_ASSERT(unclamped > ceiling);  // the margin and the 120 s overhead make room
        (ch.partition == "slow" ? slow : fast).conf.max_time_minutes = ceiling;
        const tula::Plan q = tula::make_site_plan(r, {slow, fast});
        for (const auto& c : q.candidates)  // nothing that cannot finish within MaxTime
            if (c.partition == ch.partition) CPPUNIT_ASSERT(c.total_seconds + c.evaluation_seconds <= ceiling * 60.0);
        const tula::Candidate& qc = q.choice();
        const int q_unclamped = tula::candidate_time_limit(qc, r.time_margin, r.time_overhead, 0);
        const int q_max = qc.partition == ch.partition ? ceiling : 0;
        CPPUNIT_ASSERT_EQUAL(q_max > 0 ? std::min(q_unclamped, q_max) : q_unclamped, q.time_limit_minutes);
        if (qc.partition == ch.partition) CPPUNIT_ASSERT(q.time_limit_minutes <= ceiling);
        CPPUNIT_ASSERT_EQUAL(ceiling, tula::candidate_time_limit(ch, r.time_margin, r.time_overhead, ceiling));
    }

    void test_unavailable_partition_left_out() {
        tula::Config cfg;
        tula::PartitionConf a, b;
        a.name = "cpu", a.nodes = 4, a.hardware_class = "x";
        b.name = "gpu", b.nodes = 2, b.hardware_class = "x", b.unavailable = "AllowGroups=admin does not include your groups";
        cfg.partitions = {a, b};
        const auto ts = tula::site_targets(cfg, tula_test::linear_compute(3e-3, 2e-4, 16, 256), nullptr);
        CPPUNIT_ASSERT_EQUAL(size_t(2), ts.size());
        CPPUNIT_ASSERT(ts[0].left_out.empty());
        CPPUNIT_ASSERT_EQUAL(b.unavailable, ts[1].left_out);
        const tula::Plan p = tula::make_site_plan(req4(), ts);
        for (const auto& c : p.candidates) CPPUNIT_ASSERT_EQUAL(std::string("cpu"), c.partition);
        CPPUNIT_ASSERT(contains(p.reason, "gpu: AllowGroups=admin"));
    }

    // Random waits: the choice by time to result matches the naive one for policies auto and time.
    void test_queue_waits_vs_naive() {
        const tula::PlanRequest r = req4();
        const std::vector<tula::PartitionTarget> ts = {part("slow", 4, 3e-3, 1.0), part("fast", 2, 1e-3, 2.0)};
        std::mt19937 rng(3);
        for (int trial = 0; trial < 40; ++trial)
            for (tula::Policy pol : {tula::Policy::Auto, tula::Policy::Time}) {
                tula::PlanRequest rq = r;
                rq.policy = pol;
                tula::Plan p = tula::make_site_plan(rq, ts);
                std::vector<double> waits(p.candidates.size());
                for (auto& w : waits) w = rng() % 3 == 0 ? 0.0 : double(rng() % 4000);
                const std::vector<tula::Candidate> before = p.candidates;
                tula::PolicySpec spec;
                spec.policy = pol;
                apply_waits(&p, waits, spec, "lenet5@fashion-mnist", r.time_margin, r.time_overhead, {});
                const size_t want = naive_choice(before, waits, pol);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(waits[want] + before[want].total_seconds + before[want].evaluation_seconds,
                                             p.choice().time_to_target, 1e-9);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(before[want].cost_to_target, p.choice().cost_to_target, 1e-12);
                for (size_t i = 0; i < waits.size(); ++i) {
                    CPPUNIT_ASSERT_DOUBLES_EQUAL(waits[i], p.candidates[i].queue_wait_seconds, 0.0);
                    CPPUNIT_ASSERT_DOUBLES_EQUAL(before[i].total_seconds, p.candidates[i].total_seconds, 0.0);
                }
                CPPUNIT_ASSERT_EQUAL(tula::candidate_time_limit(p.choice(), r.time_margin, r.time_overhead, 0),
                                     p.time_limit_minutes);
            }
    }

    // The situation of a busy fast partition: its candidates wait an hour, so the idle slow
    // partition finishes first and is chosen by policy time; with no wait the fast one is.
    void test_busy_fast_partition_loses_to_idle_slow_one() {
        tula::PlanRequest r = req4();
        r.policy = tula::Policy::Time;
        const std::vector<tula::PartitionTarget> ts = {part("slow", 4, 3e-3, 1.0), part("fast", 4, 0.3e-3, 1.0)};
        tula::Plan p = tula::make_site_plan(r, ts);
        CPPUNIT_ASSERT_EQUAL(std::string("fast"), p.choice().partition);
        {  // an empty queue changes nothing, the explanation included
            tula::Plan same = p;
            tula::PolicySpec t;
            t.policy = tula::Policy::Time;
            apply_waits(&same, std::vector<double>(p.candidates.size(), 0.0), t, "w", 0.25, 120, {});
            CPPUNIT_ASSERT_EQUAL(p.chosen, same.chosen);
            CPPUNIT_ASSERT_EQUAL(p.reason, same.reason);
            CPPUNIT_ASSERT_EQUAL(p.time_limit_minutes, same.time_limit_minutes);
        }
        std::vector<double> waits;
        for (const auto& c : p.candidates) waits.push_back(c.partition == "fast" ? 3600.0 : 0.0);
        tula::PolicySpec spec;
        spec.policy = tula::Policy::Time;
        apply_waits(&p, waits, spec, "w", 0.25, 120, {});
        CPPUNIT_ASSERT_EQUAL(std::string("slow"), p.choice().partition);
        CPPUNIT_ASSERT(contains(p.reason, "time to result"));
        std::vector<double> none(p.candidates.size(), 0.0);
        apply_waits(&p, none, spec, "w", 0.25, 120, {});
        CPPUNIT_ASSERT_EQUAL(std::string("fast"), p.choice().partition);
        CPPUNIT_ASSERT(contains(error_of([&] { apply_waits(&p, {1.0}, spec, "w", 0.25, 120, {}); }), "starts"));
    }

    // A busy fast partition with a backfill hole now: each candidate's time to result is the
    // one simulated here part by part (a part of limit L trains L - u - S - 60; a part that does
    // not finish occupies L, then 120 s; parts run in the hole while a whole one fits, the rest
    // from the full-limit start) when that is earlier, policy time takes the least, and the
    // reason and the candidate carry both. Without a hole everything is as before.
    void test_hole_vs_naive() {
        tula::PlanRequest r = req4();
        r.epochs = 600;  // about 37 min on 4 fast nodes: a hole of a few minutes does not finish it
        r.policy = tula::Policy::Time;
        const std::vector<tula::PartitionTarget> ts = {part("slow", 4, 3e-3, 1.0), part("fast", 4, 0.3e-3, 1.0)};
        tula::PolicySpec spec;
        spec.policy = tula::Policy::Time;
        // (hole, part limit L)
        for (const auto& [hole, L] : std::vector<std::pair<double, double>>{{0, 0}, {240, 240}, {600, 600},
                                                                          {100000, 3000}, {100000, 1200}}) {
            tula::Plan p = tula::make_site_plan(r, ts);
            std::vector<tula::QueueStart> st(p.candidates.size());
            std::vector<double> naive(p.candidates.size());
            for (size_t i = 0; i < st.size(); ++i) {
                const tula::Candidate& c = p.candidates[i];
                const bool fast = c.partition == "fast";
                st[i].wait_seconds = fast ? 7200.0 : 20000.0;
                st[i].hole_wait_seconds = fast ? 30.0 : 0.0;
                st[i].hole_seconds = fast ? hole : 0.0;
                st[i].part_seconds = fast ? L : 0.0;
                // the job's run: its training and the evaluations after its epochs, which the parts share
                const double job = c.total_seconds + c.evaluation_seconds;
                naive[i] = st[i].wait_seconds + job;
                const double u = c.startup_seconds, train = L - u - c.signal_seconds - 60.0;
                if (!fast || hole <= 0 || train <= 0) continue;
                double t = 30.0, left = job - u;
                bool waited = false;
                while (left > 0) {
                    if (!waited && t + L > 30.0 + hole) {  // no whole part fits: wait for the full start
                        t = std::max(t, 7200.0);
                        waited = true;
                    }
                    const double x = std::min(train, left);
                    left -= x;
                    t += left > 0 ? L + 120.0 : u + x;
                }
                naive[i] = std::min(naive[i], t);
            }
            tula::apply_queue_starts(&p, st, spec, "w", 0.25, 120, {});
            size_t want = 0;
            for (size_t i = 1; i < naive.size(); ++i)
                if (naive[i] < naive[want]) want = i;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(naive[want], p.choice().time_to_target, 1e-6);
            for (size_t i = 0; i < naive.size(); ++i)
                CPPUNIT_ASSERT_DOUBLES_EQUAL(naive[i], p.candidates[i].time_to_target, 1e-6);
            const tula::Candidate& ch = p.choice();
            CPPUNIT_ASSERT_EQUAL(ch.hole.used, contains(p.reason, "starts in a backfill hole of "));
            if (hole == 0 || L <= 600) {  // none, or parts so short that the requeues cost more
                CPPUNIT_ASSERT(!ch.hole.used);
                continue;
            }
            CPPUNIT_ASSERT(ch.hole.used);
            CPPUNIT_ASSERT_EQUAL(std::string("fast"), ch.partition);
            CPPUNIT_ASSERT(contains(p.reason, tula::hole_phrase(ch.hole)));
            if (L >= 3000) {  // one part in the hole finishes everything
                CPPUNIT_ASSERT_EQUAL(1, ch.hole.hole_parts);
                CPPUNIT_ASSERT_EQUAL(0, ch.hole.rest_parts);
                CPPUNIT_ASSERT(contains(p.reason, "and finishes in it in 1 part"));
            } else {  // parts of 20 min, all in the hole
                CPPUNIT_ASSERT(ch.hole.hole_parts >= 2);
                CPPUNIT_ASSERT_EQUAL(0, ch.hole.rest_parts);
            }
        }
        // The phrase of the worked case of docs/models.md: 10-min hole now, parts of 10 min,
        // the full start in 3000 s.
        CPPUNIT_ASSERT_EQUAL(std::string("starts in a backfill hole of 10m00s in 0.0s and trains 8m20s in 1 part, then "
                                         "the rest (15m30s, 2 parts) starts in 50m00s: result in 1h05m instead of 1h10m"),
                             tula::hole_phrase(tula::hole_time_to_result(0, 600, 3000, 1210, 10, 30, 600)));
    }

    void test_queue_conf_keys() {
        const tula::Config d = tula::parse_config("");
        CPPUNIT_ASSERT(d.queue_estimate);
        const tula::Config c = tula::parse_config("queue_estimate = no\nqueue_timeout = 0.5\n");
        CPPUNIT_ASSERT(!c.queue_estimate);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, c.queue_timeout, 0.0);
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_config("queue_estimate = maybe\n"); }), "queue_estimate"));
        CPPUNIT_ASSERT(contains(error_of([] { tula::parse_config("queue_timeout = 30\n"); }), "queue_timeout"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaQueuePlanTest);
