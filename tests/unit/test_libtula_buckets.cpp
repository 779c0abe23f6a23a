// Unit tests of the bucketed allreduce (GradientAllreduce, bucketed_allreduce, the bucketed
// form of OverlapModel; models.hpp): the closed form of the exposed seconds against an
// event-by-event simulation of the buckets, the buckets' seconds against the ring written out
// by hand, a hardware file's plan against a naive computation of every candidate, and the
// runs' calibration giving back the step a + c x it was made from.
#include <cppunit/extensions/HelperMacros.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tula/hardware.hpp"
#include "tula/models.hpp"
#include "hardware_fixtures.hpp"
#include "record_builders.hpp"

namespace {

using Json = nlohmann::json;
using tula_test::cluster;
using tula_test::run_record;

// The buckets one at a time: bucket j of k full ones (share s of the gradient) is ready at
// W min(1, j s), the last one at W; the network reduces them in that order, one at a time.
// Returns the end of the last reduction less W, at least 0.
double simulate_exposed(int k, double s, double tau, double tau_last, double W) {
    double end = 0;
    for (int j = 1; j <= k; ++j) end = std::max(end, W * std::min(1.0, j * s)) + tau;
    if (tau_last > 0) end = std::max(end, W) + tau_last;
    return std::max(0.0, end - W);
}

// The ring of `bytes` over K nodes (alpha-beta, Thakur et al. 2005) written out.
double ring(double K, double bytes, double bw, double lat) {
    return K > 1 ? 2 * (K - 1) * lat + 2 * (K - 1) / K * bytes / bw : 0.0;
}

// The exposed allreduce of 1e8 bytes on K nodes in 25 MiB buckets behind W seconds of backward.
double naive_exposed(double K, double W, double bw, double lat) {
    const double S = 25.0 * 1024 * 1024, n = 1e8;
    const int k = static_cast<int>(n / S);
    return simulate_exposed(k, S / n, ring(K, S, bw, lat), ring(K, n - k * S, bw, lat), W);
}

}  // namespace

class LibtulaBucketsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaBucketsTest);
    CPPUNIT_TEST(test_exposed_vs_simulation);
    CPPUNIT_TEST(test_bucket_seconds);
    CPPUNIT_TEST(test_plan_vs_naive);
    CPPUNIT_TEST(test_runs_calibrate_through_buckets);
    CPPUNIT_TEST_SUITE_END();

