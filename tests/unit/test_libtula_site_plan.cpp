// Unit tests of planning across partitions (make_site_plan, site_targets, the scaling of a class
// without profiles, hierarchical allreduce), against enumerations and formulas written out here.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <set>
#include <string>
#include <tuple>

#include "planner_fixtures.hpp"
#include "tula/conf.hpp"
#include "tula/hardware.hpp"
#include "tula/planner.hpp"

using namespace planner_test;

class LibtulaSitePlanTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaSitePlanTest);
    CPPUNIT_TEST(test_site_candidates_vs_naive);
    CPPUNIT_TEST(test_scaled_class_and_left_out);
    CPPUNIT_TEST(test_scaled_compute_factor);
    CPPUNIT_TEST(test_hardware_file_partitions);
    CPPUNIT_TEST_SUITE_END();

    static tula::PartitionTarget target(const std::string& name, int nodes, int ranks, int gpus, double price,
                                        double gpu_price, double intra_bw) {
        tula::PartitionTarget t;
        t.conf.name = name;
        t.conf.hardware_class = name;
        t.conf.nodes = nodes;
        t.conf.ranks_per_node = ranks;
        t.conf.gpus_per_node = gpus;
        t.conf.price_per_node_hour = price;
        t.conf.price_per_gpu_hour = gpu_price;
        t.conf.intra_node_bandwidth = intra_bw;
        t.compute = tula_test::linear_compute(3e-3, 2e-4, 16, 256);
        t.allreduce = alpha_beta(5e-5, 1e-9);
        return t;
    }

