// Unit tests of simulation mode (hardware.hpp): the hardware file parser (every required
// key, unknown keys, types, ranges, malformed JSON), the derived models against the
// published-figure formulas written out here, predictions of a simulated plan against a
// naive roofline + alpha-beta computation, and the planner's behaviour at scale on synthetic
// clusters: more network bandwidth -> more nodes, lower latency -> at least as many nodes
// with the time policy, and the chosen knee is never dominated (it lies on the Pareto front,
// checked by a naive O(n^2) dominance test).
#include <cppunit/extensions/HelperMacros.h>

#include <unistd.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tula/error.hpp"
#include "tula/hardware.hpp"
#include "hardware_fixtures.hpp"
#include "record_builders.hpp"
#include "test_util.hpp"

namespace {

using tula_test::error_of;
using tula_test::contains;
using tula_test::hand_epochs;
using tula_test::run_record;
using tula_test::cluster;

using Json = nlohmann::json;

// etc/hardware-h100-512.json from the current directory (make check runs in the repository
// root), else from the repository above the test binary (build/bin/tula-unit-tests).
std::string example_file() {
    const std::string rel = "etc/hardware-h100-512.json";
    if (::access(rel.c_str(), R_OK) == 0) return rel;
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return rel;
    std::string dir(buf, static_cast<size_t>(n));
    for (int up = 0; up < 3; ++up) dir = dir.substr(0, dir.rfind('/'));
    return dir + "/" + rel;
}

tula::PolicySpec policy(tula::Policy p) {
    tula::PolicySpec s;
    s.policy = p;
    return s;
}

bool dominated(const std::vector<tula::Candidate>& cs, size_t i) {
    for (size_t j = 0; j < cs.size(); ++j)
        if (cs[j].time_to_target <= cs[i].time_to_target && cs[j].cost_to_target <= cs[i].cost_to_target &&
            (cs[j].time_to_target < cs[i].time_to_target || cs[j].cost_to_target < cs[i].cost_to_target))
            return true;
    return false;
}

}  // namespace

class LibtulaHardwareTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaHardwareTest);
    CPPUNIT_TEST(test_parse_example_file);
    CPPUNIT_TEST(test_parse_errors);
    CPPUNIT_TEST(test_derived_models_from_figures);
    CPPUNIT_TEST(test_predictions_vs_naive);
    CPPUNIT_TEST(test_more_bandwidth_more_nodes);
    CPPUNIT_TEST(test_latency_and_time_policy);
    CPPUNIT_TEST(test_knee_on_pareto_front);
    CPPUNIT_TEST(test_memory_bound_and_fixed_nodes);
    CPPUNIT_TEST(test_runs_calibrate_compute);
    CPPUNIT_TEST(test_bus_bandwidth_tables);
    CPPUNIT_TEST_SUITE_END();