public:
    // 2,000 random bucket layouts and backward passes, compute- and network-bound.
    void test_exposed_vs_simulation() {
        std::mt19937 rng(7);
        std::uniform_real_distribution<double> u(0.0, 1.0);
        for (int i = 0; i < 2000; ++i) {
            tula::GradientAllreduce g;
            g.full_buckets = 1 + static_cast<int>(u(rng) * 12);
            const double rest = u(rng) < 0.3 ? 0.0 : u(rng);  // the last bucket's share of a full one
            g.bucket_fraction = 1.0 / (g.full_buckets + rest);
            g.bucket_seconds = 1e-4 + u(rng) * 1e-2;
            g.last_seconds = rest > 0 ? g.bucket_seconds * (0.2 + 0.8 * rest) : 0.0;
            const double W = u(rng) * 0.2;
            const double want = simulate_exposed(g.full_buckets, g.bucket_fraction, g.bucket_seconds, g.last_seconds, W);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, g.exposed_seconds(W), 1e-12);
        }
        // One bucket (the gradient no larger than a bucket): nothing hidden.
        tula::GradientAllreduce one;
        one.seconds = one.last_seconds = 0.01;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.01, one.exposed_seconds(1.0), 0.0);
        // The bucketed form: compute plus the exposed part; without buckets, gamma's sum.
        tula::OverlapModel ov;
        tula::GradientAllreduce g;
        g.seconds = 0.02;
        g.full_buckets = 4;
        g.bucket_fraction = 0.25;
        g.bucket_seconds = 0.006;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.05 + 0.02, ov.combine(0.05, 0.03, g), 1e-15);
        ov.bucket_bytes = 1;
        // W = 2/3 x 0.03 = 0.02: F = max(0.005 + 0.024, 0.02 + 0.006) = 0.029, exposed 0.009
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.05 + 0.009, ov.combine(0.05, 0.03, g), 1e-15);
    }

    // Each bucket's seconds are the allreduce of its bytes; the whole is one message.
    void test_bucket_seconds() {
        tula::AllreduceModel a;
        a.alpha = 5e-6;
        a.beta = 1 / 12.5e9;
        a.algorithm = tula::AllreduceModel::Algorithm::Ring;
        const double S = 25.0 * 1024 * 1024, n = 1e8;
        const tula::GradientAllreduce g = tula::bucketed_allreduce(&a, 8, 1, n, 0.0, S);
        CPPUNIT_ASSERT_EQUAL(3, g.full_buckets);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(S / n, g.bucket_fraction, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ring(8, n, 12.5e9, 5e-6), g.seconds, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ring(8, S, 12.5e9, 5e-6), g.bucket_seconds, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ring(8, n - 3 * S, 12.5e9, 5e-6), g.last_seconds, 1e-15);
        // No backward to hide behind: the buckets one after another, each paying its latency.
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3 * g.bucket_seconds + g.last_seconds, g.exposed_seconds(0.0), 1e-15);
        // Buckets of the gradient's size or larger, or none: one message.
        for (double b : {n, 2 * n, 0.0}) {
            const tula::GradientAllreduce w = tula::bucketed_allreduce(&a, 8, 1, n, 0.0, b);
            CPPUNIT_ASSERT_EQUAL(0, w.full_buckets);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(w.seconds, w.exposed_seconds(1.0), 0.0);
        }
        // One node: nothing to reduce across.
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, tula::bucketed_allreduce(&a, 1, 1, n, 0.0, S).exposed_seconds(0.0), 0.0);
    }

    // A hardware file with the default 25 MiB buckets: every candidate's step is the roofline
    // compute plus the simulated exposed allreduce, behind a backward pass of 2/3 of the compute.
    void test_plan_vs_naive() {
        const Json j = cluster(12.5e9, 5e-6);
        const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
        CPPUNIT_ASSERT_DOUBLES_EQUAL(25.0 * 1024 * 1024, h.allreduce_bucket_bytes, 0.0);
        tula::PolicySpec pol;
        pol.policy = tula::Policy::Cost;
        const tula::Plan p = tula::plan_hardware(tula::Config{}, h, 0, 0, 0, pol);
        CPPUNIT_ASSERT(p.candidates.size() > 20);
        bool hidden = false;
        for (const auto& c : p.candidates) {
            const double compute = double(c.global_batch) / c.nodes * 1e10 / (4 * 100e12 * 0.5);
            const double exposed = naive_exposed(c.nodes, 2.0 / 3 * compute, 12.5e9, 5e-6);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(compute + exposed, c.iter_seconds, 1e-12 * c.iter_seconds);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(exposed, c.exposed_comm_step_seconds, 1e-12 * c.iter_seconds);
            hidden = hidden || (c.nodes > 1 && exposed < ring(c.nodes, 1e8, 12.5e9, 5e-6));
        }
        CPPUNIT_ASSERT(hidden);  // some candidates hide part of their allreduce
        // Below a floor (saturation at 64 examples per device) the step is the floor, and the
        // backward pass is 2/3 of the floor less the fixed part (here 1 ms of overhead).
        Json f = cluster(12.5e9, 5e-6);
        f["device"]["saturation_batch"] = 64;
        f["iteration_overhead_seconds"] = 0.001;
        const tula::Plan pf = tula::plan_hardware(tula::Config{}, tula::parse_hardware_partitions(f.dump()).front(), 0, 0, 0, pol);
        const double floor = 0.001 + 64 * 1e10 / (100e12 * 0.5);
        int below = 0;
        for (const auto& c : pf.candidates) {
            const double compute = std::max(floor, 0.001 + double(c.global_batch) / c.nodes * 1e10 / (4 * 100e12 * 0.5));
            const double exposed = naive_exposed(c.nodes, 2.0 / 3 * (compute - 0.001), 12.5e9, 5e-6);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(compute + exposed, c.iter_seconds, 1e-12 * c.iter_seconds);
            below += c.global_batch < 64 * 4 * c.nodes;
        }
        CPPUNIT_ASSERT(below > 0);
    }

    // Runs made from a + c x plus the exposed allreduce of their buckets: the fit gives a and c
    // back, and a plan at a run's shape predicts its seconds.
    void test_runs_calibrate_through_buckets() {
        const tula::HardwareSpec h = tula::parse_hardware_partitions(cluster(12.5e9, 5e-6).dump()).front();
        const double a = 0.004, c = 3e-4, g = 4;
        auto seconds = [&](int nodes, int B, int epochs) {
            const double x = double(B) / (nodes * g);
            // the file keeps an epoch's last partial batch (workload.last_batch's default)
            return std::ceil(1e6 / B) * epochs * (a + c * x + naive_exposed(nodes, 2.0 / 3 * c * x, 12.5e9, 5e-6));
        };
        std::vector<tula::RunRecord> runs;
        const int shapes[][3] = {{1, 256, 10}, {2, 256, 12}, {4, 1024, 14}, {8, 1024, 14}, {8, 4096, 20}};
        for (const auto& sh : shapes) {
            tula::RunRecord r = run_record("j" + std::to_string(runs.size()), "net@data", sh[0], sh[1], sh[2],
                                           seconds(sh[0], sh[1], sh[2]), 1e9 + runs.size());
            r.ranks_per_node = 4;
            runs.push_back(r);
        }
        int used = 0;
        const tula::SimulatedModels m = tula::hardware_models(h, runs, &used);
        CPPUNIT_ASSERT_EQUAL(5, used);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(a, m.compute.t0, 1e-6 * a);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c / g, m.compute.t1, 1e-6 * c / g);
        tula::PolicySpec pol;
        pol.policy = tula::Policy::Time;
        const tula::Plan p = tula::plan_hardware(tula::Config{}, h, 14, 0, 8, pol, runs);
        bool seen = false;
        for (const auto& cand : p.candidates)
            if (cand.nodes == 8 && cand.global_batch == 1024) {
                seen = true;
                CPPUNIT_ASSERT_DOUBLES_EQUAL(seconds(8, 1024, cand.epochs), cand.total_seconds, 1e-6 * cand.total_seconds);
            }
        CPPUNIT_ASSERT(seen);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaBucketsTest);