public:
    // Two partitions, one with 2 ranks per node: the feasible set and every prediction against
    // a naive enumeration and the formulas (local batch B / (K R); allreduce within the node
    // 2 (R-1)/R n / bw, then the ring across K nodes; cost at the partition's node-hour price).
    void test_site_candidates_vs_naive() {
        const std::vector<tula::PartitionTarget> ts = {target("cpu", 4, 1, 0, 1.0, 0, 0),
                                                       target("gpu", 3, 2, 2, 3.0, 0.5, 2e9)};
        tula::PlanRequest r = request(workload(61706, 60000), 5, 1, 8, {24, 64, 96, 512, 1024});
        const tula::Plan p = tula::make_site_plan(r, ts);
        std::set<std::tuple<std::string, int, int>> want, got;
        for (const auto& t : ts)
            for (int K = 1; K <= t.conf.nodes; ++K)
                for (int B : {24, 64, 96, 512, 1024}) {
                    const int ranks = K * t.conf.ranks_per_node;
                    if (B % ranks == 0 && B / ranks >= 4 && B / ranks <= 1024) want.insert({t.conf.name, K, B});
                }
        const double n = 4.0 * 61706;
        for (const auto& c : p.candidates) {
            got.insert({c.partition, c.nodes, c.global_batch});
            const bool gpu = c.partition == "gpu";
            const int R = gpu ? 2 : 1;
            CPPUNIT_ASSERT_EQUAL(R, c.ranks_per_node);
            CPPUNIT_ASSERT_EQUAL(gpu ? 2 : 0, c.gpus_per_node);
            CPPUNIT_ASSERT_EQUAL(c.global_batch / (c.nodes * R), c.local_batch);
            const double K = c.nodes;
            double iter = 3e-3 + 2e-4 * c.local_batch;
            if (R > 1) iter += 2.0 * (R - 1) / R * n / 2e9;
            if (K > 1) iter += 2 * (K - 1) * 5e-5 + 2 * (K - 1) / K * n * 1e-9;
            const int e = hand_epochs(r.convergence.noise_scale, c.global_batch, 5, 24);
            CPPUNIT_ASSERT_EQUAL(e, c.epochs);
            const double total = e * std::floor(60000.0 / c.global_batch) * iter;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(total, c.total_seconds, 1e-9 * total);
            const double price = gpu ? 3.0 + 2 * 0.5 : 1.0;
            const double job = total + c.evaluation_seconds;  // the evaluations after the epochs as well
            CPPUNIT_ASSERT_DOUBLES_EQUAL(K * job / 3600 * price, c.cost, 1e-9 * c.cost);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(K * job / 3600 * (gpu ? 2 : 0), c.gpu_hours, 1e-9 * c.cost);
        }
        CPPUNIT_ASSERT(want == got);
        CPPUNIT_ASSERT_EQUAL(want.size(), p.candidates.size());
        // the choice is on the front of the union of both partitions' candidates
        CPPUNIT_ASSERT(naive_front(p.candidates).count(p.chosen) == 1);
        CPPUNIT_ASSERT(p.left_out.empty());
        // a partition that has nothing feasible is left out with its reason; the other is planned
        std::vector<tula::PartitionTarget> ts2 = ts;
        ts2[1].conf.ranks_per_node = 7;  // no batch is a multiple of 7 K
        const tula::Plan q = tula::make_site_plan(r, ts2);
        CPPUNIT_ASSERT_EQUAL(size_t(1), q.left_out.size());
        CPPUNIT_ASSERT(contains(q.left_out[0], "gpu: ") && contains(q.left_out[0], "7 ranks per node"));
        for (const auto& c : q.candidates) CPPUNIT_ASSERT_EQUAL(std::string("cpu"), c.partition);
        CPPUNIT_ASSERT(contains(q.reason, "left out: gpu: "));
        // none left: one message with each partition's reason
        ts2[0].conf.ranks_per_node = 7;
        const std::string err = error_of([&] { tula::make_site_plan(r, ts2); });
        CPPUNIT_ASSERT_MESSAGE(err, contains(err, "no partition has a feasible candidate") && contains(err, "cpu: ") &&
                                        contains(err, "gpu: "));
    }

    // tula.conf's partitions as targets: the first class is the profiled one; another class with
    // figures is scaled from it (compute by the geometric mean of the FLOP/s and memory bandwidth
    // ratios, the bandwidth term by the link ratio) with a wider interval; one without figures
    // is left out with the reason.
    void test_scaled_class_and_left_out() {
        const tula::Config cfg = tula::parse_config(
            "[partition slow]\nnodes = 4\nhardware_class = old\npeak_flops = 1e12\nmemory_bandwidth = 1e11\nlink_bandwidth = 1e9\n"
            "[partition fast]\nnodes = 4\nhardware_class = new\npeak_flops = 4e12\nmemory_bandwidth = 4e11\nlink_bandwidth = 4e9\n"
            "[partition odd]\nnodes = 4\nhardware_class = unknown\n");
        const tula::ComputeModel cm = tula_test::linear_compute(3e-3, 2e-4, 16, 256);
        const tula::AllreduceModel am = alpha_beta(5e-5, 1e-9);
        const std::vector<tula::PartitionTarget> ts = tula::site_targets(cfg, cm, &am);
        CPPUNIT_ASSERT_EQUAL(size_t(3), ts.size());
        CPPUNIT_ASSERT(ts[0].scaled_from.empty() && ts[0].compute_factor == 1.0);
        CPPUNIT_ASSERT_EQUAL(std::string("old"), ts[1].scaled_from);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25, ts[1].compute_factor, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25e-9, ts[1].allreduce->beta, 1e-24);
        CPPUNIT_ASSERT(contains(ts[2].left_out, "no profile of class unknown"));
        tula::PlanRequest r = request(workload(61706, 60000), 5, 1, 4, {64, 256});
        const tula::Plan p = tula::make_site_plan(r, ts);
        CPPUNIT_ASSERT_EQUAL(size_t(1), p.left_out.size());
        CPPUNIT_ASSERT(contains(p.left_out[0], "odd: "));
        const double n = 4.0 * 61706;
        for (const auto& c : p.candidates) {
            CPPUNIT_ASSERT(c.partition != "odd");
            const bool fast = c.partition == "fast";
            CPPUNIT_ASSERT_EQUAL(std::string(fast ? "old" : ""), c.scaled_from);
            const double K = c.nodes;
            const double comm = K > 1 ? 2 * (K - 1) * 5e-5 + 2 * (K - 1) / K * n * (fast ? 0.25e-9 : 1e-9) : 0.0;
            const double iter = (fast ? 0.25 : 1.0) * (3e-3 + 2e-4 * c.local_batch) + comm;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(iter, c.iter_seconds, 1e-12);
            // no measured interval here: the upper end is the prediction, x1.5 when scaled
            const double widen = fast ? tula::kScaledIntervalFactor : 1.0;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(widen * c.total_seconds, c.total_seconds_upper, 1e-9 * c.total_seconds_upper);
        }
    }

    void test_scaled_compute_factor() {
        tula::PartitionConf a, b;
        a.hardware_class = "a";
        b.hardware_class = "b";
        a.peak_flops = 100;
        b.peak_flops = 300;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0 / 3, tula::scaled_compute_factor(a, b), 1e-15);  // FLOP/s alone
        a.memory_bandwidth = 10;
        b.memory_bandwidth = 40;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(std::sqrt(1.0 / 3 * 0.25), tula::scaled_compute_factor(a, b), 1e-15);
        a.peak_flops = 0;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25, tula::scaled_compute_factor(a, b), 1e-15);  // bandwidth alone
        a.memory_bandwidth = 0;
        const std::string e = error_of([&] { tula::scaled_compute_factor(a, b); });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "peak_flops") && contains(e, "class a"));
        // the link: only when both give it
        tula::AllreduceModel m = alpha_beta(1e-5, 2e-9);
        m.measured[2] = {{1.0, 1.0}, {2.0, 2.0}};
        CPPUNIT_ASSERT_EQUAL(2e-9, tula::scaled_allreduce(m, a, b).beta);
        a.link_bandwidth = 1e9;
        b.link_bandwidth = 4e9;
        const tula::AllreduceModel s = tula::scaled_allreduce(m, a, b);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5e-9, s.beta, 1e-24);
        CPPUNIT_ASSERT_EQUAL(1e-5, s.alpha);
        CPPUNIT_ASSERT(s.measured.empty());
    }

    // A hardware file with two partitions: each candidate is predicted from its own partition's
    // figures (the one-partition plan of that partition alone gives the same numbers).
    void test_hardware_file_partitions() {
        const std::string text = R"({"name": "site", "workload": {"name": "resnet50@imagenet", "flops_per_example": 2.46e10,
            "parameter_bytes": 102228128, "train_examples": 1281167, "epochs": 90},
          "global_batches": [1024, 2048, 4096, 8192],
          "partitions": [
            {"name": "h100", "nodes": 8, "gpus_per_node": 8, "price_per_node_hour": 98,
             "device": {"peak_flops": 989e12, "memory_bytes": 80e9},
             "network": {"bandwidth": 400e9, "latency": 5e-6, "intra_node_bandwidth": 450e9}},
            {"name": "a100", "nodes": 16, "gpus_per_node": 8, "price_per_node_hour": 33,
             "device": {"peak_flops": 312e12, "memory_bytes": 80e9},
             "network": {"bandwidth": 200e9, "latency": 5e-6, "intra_node_bandwidth": 300e9}}]})";
        const std::vector<tula::HardwareSpec> parts = tula::parse_hardware_partitions(text);
        CPPUNIT_ASSERT_EQUAL(size_t(2), parts.size());
        CPPUNIT_ASSERT_EQUAL(std::string("a100"), parts[1].partition);
        tula::PolicySpec pol;
        pol.policy = tula::Policy::Cost;
        const tula::Plan site = tula::plan_hardware_site(tula::Config{}, parts, 0, 0, 0, pol);
        std::set<std::string> seen;
        for (const tula::HardwareSpec& h : parts) {
            tula::HardwareSpec alone = h;
            alone.partition.clear();
            const tula::Plan one = tula::plan_hardware(tula::Config{}, alone, 0, 0, 0, pol);
            for (const auto& c : site.candidates) {
                if (c.partition != h.partition) continue;
                seen.insert(c.partition);
                CPPUNIT_ASSERT_EQUAL(8, c.gpus_per_node);
                bool found = false;
                for (const auto& o : one.candidates)
                    if (o.nodes == c.nodes && o.global_batch == c.global_batch) {
                        found = true;
                        CPPUNIT_ASSERT_DOUBLES_EQUAL(o.total_seconds, c.total_seconds, 1e-9 * o.total_seconds);
                        CPPUNIT_ASSERT_DOUBLES_EQUAL(o.cost, c.cost, 1e-9 * o.cost);
                    }
                CPPUNIT_ASSERT(found);
            }
        }
        CPPUNIT_ASSERT_EQUAL(size_t(2), seen.size());
        // bad partitions: one message naming the key
        const std::string e1 = error_of([] { tula::parse_hardware_partitions(R"({"nodes": 2, "partitions": [], "workload": {}})"); });
        CPPUNIT_ASSERT_MESSAGE(e1, contains(e1, "inside each partition"));
        std::string dup = text;
        dup.replace(dup.find("\"a100\""), 6, "\"h100\"");
        const std::string e2 = error_of([&] { tula::parse_hardware_partitions(dup); });
        CPPUNIT_ASSERT_MESSAGE(e2, contains(e2, "described twice"));
        std::string bad = text;
        bad.replace(bad.find("312e12"), 6, "\"fast\"");
        const std::string e3 = error_of([&] { tula::parse_hardware_partitions(bad); });
        CPPUNIT_ASSERT_MESSAGE(e3, contains(e3, "partitions[1].device.peak_flops"));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaSitePlanTest);