public:
    // The example shipped in etc/ parses and says what its comment says.
    void test_parse_example_file() {
        const tula::HardwareSpec h = tula::load_hardware_partitions(example_file()).front();
        CPPUNIT_ASSERT_EQUAL(512, h.nodes);
        CPPUNIT_ASSERT_EQUAL(8, h.gpus_per_node);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(989e12, h.peak_flops, 0.0);
        CPPUNIT_ASSERT_EQUAL(std::string("resnet50@imagenet"), h.workload.name);
        CPPUNIT_ASSERT_EQUAL(std::string("resnet50"), h.workload.model);
        CPPUNIT_ASSERT(h.algorithm == tula::AllreduceModel::Algorithm::Rabenseifner);
        CPPUNIT_ASSERT_EQUAL(size_t{10}, h.global_batches.size());
        // Plans without throwing, and says it chose one of its candidates.
        const tula::Plan p = tula::plan_hardware(tula::Config{}, h, 0, 0, 0, policy(tula::Policy::Auto));
        CPPUNIT_ASSERT(p.chosen < p.candidates.size());
        CPPUNIT_ASSERT(p.candidates.back().nodes <= 512);
        CPPUNIT_ASSERT(contains(error_of([] { tula::load_hardware_partitions("/nonexistent/h.json"); }), "/nonexistent/h.json"));
    }

    void test_parse_errors() {
        const Json good = cluster(1e10, 1e-6);
        CPPUNIT_ASSERT_EQUAL(256, tula::parse_hardware_partitions(good.dump()).front().nodes);
        // Each required key, removed, is named.
        const std::vector<std::vector<std::string>> required = {
            {"nodes"}, {"gpus_per_node"}, {"price_per_node_hour"}, {"device", "peak_flops"}, {"device", "memory_bytes"},
            {"network", "bandwidth"}, {"network", "latency"}, {"workload", "name"}, {"workload", "flops_per_example"},
            {"workload", "parameter_bytes"}, {"workload", "train_examples"}, {"device"}, {"network"}, {"workload"}};
        for (const auto& path : required) {
            Json j = good;
            if (path.size() == 1) j.erase(path[0]);
            else j[path[0]].erase(path[1]);
            const std::string e = error_of([&] { tula::parse_hardware_partitions(j.dump(), "h.json"); });
            CPPUNIT_ASSERT_MESSAGE(path.back() + ": " + e, contains(e, path.back()) && e.rfind("tula: h.json: ", 0) == 0);
        }
        auto err_with = [&](const std::string& top, const std::string& key, const Json& v) {
            Json j = good;
            if (top.empty()) j[key] = v;
            else j[top][key] = v;
            return error_of([&] { tula::parse_hardware_partitions(j.dump()); });
        };
        CPPUNIT_ASSERT(contains(err_with("", "nodez", 3), "unknown key 'nodez'"));
        CPPUNIT_ASSERT(contains(err_with("device", "tflops", 3), "unknown key 'device.tflops'"));
        CPPUNIT_ASSERT(contains(err_with("", "nodes", "512"), "'nodes' must be a number"));
        CPPUNIT_ASSERT(contains(err_with("", "nodes", 0), "out of range"));
        CPPUNIT_ASSERT(contains(err_with("", "nodes", 2.5), "whole number"));
        CPPUNIT_ASSERT(contains(err_with("device", "efficiency", 1.5), "device.efficiency"));
        CPPUNIT_ASSERT(contains(err_with("network", "bandwidth", -1), "network.bandwidth"));
        CPPUNIT_ASSERT(contains(err_with("network", "allreduce", "tree"), "ring"));
        CPPUNIT_ASSERT(contains(err_with("workload", "name", "no-at-sign"), "MODEL@DATASET"));
        CPPUNIT_ASSERT(contains(err_with("", "global_batches", Json::array()), "global_batches"));
        CPPUNIT_ASSERT(contains(err_with("", "global_batches", Json{64, 0}), "global_batches"));
        CPPUNIT_ASSERT(contains(err_with("", "device", 5), "device must be a JSON object"));
        CPPUNIT_ASSERT(contains(err_with("workload", "allreduce_bucket_bytes", 0.5), "less than one byte"));
        CPPUNIT_ASSERT(contains(err_with("workload", "allreduce_bucket_bytes", -1), "workload.allreduce_bucket_bytes"));
        CPPUNIT_ASSERT(contains(err_with("workload", "last_batch", "sometimes"), "workload.last_batch"));
        CPPUNIT_ASSERT(contains(err_with("workload", "last_batch", 1), "workload.last_batch"));
        CPPUNIT_ASSERT(tula::parse_hardware_partitions(good.dump()).front().workload.last_batch == tula::LastBatch::Keep);
        for (const char* bad : {"", "{", "[1,2]", "null", "{\"nodes\": 1e999}", "\"x\""}) {
            const std::string e = error_of([&] { tula::parse_hardware_partitions(bad); });
            CPPUNIT_ASSERT_MESSAGE(std::string(bad) + " -> " + e, e.rfind("tula: ", 0) == 0);
        }
    }

    // Model parameters against the formulas written out from the figures.
    void test_derived_models_from_figures() {
        Json j = cluster(25e9, 2e-6);
        j["iteration_overhead_seconds"] = 0.001;
        j["device"]["saturation_batch"] = 16;
        j["network"]["intra_node_bandwidth"] = 200e9;
        const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
        const tula::SimulatedModels m = tula::derive_models(h);
        const double g = 4, per_dev = 100e12 * 0.5, n = 1e8;
        const double intra = 2 * (g - 1) / g * n / 200e9;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(intra, m.intra_node_seconds, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001 + intra, m.compute.t0, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1e10 / (g * per_dev), m.compute.t1, 1e-18);
        CPPUNIT_ASSERT(m.compute.flat);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.001 + intra + 16 * 1e10 / per_dev, m.compute.t_min, 1e-15);
        // At 16 examples per device the two parts of the flat-then-linear model meet.
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m.compute.t_min, m.compute.t0 + m.compute.t1 * 16 * g, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2e-6, m.allreduce.alpha, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1 / 25e9, m.allreduce.beta, 1e-24);
        CPPUNIT_ASSERT(m.allreduce.algorithm == tula::AllreduceModel::Algorithm::Ring);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(g * 4 * n, m.memory.static_bytes, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5e7, m.memory.per_example_bytes, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(g * 40e9, m.node_memory_bytes, 0.0);
        // Ring vs Rabenseifner: same bandwidth term, latency 2(K-1) vs 2 log2 K steps.
        tula::AllreduceModel a = m.allreduce;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * 63 * 2e-6 + 2 * 63.0 / 64 * n / 25e9, a.seconds(64, n), 1e-12);
        a.algorithm = tula::AllreduceModel::Algorithm::Rabenseifner;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * 6 * 2e-6 + 2 * 63.0 / 64 * n / 25e9, a.seconds(64, n), 1e-12);
    }

    // Every candidate of a simulated plan against a naive computation from the raw figures, with
    // an epoch's last partial batch kept (the default: ceil(D / B) steps) and dropped (floor).
    void test_predictions_vs_naive() {
        check_predictions_vs_naive("");
        check_predictions_vs_naive("drop");
    }

    void check_predictions_vs_naive(const std::string& last_batch) {
        Json j = cluster(12.5e9, 5e-6);
        j["workload"]["allreduce_bucket_bytes"] = 0;  // one allreduce after the backward pass
        if (!last_batch.empty()) j["workload"]["last_batch"] = last_batch;
        const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
        tula::Config cfg;
        cfg.time_margin = 0.1;
        cfg.time_overhead = 60;
        const tula::Plan p = tula::plan_hardware(cfg, h, 0, 0, 0, policy(tula::Policy::Cost));
        CPPUNIT_ASSERT(p.candidates.size() > 20);
        const double mem_per_node = 4 * 40e9;
        for (const auto& c : p.candidates) {
            const double b = double(c.global_batch) / c.nodes;
            CPPUNIT_ASSERT(4 * 4 * 1e8 + 5e7 * b <= mem_per_node);  // memory bound respected
            const double compute = b * 1e10 / (4 * 100e12 * 0.5);
            const double K = c.nodes;
            const double comm = K > 1 ? 2 * (K - 1) * 5e-6 + 2 * (K - 1) / K * 1e8 / 12.5e9 : 0.0;
            const double iter = compute + comm;  // one allreduce, not hidden (gamma = 1)
            // 10 epochs at the smallest global batch, E(B) whole epochs at B (no --batch-size given)
            CPPUNIT_ASSERT_EQUAL(hand_epochs(p.convergence.noise_scale, c.global_batch, 10, p.reference_batch), c.epochs);
            const double steps = last_batch == "drop" ? std::floor(1e6 / c.global_batch) : std::ceil(1e6 / c.global_batch);
            const double total = c.epochs * steps * iter;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(iter, c.iter_seconds, iter * 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(compute, c.compute_step_seconds, iter * 1e-12);  // the step's parts
            CPPUNIT_ASSERT_DOUBLES_EQUAL(comm, c.exposed_comm_step_seconds, iter * 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, c.overhead_step_seconds, 0.0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(total, c.total_seconds, total * 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(K * total / 3600 * 10.0, c.cost, c.cost * 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.total_seconds, c.total_seconds_upper, total * 1e-12);  // no interval
        }
        // Memory excluded the large local batches: (160e9 - 1.6e9) / 5e7 = 3168 examples per node.
        CPPUNIT_ASSERT_EQUAL(3168, p.max_local_batch);
        // The time limit: ceil((T (1 + margin) + overhead + signal + 60) / 60).
        const double T = p.choice().total_seconds;
        CPPUNIT_ASSERT_EQUAL(static_cast<int>(std::ceil((T * 1.1 + 60 + p.choice().signal_seconds + 60) / 60)),
                             p.time_limit_minutes);
    }

    // One global batch (16,384), 10 GbE-like to 400 Gb/s-like networks. With a slow network
    // the gradient exchange dominates, so: the fastest plan within a budget uses more nodes
    // as the bandwidth grows, the cheapest plan meeting a deadline needs fewer, the fastest
    // plan never fewer. (The Kneedle knee is not tested here: with the bandwidth term alone,
    // T = c/K + m and cost ~ c + mK are the same hyperbola for every m after Kneedle's
    // normalization, so the knee does not depend on the bandwidth.)
    void test_more_bandwidth_more_nodes() {
        tula::Config cfg;
        const double bws[] = {1.25e9, 5e9, 25e9, 100e9, 400e9};
        std::vector<int> budget, deadline, fastest;
        for (double bw : bws) {
            Json j = cluster(bw, 2e-6);
            j["global_batches"] = {16384};
            j["workload"]["activation_bytes_per_example"] = 5e6;
            j["workload"]["allreduce_bucket_bytes"] = 0;  // nothing hidden: the bandwidth always counts
            const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
            tula::PolicySpec b = policy(tula::Policy::Budget);
            b.budget = 5;  // price units; 10 per node-hour
            tula::PolicySpec d = policy(tula::Policy::Deadline);
            d.deadline_seconds = 120;
            budget.push_back(tula::plan_hardware(cfg, h, 0, 0, 0, b).choice().nodes);
            deadline.push_back(tula::plan_hardware(cfg, h, 0, 0, 0, d).choice().nodes);
            fastest.push_back(tula::plan_hardware(cfg, h, 0, 0, 0, policy(tula::Policy::Time)).choice().nodes);
        }
        for (size_t i = 1; i < budget.size(); ++i) {
            const std::string at = "bandwidth " + std::to_string(bws[i]);
            CPPUNIT_ASSERT_MESSAGE(at, budget[i] >= budget[i - 1]);
            CPPUNIT_ASSERT_MESSAGE(at, deadline[i] <= deadline[i - 1]);
            CPPUNIT_ASSERT_MESSAGE(at, fastest[i] >= fastest[i - 1]);
        }
        CPPUNIT_ASSERT(budget.back() > budget.front());
        CPPUNIT_ASSERT(deadline.back() < deadline.front());
    }

    // With the ring algorithm the fastest node count falls as the latency grows (the latency
    // term 2 (K-1) alpha grows with K); Rabenseifner's 2 log2 K alpha allows at least as many.
    void test_latency_and_time_policy() {
        tula::Config cfg;
        int last = 1 << 30;
        for (double lat : {1e-6, 1e-5, 1e-4, 1e-3}) {
            const tula::HardwareSpec h = tula::parse_hardware_partitions(cluster(100e9, lat).dump()).front();
            const int ring = tula::plan_hardware(cfg, h, 0, 0, 0, policy(tula::Policy::Time)).choice().nodes;
            CPPUNIT_ASSERT(ring <= last);
            last = ring;
            Json j = cluster(100e9, lat);
            j["network"]["allreduce"] = "rabenseifner";
            const int rab = tula::plan_hardware(cfg, tula::parse_hardware_partitions(j.dump()).front(), 0, 0, 0, policy(tula::Policy::Time))
                                .choice()
                                .nodes;
            CPPUNIT_ASSERT(rab >= ring);
        }
        CPPUNIT_ASSERT(last < 256);  // at 1 ms per step the fastest plan does not use every node
    }

    // On random clusters the knee (policy auto), the fastest and the cheapest are never dominated.
    void test_knee_on_pareto_front() {
        std::mt19937 rng(11);
        std::uniform_real_distribution<double> u(0, 1);
        tula::Config cfg;
        for (int trial = 0; trial < 30; ++trial) {
            Json j = cluster(std::pow(10, 8.5 + 3 * u(rng)), std::pow(10, -6.5 + 3 * u(rng)));
            j["nodes"] = 1 + static_cast<int>(u(rng) * 511);
            j["iteration_overhead_seconds"] = 0.01 * u(rng);
            j["device"]["saturation_batch"] = static_cast<int>(64 * u(rng));
            const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
            for (auto pol : {tula::Policy::Auto, tula::Policy::Time, tula::Policy::Cost}) {
                const tula::Plan p = tula::plan_hardware(cfg, h, 0, 0, 0, policy(pol));
                CPPUNIT_ASSERT(p.candidates[p.chosen].pareto);
                CPPUNIT_ASSERT_MESSAGE("trial " + std::to_string(trial), !dominated(p.candidates, p.chosen));
                for (size_t i = 0; i < p.candidates.size(); ++i)
                    CPPUNIT_ASSERT_EQUAL(!dominated(p.candidates, i), p.candidates[i].pareto);
            }
        }
    }

    void test_memory_bound_and_fixed_nodes() {
        Json j = cluster(25e9, 2e-6);
        j["workload"]["activation_bytes_per_example"] = 1e12;  // not even 1 example fits
        const std::string e = error_of([&] {
            tula::plan_hardware(tula::Config{}, tula::parse_hardware_partitions(j.dump()).front(), 0, 0, 0, policy(tula::Policy::Auto));
        });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "fits device memory"));
        const tula::HardwareSpec h = tula::parse_hardware_partitions(cluster(25e9, 2e-6).dump()).front();
        const tula::Plan p = tula::plan_hardware(tula::Config{}, h, 3, 0, 48, policy(tula::Policy::Auto));
        for (const auto& c : p.candidates) {
            CPPUNIT_ASSERT_EQUAL(48, c.nodes);
            CPPUNIT_ASSERT_EQUAL(0, c.global_batch % 48);
        }
        CPPUNIT_ASSERT(contains(error_of([&] {
                                    tula::plan_hardware(tula::Config{}, h, 0, 0, 300, policy(tula::Policy::Auto));
                                }),
                                "256 nodes"));
    }

    // Runs made from a known step time a + c x (x examples per device) plus the ring allreduce
    // written out by hand: the fit gives back a and c, t0 = a, t1 = c / g, and a plan at a run's
    // own shape predicts its measured seconds, and the largest local batch a run trained at fits
    // memory; runs of another class, or of one shape only, calibrate nothing.
    void test_runs_calibrate_compute() {
        Json j = cluster(12.5e9, 5e-6);
        j["device"]["saturation_batch"] = 16;
        j["workload"]["allreduce_bucket_bytes"] = 0;  // the allreduce after the backward pass (test_libtula_buckets: in buckets)
        const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
        const double a = 0.012, c = 3e-4, g = 4, n = 1e8;
        auto seconds = [&](int nodes, int B, int epochs) {
            const double K = nodes, x = double(B) / (K * g);
            const double comm = K > 1 ? 2 * (K - 1) * 5e-6 + 2 * (K - 1) / K * n / 12.5e9 : 0.0;
            return std::ceil(1e6 / B) * epochs * (a + c * x + comm);  // the last partial batch kept
        };
        std::vector<tula::RunRecord> runs;
        // the last at 1,000 examples per device, more than the file's 50 MB per example lets fit
        // ((4 x 40 GB - 4 x 4 x 100 MB) / 50 MB = 3,168 per node)
        const int shapes[][3] = {{1, 256, 10}, {1, 1024, 12}, {2, 2048, 14}, {4, 2048, 14}, {8, 8192, 20}, {1, 4000, 10}};
        for (const auto& sh : shapes) {
            tula::RunRecord r = run_record("j" + std::to_string(runs.size()), "net@data", sh[0], sh[1], sh[2],
                                           seconds(sh[0], sh[1], sh[2]), 1e9 + runs.size());
            r.ranks_per_node = 4;
            runs.push_back(r);
        }
        tula::SimulatedModels m = tula::derive_models(h);
        CPPUNIT_ASSERT_EQUAL(6, tula::fit_hardware_compute(h, runs, &m));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(a, m.compute.t0, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c / g, m.compute.t1, 1e-12);
        CPPUNIT_ASSERT(!m.compute.flat);
        CPPUNIT_ASSERT_DOUBLES_EQUAL((4 * 40e9 - 4 * 4 * 1e8) / 4000, m.memory.per_example_bytes, 1e-3);
        tula::Config cfg;
        const tula::Plan p = tula::plan_hardware(cfg, h, 14, 0, 4, policy(tula::Policy::Time), runs);
        CPPUNIT_ASSERT_EQUAL(6, p.calibration.runs);
        bool seen = false;
        for (const auto& cand : p.candidates)
            if (cand.nodes == 4 && cand.global_batch == 2048) {
                seen = true;
                CPPUNIT_ASSERT_DOUBLES_EQUAL(seconds(4, 2048, cand.epochs), cand.total_seconds, 1e-9 * cand.total_seconds);
            }
        CPPUNIT_ASSERT(seen);
        // another partition's runs, and runs at one local batch, leave the datasheet model
        std::vector<tula::RunRecord> other = runs;
        for (auto& r : other) r.hardware_class = "elsewhere";
        tula::SimulatedModels m2 = tula::derive_models(h);
        CPPUNIT_ASSERT_EQUAL(0, tula::fit_hardware_compute(h, other, &m2));
        CPPUNIT_ASSERT(m2.compute.flat);
        for (auto& r : other) r.hardware_class = "synthetic";  // the one-partition file's name
        CPPUNIT_ASSERT_EQUAL(6, tula::fit_hardware_compute(h, other, &m2));
        const std::vector<tula::RunRecord> one(runs.begin() + 1, runs.begin() + 3);  // both at 256 per device
        tula::SimulatedModels m3 = tula::derive_models(h);
        CPPUNIT_ASSERT_EQUAL(0, tula::fit_hardware_compute(h, one, &m3));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(tula::derive_models(h).compute.t1, m3.compute.t1, 0.0);
    }

    // nccl-tests tables per level: the seconds against busbw = algbw x 2 (n-1)/n worked out
    // by hand, the interpolation in log size, the ends, the within-node part taken out of the
    // across-node allreduce, and the parser's errors.
    void test_bus_bandwidth_tables() {
        const tula::BusBandwidthTable inter = {{1 << 25, 80e9}, {1 << 27, 200e9}};
        // At a measured size: n = 80 ranks, 32 MiB, 80 GB/s -> 2 x 79/80 x 33554432 / 80e9 s.
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * 79.0 / 80 * 33554432 / 80e9, tula::bus_bandwidth_seconds(inter, 80, 1 << 25), 1e-15);
        // 64 MiB lies half-way between 32 and 128 MiB in log size: busbw 140 GB/s.
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * 15.0 / 16 * 67108864 / 140e9, tula::bus_bandwidth_seconds(inter, 16, 1 << 26), 1e-15);
        // Above the largest size: its busbw; below the smallest: its seconds; 1 rank or no table: 0.
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * 0.5 * 1e9 / 200e9, tula::bus_bandwidth_seconds(inter, 2, 1e9), 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(tula::bus_bandwidth_seconds(inter, 8, 1 << 25), tula::bus_bandwidth_seconds(inter, 8, 1000), 0.0);
        CPPUNIT_ASSERT_EQUAL(0.0, tula::bus_bandwidth_seconds(inter, 1, 1e8));
        CPPUNIT_ASSERT_EQUAL(0.0, tula::bus_bandwidth_seconds({}, 8, 1e8));

        Json j = cluster(25e9, 2e-6);
        j["network"]["intra_node_bandwidth"] = 200e9;
        j["network"]["bus_bandwidth"] = Json::object();
        j["network"]["bus_bandwidth"]["intra_node"] =
            Json::array({Json::array({33554432, 300e9}), Json::array({134217728, 400e9})});
        j["network"]["bus_bandwidth"]["inter_node"] =
            Json::array({Json::array({33554432, 80e9}), Json::array({134217728, 200e9})});
        const tula::HardwareSpec h = tula::parse_hardware_partitions(j.dump()).front();
        CPPUNIT_ASSERT_EQUAL(size_t(2), h.inter_bus_bandwidth.size());
        const tula::SimulatedModels m = tula::derive_models(h);
        const double n = 1e8, g = 4;
        // busbw at n bytes by hand: w = ln(n / 2^25) / ln(4).
        const double w = std::log(n / 33554432.0) / std::log(4.0);
        const double intra = 2 * (g - 1) / g * n / (300e9 + w * 100e9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(intra, m.intra_node_seconds, 1e-15);
        for (int K : {2, 64, 256}) {
            const double whole = 2 * (K * g - 1) / (K * g) * n / (80e9 + w * 120e9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(whole - intra, m.allreduce.seconds(K, n), 1e-15);
        }
        CPPUNIT_ASSERT_EQUAL(0.0, m.allreduce.seconds(1, n));
        // Without the within-node table the ring at intra_node_bandwidth is taken out instead.
        j["network"]["bus_bandwidth"].erase("intra_node");
        const tula::SimulatedModels m2 = tula::derive_models(tula::parse_hardware_partitions(j.dump()).front());
        const double ring = 2 * (g - 1) / g * n / 200e9;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(ring, m2.intra_node_seconds, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2 * 63.0 / 64 * n / (80e9 + w * 120e9) - ring, m2.allreduce.seconds(16, n), 1e-15);

        auto pairs = [](std::initializer_list<Json> rows) {
            Json t = Json::array();
            for (const Json& r : rows) t.push_back(r);
            return t;
        };
        auto err_with = [&](const Json& table) {
            Json k = cluster(25e9, 2e-6);
            k["network"]["bus_bandwidth"] = Json::object();
            k["network"]["bus_bandwidth"]["inter_node"] = table;
            return error_of([&] { tula::parse_hardware_partitions(k.dump()); });
        };
        CPPUNIT_ASSERT(contains(err_with(Json::array()), "network.bus_bandwidth.inter_node' must be a list"));
        CPPUNIT_ASSERT(contains(err_with(pairs({Json::array({1, 2, 3})})), "must be a list"));
        CPPUNIT_ASSERT(contains(err_with(pairs({Json::array({1e6, 0})})), "bus bandwidth 0"));
        CPPUNIT_ASSERT(contains(err_with(pairs({Json::array({0, 1e9})})), "message size 0"));
        CPPUNIT_ASSERT(contains(err_with(pairs({Json::array({2e6, 1e9}), Json::array({1e6, 2e9})})), "strictly ascending"));
        CPPUNIT_ASSERT(contains(err_with(pairs({Json::array({"1e6", 1e9})})), "must be a list"));
        Json k = cluster(25e9, 2e-6);
        k["network"]["bus_bandwidth"] = Json::object();
        k["network"]["bus_bandwidth"]["across"] = Json::array();
        CPPUNIT_ASSERT(contains(error_of([&] { tula::parse_hardware_partitions(k.dump()); }), "unknown key 'network.bus_bandwidth.across'"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaHardwareTest);
