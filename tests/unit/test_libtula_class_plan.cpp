// Unit tests of profiles kept per hardware class (fit_classes, site_targets from per-class fits)
// and of runs matched to candidates by their shape (nodes, ranks per node): each class's
// partition against the plan of that class's profile alone, the unknown-class rows as a
// fallback, and the time calibration of a 2-node x 2-rank run.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <map>
#include <string>
#include <tuple>

#include "planner_fixtures.hpp"
#include "tula/conf.hpp"
#include "tula/planner.hpp"
#include "tula/predict.hpp"

using namespace planner_test;

namespace {

// Exact linear compute rows t0 + t1 b (seconds per iteration) of class `cls` at local batches
// 16 .. 256.
std::vector<tula::ComputeSample> linear_rows(const std::string& cls, double t0, double t1) {
    std::vector<tula::ComputeSample> out;
    for (int b : {16, 32, 64, 128, 256}) {
        tula::ComputeSample c;
        c.workload = "lenet5@fashion-mnist";
        c.local_batch = b;
        c.seconds_per_iter = t0 + t1 * b;
        c.hardware_class = cls;
        out.push_back(c);
    }
    return out;
}

// Rows of `ranks` ranks at once, `per_node` of them on each node, each `factor` times the
// one-rank time t0 + t1 b at local batches 16 .. 256.
std::vector<tula::ComputeSample> together_rows(int ranks, int per_node, double factor, double t0, double t1) {
    std::vector<tula::ComputeSample> out = linear_rows("", t0, t1);
    for (auto& c : out) {
        c.ranks = ranks;
        c.ranks_per_node = per_node;
        c.seconds_per_iter *= factor;
    }
    return out;
}

template <class T>
std::vector<T> join(std::vector<T> a, const std::vector<T>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

// (nodes, global batch) -> (seconds per iteration, total seconds) of a plan's candidates on `partition`.
std::map<std::pair<int, int>, std::pair<double, double>> by_config(const tula::Plan& p, const std::string& partition) {
    std::map<std::pair<int, int>, std::pair<double, double>> out;
    for (const auto& c : p.candidates)
        if (c.partition == partition) out[{c.nodes, c.global_batch}] = {c.iter_seconds, c.total_seconds};
    return out;
}

// The plan of one partition of `conf_text` from `compute` and `allreduce` alone (rows without a
// class, as a database before classes).
tula::Plan plan_alone(const std::string& conf_text, std::vector<tula::ComputeSample> compute,
                      std::vector<tula::AllreduceSample> allreduce, const tula::PlanRequest& r) {
    for (auto& c : compute) c.hardware_class.clear();
    for (auto& a : allreduce) a.hardware_class.clear();
    const tula::Config cfg = tula::parse_config(conf_text);
    return tula::make_site_plan(r, tula::site_targets(cfg, tula::fit_classes(cfg, compute, allreduce, nullptr)));
}

const char* const kTwo =
    "[partition slow]\nnodes = 4\nhardware_class = old\n[partition fast]\nnodes = 4\nhardware_class = new\n";
const char* const kSlowAlone = "[partition slow]\nnodes = 4\nhardware_class = old\n";
const char* const kFastAlone = "[partition fast]\nnodes = 4\nhardware_class = new\n";

}  // namespace

class LibtulaClassPlanTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaClassPlanTest);
    CPPUNIT_TEST(test_two_classes_each_from_its_own);
    CPPUNIT_TEST(test_unknown_class_fallback);
    CPPUNIT_TEST(test_allreduce_from_figures);
    CPPUNIT_TEST(test_run_shape_calibrates_its_candidate);
    CPPUNIT_TEST(test_ranks_per_node_compute_profile);
    CPPUNIT_TEST(test_run_checked_against_its_class);
    CPPUNIT_TEST_SUITE_END();

public:
    // Two classes in one set of rows: each partition's candidates equal the plan of its class's
    // rows alone (no scaling, no mixing), so the two differ.
    void test_two_classes_each_from_its_own() {
        const auto compute = join(linear_rows("old", 4e-3, 3e-4), linear_rows("new", 1e-3, 5e-5));
        const auto allreduce = join(ring_samples(1e-4, 2e-9, "old"), ring_samples(2e-5, 2.5e-10, "new"));
        const tula::Config cfg = tula::parse_config(kTwo);
        std::vector<std::string> warnings;
        const auto fits = tula::fit_classes(cfg, compute, allreduce, &warnings);
        CPPUNIT_ASSERT_MESSAGE(warnings.empty() ? "" : warnings[0], warnings.empty());
        CPPUNIT_ASSERT(fits.at("old").own && fits.at("new").own);
        const auto ts = tula::site_targets(cfg, fits);
        CPPUNIT_ASSERT(ts[0].scaled_from.empty() && ts[1].scaled_from.empty());
        const tula::PlanRequest r = request(workload(61706, 60000), 5, 1, 4, {64, 256, 1024});
        const tula::Plan both = tula::make_site_plan(r, ts);
        for (const auto& [name, conf, cls] : {std::make_tuple("slow", kSlowAlone, "old"), std::make_tuple("fast", kFastAlone, "new")}) {
            std::vector<tula::ComputeSample> c;
            std::vector<tula::AllreduceSample> a;
            for (const auto& x : compute)
                if (x.hardware_class == cls) c.push_back(x);
            for (const auto& x : allreduce)
                if (x.hardware_class == cls) a.push_back(x);
            const auto want = by_config(plan_alone(conf, c, a, r), name);
            const auto got = by_config(both, name);
            CPPUNIT_ASSERT(!want.empty());
            CPPUNIT_ASSERT_EQUAL(want.size(), got.size());
            for (const auto& [k, v] : want) {
                CPPUNIT_ASSERT_DOUBLES_EQUAL(v.first, got.at(k).first, 1e-12 * v.first);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(v.second, got.at(k).second, 1e-9 * v.second);
            }
        }
        // the two classes really differ: the same configuration is faster on "new"
        CPPUNIT_ASSERT(by_config(both, "fast").at({2, 256}).first < 0.5 * by_config(both, "slow").at({2, 256}).first);
    }

    // A class without rows of its own takes the unknown-class rows (not another class's); a
    // class with rows of its own ignores them. Without unknown rows it is scaled from the
    // profiled class when tula.conf gives the figures, else left out with the reason.
    void test_unknown_class_fallback() {
        const auto own = linear_rows("old", 4e-3, 3e-4);
        const auto unknown = linear_rows("", 2e-3, 1e-4);
        const auto ar_old = ring_samples(1e-4, 2e-9, "old"), ar_unknown = ring_samples(3e-5, 5e-10, "");
        const tula::Config cfg = tula::parse_config(kTwo);
        const auto fits = tula::fit_classes(cfg, join(own, unknown), join(ar_old, ar_unknown), nullptr);
        CPPUNIT_ASSERT(fits.at("old").own);
        CPPUNIT_ASSERT(!fits.at("new").own);
        const tula::PlanRequest r = request(workload(61706, 60000), 5, 1, 4, {64, 256, 1024});
        const tula::Plan both = tula::make_site_plan(r, tula::site_targets(cfg, fits));
        const auto want_fast = by_config(plan_alone(kFastAlone, unknown, ar_unknown, r), "fast");
        const auto want_slow = by_config(plan_alone(kSlowAlone, own, ar_old, r), "slow");
        for (const auto& [want, name] : {std::make_pair(want_fast, "fast"), std::make_pair(want_slow, "slow")}) {
            const auto got = by_config(both, name);
            CPPUNIT_ASSERT_EQUAL(want.size(), got.size());
            for (const auto& [k, v] : want) CPPUNIT_ASSERT_DOUBLES_EQUAL(v.first, got.at(k).first, 1e-12 * v.first);
        }
        // no unknown rows: "new" is scaled from "old" by the figures (compute x P_old / P_new) ...
        const tula::Config figs = tula::parse_config(
            "[partition slow]\nnodes = 4\nhardware_class = old\npeak_flops = 1e12\n"
            "[partition fast]\nnodes = 4\nhardware_class = new\npeak_flops = 4e12\n");
        const auto ts = tula::site_targets(figs, tula::fit_classes(figs, own, ar_old, nullptr));
        CPPUNIT_ASSERT_EQUAL(std::string("old"), ts[1].scaled_from);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.25, ts[1].compute_factor, 1e-15);
        // ... and left out without them
        const auto lo = tula::site_targets(cfg, tula::fit_classes(cfg, own, ar_old, nullptr));
        CPPUNIT_ASSERT(contains(lo[1].left_out, "no profile of class new"));
        // a database without classes plans as before: its rows are the first partition's class's
        const auto legacy = tula::site_targets(figs, tula::fit_classes(figs, unknown, ar_unknown, nullptr));
        CPPUNIT_ASSERT(legacy[0].scaled_from.empty() && legacy[0].own_profile);
        CPPUNIT_ASSERT_EQUAL(std::string("old"), legacy[1].scaled_from);
        CPPUNIT_ASSERT(!legacy[1].own_profile);
        // narrowed to "fast" (a job's --partition, Config::site_before_narrowing): fast is still
        // scaled from the site's first class, not taken for the owner of the rows without class
        tula::Config narrow = figs;
        narrow.site_before_narrowing = figs.site_partitions();
        narrow.partitions.erase(narrow.partitions.begin());
        const auto alone = tula::site_targets(narrow, tula::fit_classes(narrow, unknown, ar_unknown, nullptr));
        CPPUNIT_ASSERT_EQUAL(size_t(1), alone.size());
        CPPUNIT_ASSERT_EQUAL(std::string("fast"), alone[0].conf.name);
        CPPUNIT_ASSERT_EQUAL(std::string("old"), alone[0].scaled_from);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(legacy[1].compute_factor, alone[0].compute_factor, 0);
        CPPUNIT_ASSERT(!alone[0].own_profile);
    }

    // A class with compute rows but no across-node allreduce sample (and no unknown-class one)
    // takes another class's fitted allreduce scaled by the link_bandwidth ratio, else the ring at
    // its own link_bandwidth (alpha 0, beta 1 / bandwidth), else none (1 node only); the source
    // is named in a warning and the upper end of the step takes that allreduce 1.5 times.
    void test_allreduce_from_figures() {
        const auto compute = join(linear_rows("old", 4e-3, 3e-4), linear_rows("new", 1e-3, 5e-5));
        const auto ar_old = ring_samples(1e-4, 2e-9, "old");
        const std::string slow = "[partition slow]\nnodes = 4\nhardware_class = old\n";
        const std::string fast = "[partition fast]\nnodes = 4\nhardware_class = new\n";
        const tula::PlanRequest r = request(workload(61706, 60000), 5, 1, 4, {64, 256, 1024});
        auto most_nodes = [&](const std::vector<tula::PartitionTarget>& ts) {
            int most = 0;
            for (const auto& c : tula::make_site_plan(r, ts).candidates)
                if (c.partition == "fast") most = std::max(most, c.nodes);
            return most;
        };
        {  // both give link_bandwidth: old's fit, beta x 1e9 / 4e9, alpha kept
            const tula::Config cfg = tula::parse_config(slow + "link_bandwidth = 1e9\n" + fast + "link_bandwidth = 4e9\n");
            std::vector<std::string> warnings;
            const auto fits = tula::fit_classes(cfg, compute, ar_old, &warnings);
            const tula::AllreduceModel& o = *fits.at("old").allreduce;
            CPPUNIT_ASSERT(fits.at("old").allreduce_from.empty());
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1e-4, o.alpha, 1e-10);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2e-9, o.beta, 1e-15);
            const auto& n = fits.at("new");
            CPPUNIT_ASSERT(n.allreduce);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(o.alpha, n.allreduce->alpha, 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(o.beta / 4, n.allreduce->beta, 1e-24);
            CPPUNIT_ASSERT(contains(n.allreduce_from, "class old's allreduce profile scaled by tula.conf's link_bandwidth"));
            CPPUNIT_ASSERT_EQUAL(size_t(1), warnings.size());
            CPPUNIT_ASSERT(contains(warnings[0], "class new: no across-node allreduce profile; the allreduce is taken from class old's"));
            CPPUNIT_ASSERT(contains(warnings[0], "; `tula profile allreduce` on partition fast measures it"));
            const auto ts = tula::site_targets(cfg, fits);
            CPPUNIT_ASSERT_EQUAL(n.allreduce_from, ts[1].allreduce_from);
            CPPUNIT_ASSERT(ts[0].allreduce_from.empty());
            CPPUNIT_ASSERT_EQUAL(4, most_nodes(ts));
            // the step is the modelled one; only its upper end takes the allreduce 1.5 times
            tula::PartitionTarget measured = ts[1];
            measured.allreduce_from.clear();
            const tula::Workload w = workload(61706, 60000);
            const tula::Predictor fig(ts[1], w, tula::OverlapModel{}, tula::TimeCalibration{});
            const tula::Predictor own(measured, w, tula::OverlapModel{}, tula::TimeCalibration{});
            const double comm = n.allreduce->seconds(2, 4.0 * 61706);
            const tula::StepPrediction a = fig.step(2, 1, 64), b = own.step(2, 1, 64);
            CPPUNIT_ASSERT(comm > 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(b.seconds, a.seconds, 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(b.lower, a.lower, 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(b.upper + 0.5 * comm, a.upper, 1e-12);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(fig.step(1, 1, 64).upper, own.step(1, 1, 64).upper, 0);
        }
        {  // only new gives it: the ring at 4e9 bytes/s
            const tula::Config cfg = tula::parse_config(slow + fast + "link_bandwidth = 4e9\n");
            const auto fits = tula::fit_classes(cfg, compute, ar_old, nullptr);
            const auto& n = fits.at("new");
            CPPUNIT_ASSERT(n.allreduce);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, n.allreduce->alpha, 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0 / 4e9, n.allreduce->beta, 1e-24);
            CPPUNIT_ASSERT(contains(n.allreduce_from, "tula.conf's link_bandwidth of partition fast (4e+09 bytes/s"));
            // 2 (K-1)/K n beta of the ring on 4 nodes
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5 * 1e6 / 4e9, n.allreduce->seconds(4, 1e6), 1e-15);
        }
        {  // neither: 1 node only, as without figures
            const tula::Config cfg = tula::parse_config(slow + fast);
            std::vector<std::string> warnings;
            const auto fits = tula::fit_classes(cfg, compute, ar_old, &warnings);
            CPPUNIT_ASSERT(!fits.at("new").allreduce);
            CPPUNIT_ASSERT(warnings.empty());
            CPPUNIT_ASSERT_EQUAL(1, most_nodes(tula::site_targets(cfg, fits)));
        }
    }

    // Runs are matched to candidates by (nodes, ranks per node): a run of 2 nodes x 2 ranks at
    // ratio 1.6 and one of 4 nodes x 1 rank (as many ranks) at ratio 0.8. The 2 x 2 candidate
    // takes 1.6, the 4 x 1 candidate 0.8 and the 2 x 1 candidate the median of the multi-rank
    // runs, 1.2. The local batch of the 2 x 2 run is B / 4.
    void test_run_shape_calibrates_its_candidate() {
        const tula::Workload w = workload(61706, 60000);
        const tula::ComputeModel cm = tula_test::linear_compute(3e-3, 2e-4, 16, 256);
        const tula::AllreduceModel am = alpha_beta(5e-5, 1e-9);
        const double n = 4.0 * 61706;
        const int B = 256;
        const double iters = std::floor(60000.0 / B) * 2;  // 2 epochs
        auto run = [&](int K, int R, double ratio, double created) {
            const double b = double(B) / (K * R);
            const double step = (3e-3 + 2e-4 * b) + 2 * (K - 1) * 5e-5 + 2.0 * (K - 1) / K * n * 1e-9;
            tula::RunRecord r = tula_test::run_record("", w.name, K, B, 2, ratio * step * iters, created);
            r.ranks_per_node = R;
            return r;
        };
        const tula::RunRecord r22 = run(2, 2, 1.6, 1), r41 = run(4, 1, 0.8, 2);
        const auto samples = tula::iteration_samples({&r22, &r41}, w, cm, &am);
        CPPUNIT_ASSERT_EQUAL(size_t(2), samples.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(64.0, samples[0].local_batch, 0.0);
        CPPUNIT_ASSERT_EQUAL(2, samples[0].ranks_per_node);
        const tula::TimeCalibration cal = tula::TimeCalibration::fit(samples, tula::OverlapModel{});
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.6, cal.factor_at(2, 2, 64), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, cal.factor_at(4, 1, 64), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, cal.factor_at(2, 1, 128), 1e-12);
        // in a plan: a partition of 2 ranks per node and one of 1
        tula::PlanRequest r = request(w, 2, 1, 4, {B});
        r.calibration = cal;
        std::vector<tula::PartitionTarget> ts(2);
        for (int i = 0; i < 2; ++i) {
            ts[i].conf.name = i ? "duo" : "solo";
            ts[i].conf.nodes = 4;
            ts[i].conf.ranks_per_node = i + 1;
            ts[i].compute = cm;
            ts[i].allreduce = am;
        }
        const tula::Plan p = tula::make_site_plan(r, ts);
        int checked = 0;
        for (const auto& c : p.candidates) {
            const double want = c.ranks_per_node == 2 && c.nodes == 2 ? 1.6
                                : c.ranks_per_node == 1 && c.nodes == 4 ? 0.8
                                : c.nodes * c.ranks_per_node > 1 ? 1.2 : cal.shape_factor(1, 1);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.time_factor, 1e-12);
            if ((c.nodes == 2 && c.ranks_per_node == 2) || (c.nodes == 2 && c.ranks_per_node == 1)) ++checked;
        }
        CPPUNIT_ASSERT_EQUAL(2, checked);
    }

    // A compute profile of 2 ranks sharing each node (2 nodes x 2 ranks, 1.5 x the one-rank
    // time) serves candidates of 2 ranks per node on 2 or more nodes; a candidate of 1 rank per
    // node keeps the profile of ranks on separate nodes (4 ranks, 1.1 x), as does a 1 x 2
    // candidate (fewer ranks than that profile timed; its 2 ranks then take the 2-rank one-per-node
    // profile, 1.05 x).
    void test_ranks_per_node_compute_profile() {
        const double t0 = 2e-3, t1 = 1e-4;
        const auto rows = join(join(linear_rows("", t0, t1), together_rows(4, 2, 1.5, t0, t1)),
                               join(together_rows(4, 1, 1.1, t0, t1), together_rows(2, 1, 1.05, t0, t1)));
        const tula::ComputeModel m = tula::ComputeModel::fit(rows);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, m.concurrency_at(2, 2, 64), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, m.concurrency_at(3, 2, 64), 1e-9);  // the largest profiled <= 6 ranks
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, m.concurrency_at(4, 1, 64), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.05, m.concurrency_at(1, 2, 64), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.05, m.concurrency_factor(2, 64), 1e-9);
        // in a plan: compute seconds of a 2 x 2 candidate at local batch b are 1.5 (t0 + t1 b)
        std::vector<tula::PartitionTarget> ts(1);
        ts[0].conf.name = "duo";
        ts[0].conf.nodes = 2;
        ts[0].conf.ranks_per_node = 2;
        ts[0].compute = m;
        ts[0].allreduce = alpha_beta(0, 0);
        const tula::Plan p = tula::make_site_plan(request(workload(61706, 60000), 1, 2, 2, {256}), ts);
        CPPUNIT_ASSERT_EQUAL(size_t(1), p.candidates.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5 * (t0 + t1 * 64), p.candidates[0].iter_seconds, 1e-12);
    }

    // The online refit checks a run against the profile of its own class (a partition of
    // tula.conf): a 1-node run of class "new" at batch 64 is predicted from the "new" rows, as
    // Predictor::run with the other run's calibration gives it; one of unknown class from all
    // rows together, which differs.
    void test_run_checked_against_its_class() {
        TempDir d;
        const std::string path = d / "p.db";
        {
            auto db = lenet5_db(path);
            for (const auto& c : join(linear_rows("old", 4e-3, 3e-4), linear_rows("new", 1e-3, 5e-5))) db.add_compute(c);
            tula::RunRecord r = tula_test::run_record("7", "lenet5@fashion-mnist", 1, 64, 1, 3.0, 1700000000);
            r.hardware_class = "new";
            db.add_run(r);
            r.job_id = "8";
            r.hardware_class = "";
            db.add_run(r);
        }
        const auto runs = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadOnly).runs();
        const tula::Config cfg = tula::parse_config(kTwo);
        const auto rows = join(linear_rows("old", 4e-3, 3e-4), linear_rows("new", 1e-3, 5e-5));
        for (const auto& r : runs) {
            std::vector<tula::RunRecord> others;
            for (const auto& o : runs)
                if (o.job_id != r.job_id) others.push_back(o);
            const tula::TimeModels m = tula::fit_time_models(cfg, workload(61706, 60000), rows, {}, others, {}, nullptr);
            const tula::PartitionTarget t = m.run_target(r.hardware_class);
            const double want = tula::Predictor(m, t).run(r).seconds;
            const auto c = tula::check_recorded_run(cfg, {path}, r, nullptr);
            CPPUNIT_ASSERT_MESSAGE(r.job_id, c.has_value());
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c->predicted_seconds, 1e-9 * want);
            const double own = 1e-3 + 5e-5 * 64;  // the "new" rows' step at local batch 64
            if (r.job_id == "7") CPPUNIT_ASSERT_DOUBLES_EQUAL(own, t.compute.seconds_per_iter(64), 1e-12);
            else CPPUNIT_ASSERT(std::fabs(t.compute.seconds_per_iter(64) - own) > 0.1 * own);
        }
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaClassPlanTest);
