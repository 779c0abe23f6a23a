// Unit tests of the models fitted over whole runs (models.hpp): the overlap exponent gamma, the memory model, convergence (E(B) = E_min (1 + B/B_noise)), the accuracy model and the time calibration by node count and local batch, against hand values.
#include <cppunit/extensions/HelperMacros.h>

#include "models_fixtures.hpp"

using namespace models_test;

class LibtulaCalibrationTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaCalibrationTest);
    CPPUNIT_TEST(test_overlap_gamma);
    CPPUNIT_TEST(test_memory);
    CPPUNIT_TEST(test_convergence);
    CPPUNIT_TEST(test_accuracy);
    CPPUNIT_TEST(test_time_calibration);
    CPPUNIT_TEST(test_time_calibration_curve);
    CPPUNIT_TEST(test_time_calibration_by_nodes);
    CPPUNIT_TEST(test_synced_profile_per_shape);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_overlap_gamma() {
        CPPUNIT_ASSERT_EQUAL(1.0, tula::OverlapModel::fit({}).gamma);
        CPPUNIT_ASSERT_EQUAL(0, tula::OverlapModel::fit({}).samples);
        for (double gamma : {1.5, 3.0, 6.0}) {
            std::mt19937 rng(static_cast<unsigned>(gamma * 10));
            std::uniform_real_distribution<double> u(0.01, 0.1);
            std::normal_distribution<double> noise(0.0, 0.002);
            std::vector<tula::IterationSample> s;
            for (int i = 0; i < 30; ++i) {
                tula::IterationSample q;
                q.compute_seconds = u(rng);
                q.comm_seconds = u(rng);
                q.measured_seconds = std::pow(std::pow(q.compute_seconds, gamma) + std::pow(q.comm_seconds, gamma), 1 / gamma) *
                                     (1 + noise(rng));
                s.push_back(q);
            }
            const auto m = tula::OverlapModel::fit(s);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(gamma, m.gamma, 0.05 * gamma);
            CPPUNIT_ASSERT_EQUAL(30, m.samples);
            const double want = std::pow(std::pow(0.03, m.gamma) + std::pow(0.05, m.gamma), 1 / m.gamma);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, m.combine(0.03, 0.05), 1e-12);
        }
        // Measured = sum (no overlap): gamma at its lower bound 1.
        std::vector<tula::IterationSample> s;
        for (int i = 1; i <= 5; ++i) s.push_back({0.01 * i, 0.02, 0.01 * i + 0.02});
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, tula::OverlapModel::fit(s).gamma, 0.01);
        CPPUNIT_ASSERT(throws([] { tula::OverlapModel::fit({{0.01, NAN, 0.02}}); }));
        CPPUNIT_ASSERT(throws([] { tula::OverlapModel::fit({{-0.01, 0.01, 0.02}}); }));
    }

    void test_memory() {
        tula::Workload w;
        w.name = "lenet5@fashion-mnist";
        w.model = "lenet5";
        w.params = 61706;
        w.activation_floats = 15386;
        const auto m = tula::MemoryModel::from_workload(w);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(16.0 * 61706, m.static_bytes, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(8.0 * 15386, m.per_example_bytes, 1e-9);
        w.activation_floats = 0;  // not written by tula-train (a database older than schema 6)
        CPPUNIT_ASSERT(throws([&] { tula::MemoryModel::from_workload(w); }));
        // Fit recovers known parameters.
        std::vector<std::pair<int, double>> s;
        for (int b : {8, 32, 128, 512}) s.push_back({b, 5e8 + 3e6 * b});
        const auto f = tula::MemoryModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5e8, f.static_bytes, 1.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3e6, f.per_example_bytes, 1e-6);
        CPPUNIT_ASSERT(throws([] { tula::MemoryModel::fit({{8, 1e6}}); }));
        CPPUNIT_ASSERT(throws([] { tula::MemoryModel::fit({{8, 1e6}, {16, NAN}}); }));
        // Largest batch: against a naive scan.
        for (double dev : {5e8 + 3e6 * 1000 + 1, 8e8, 5.01e8, 1e8}) {
            int naive = 0;
            for (int b = 1; b < 100000; ++b)
                if (f.bytes(b) <= dev) naive = b;
            CPPUNIT_ASSERT_EQUAL(naive, f.max_local_batch(dev));
        }
        CPPUNIT_ASSERT(f.max_local_batch(0) > 1000000);
    }

    void test_convergence() {
        // McCandlish et al. 2018 eq. 2.11: (S/S_min - 1)(E/E_min - 1) = 1 with S = E / B.
        tula::ConvergenceModel c;
        c.noise_scale = 700;
        const double emin = 3.0;  // epochs as B -> 0
        for (double B : {16.0, 256.0, 4096.0}) {
            const double E = c.epochs_for(B, emin, 0.0);
            const double S = E / B, smin = emin / c.noise_scale;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, (S / smin - 1) * (E / emin - 1), 1e-9);
        }
        CPPUNIT_ASSERT_DOUBLES_EQUAL(10.0, c.epochs_for(128, 10.0, 128), 1e-12);

        // from_runs: no measured run -> the fallback (a bad fallback -> the built-in default)
        std::vector<tula::RunRecord> runs(3);
        runs[1].noise_scale = std::nan("");
        runs[2].noise_scale = -3;
        auto m = tula::ConvergenceModel::from_runs(runs, 333);
        CPPUNIT_ASSERT_EQUAL(333.0, m.noise_scale);
        CPPUNIT_ASSERT_EQUAL(0, m.measured_runs);
        CPPUNIT_ASSERT_EQUAL(tula::ConvergenceModel::kDefaultNoiseScale,
                             tula::ConvergenceModel::from_runs(runs, std::nan("")).noise_scale);
        // two measured runs: the mean of the two (the median of an even count)
        runs[0].noise_scale = 100;
        runs.push_back(runs[0]);
        runs.back().noise_scale = 300;
        m = tula::ConvergenceModel::from_runs(runs, 333);
        CPPUNIT_ASSERT_EQUAL(200.0, m.noise_scale);
        CPPUNIT_ASSERT_EQUAL(std::string("measured in 2 runs"), m.origin());
        CPPUNIT_ASSERT(std::isnan(tula::median({})));
        CPPUNIT_ASSERT_EQUAL(2.0, tula::median({3, 1, 2}));

        // The median's distribution-free interval: [min, max] of n values covers it with
        // probability 1 - P(all n above) - P(all n below) = 1 - 2 / 2^n.
        CPPUNIT_ASSERT_EQUAL(100.0, m.noise_scale_low);
        CPPUNIT_ASSERT_EQUAL(300.0, m.noise_scale_high);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.5, m.confidence, 1e-15);
        std::vector<tula::RunRecord> five(5);
        const double v[] = {50, 400, 120, 90, 260};
        for (int i = 0; i < 5; ++i) five[i].noise_scale = v[i];
        m = tula::ConvergenceModel::from_runs(five, 333);
        CPPUNIT_ASSERT_EQUAL(120.0, m.noise_scale);
        CPPUNIT_ASSERT_EQUAL(50.0, m.noise_scale_low);
        CPPUNIT_ASSERT_EQUAL(400.0, m.noise_scale_high);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0 - 2.0 / 32.0, m.confidence, 1e-15);
        // one value or none: no interval
        m = tula::ConvergenceModel::from_runs({five[0]}, 333);
        CPPUNIT_ASSERT_EQUAL(0.0, m.confidence);
        CPPUNIT_ASSERT_EQUAL(50.0, m.noise_scale_low);
        CPPUNIT_ASSERT_EQUAL(50.0, m.noise_scale_high);
    }

    void test_accuracy() {
        CPPUNIT_ASSERT(!tula::AccuracyModel::fit({}).known());
        CPPUNIT_ASSERT(std::isnan(tula::AccuracyModel::fit({}).at(64)));
        std::vector<tula::RunRecord> runs;
        for (int B : {32, 64, 256, 1024}) {
            tula::RunRecord r;
            r.global_batch = B;
            r.test_accuracy = 0.95 - 0.01 * std::log2(B);
            runs.push_back(r);
        }
        tula::RunRecord bad;
        bad.global_batch = 64;
        bad.test_accuracy = 0;  // no accuracy recorded: ignored
        runs.push_back(bad);
        const auto a = tula::AccuracyModel::fit(runs);
        CPPUNIT_ASSERT_EQUAL(4, a.runs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.95 - 0.01 * 9, a.at(512), 1e-9);
        // no extrapolation: outside [32, 1024] the value at the nearest end
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.95 - 0.01 * 5, a.at(8), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.95 - 0.01 * 10, a.at(65536), 1e-9);
        // a run at chance level (below half the best run's accuracy) is left out as diverged
        tula::RunRecord diverged;
        diverged.global_batch = 1024;
        diverged.test_accuracy = 0.1;
        runs.push_back(diverged);
        const auto d = tula::AccuracyModel::fit(runs);
        CPPUNIT_ASSERT_EQUAL(4, d.runs);
        CPPUNIT_ASSERT_EQUAL(1, d.diverged);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.95 - 0.01 * 9, d.at(512), 1e-9);
    }

    // measured / predicted per iteration, median of the newest 5, clamped to [0.25, 4]
    void test_time_calibration() {
        tula::OverlapModel ov;  // gamma 1: predicted = compute + comm
        CPPUNIT_ASSERT_EQUAL(1.0, tula::TimeCalibration::fit({}, ov).factor);
        CPPUNIT_ASSERT_EQUAL(0, tula::TimeCalibration::fit({}, ov).runs);
        std::vector<tula::IterationSample> s;
        auto add = [&](double comp, double comm, double ratio) {
            tula::IterationSample q;
            q.compute_seconds = comp;
            q.comm_seconds = comm;
            q.measured_seconds = ratio * (comp + comm);
            s.push_back(q);
        };
        for (int i = 0; i < 3; ++i) add(0.01, 0.002, 2.0);  // old runs: left out
        for (double r : {0.8, 0.7, 0.9, 0.85, 0.75}) add(0.02, 0.001, r);
        const auto c = tula::TimeCalibration::fit(s, ov);
        CPPUNIT_ASSERT_EQUAL(5, c.runs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, c.factor, 1e-12);
        add(0.01, 0, std::nan(""));  // no measured time: skipped
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, tula::TimeCalibration::fit(s, ov).factor, 1e-12);
        std::vector<tula::IterationSample> wild;
        s.swap(wild);
        add(0.01, 0, 10.0);
        CPPUNIT_ASSERT_EQUAL(4.0, tula::TimeCalibration::fit(s, ov).factor);

        // Groups: single-node ratios 1.1, 1.2, 1.3 and multi-node 0.6, 0.7, interleaved.
        std::vector<tula::IterationSample> g;
        auto addn = [&](int nodes, double ratio) {
            tula::IterationSample q;
            q.compute_seconds = 0.01;
            q.comm_seconds = nodes > 1 ? 0.002 : 0.0;
            q.measured_seconds = ratio * (q.compute_seconds + q.comm_seconds);
            q.nodes = nodes;
            g.push_back(q);
        };
        addn(1, 1.1), addn(2, 0.6), addn(1, 1.2), addn(4, 0.7), addn(1, 1.3);
        const auto cg = tula::TimeCalibration::fit(g, ov);
        CPPUNIT_ASSERT_EQUAL(3, cg.runs_single);
        CPPUNIT_ASSERT_EQUAL(2, cg.runs_multi);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, cg.factor_single, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.65, cg.factor_multi, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, cg.factor, 1e-12);  // pooled median of all five
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, cg.shape_factor(1, 1), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.65, cg.shape_factor(3, 1), 1e-12);
        // one multi-node run is too few for the multi-node factor: on another node count the
        // pooled one serves; on its own node count (2) that run's ratio does
        std::vector<tula::IterationSample> one_multi(g.begin(), g.begin() + 3);
        const auto c1 = tula::TimeCalibration::fit(one_multi, ov);
        CPPUNIT_ASSERT_EQUAL(1, c1.runs_multi);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c1.factor, c1.shape_factor(3, 1), 1e-12);
        CPPUNIT_ASSERT(!c1.own_kind(3));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.6, c1.shape_factor(2, 1), 1e-12);
        CPPUNIT_ASSERT(c1.own_nodes(2) && c1.own_kind(2));
        CPPUNIT_ASSERT_EQUAL(1, c1.runs_for(2));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.15, c1.shape_factor(1, 1), 1e-12);
        CPPUNIT_ASSERT(cg.curve_multi.empty());  // no local batches known
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, cg.factor_at(1, 1, 64.0), 1e-12);

        // With a synchronized-step profile of 2 ranks (ratios 1.2 at local batch 32, 1.5 at
        // 128: 1.35 at 64 by log interpolation), a multi-node run's ratio is its residual over
        // the sync factor its prediction carried; single-node runs and runs without a known
        // local batch are taken as they are.
        const std::map<int, std::vector<std::pair<double, double>>> sr{{2, {{32.0, 1.2}, {128.0, 1.5}}}};
        std::vector<tula::IterationSample> h;
        auto addb = [&](int nodes, double b, double ratio) {
            tula::IterationSample q;
            q.compute_seconds = 0.01;
            q.comm_seconds = nodes > 1 ? 0.002 : 0.0;
            q.measured_seconds = ratio * (q.compute_seconds + q.comm_seconds);
            q.nodes = nodes;
            q.local_batch = b;
            h.push_back(q);
        };
        addb(2, 64, 1.35 * 0.9), addb(4, 128, 1.5 * 1.1), addb(1, 64, 1.3);
        const auto cr = tula::TimeCalibration::fit(h, ov, sr);
        CPPUNIT_ASSERT_EQUAL(2, cr.runs_multi);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, cr.curve_multi.size());  // 2 runs: the curve, by construction
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9, cr.curve_multi[0].second, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, cr.curve_multi[1].second, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.3, cr.factor_single, 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, cr.factor, 1e-12);  // median of 0.9, 1.1, 1.3
        // the next 2-node step at local batch 32: the profile's 1.2 times the residual held at 0.9
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2 * 0.9, tula::step_time_factor(cr, sr, 2, 32), 1e-12);
        // without the profile the same runs give their plain ratios
        const auto cp = tula::TimeCalibration::fit(h, ov);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.35 * 0.9, cp.curve_multi[0].second, 1e-12);
    }

    // Runs on the candidate's own node count first (TimeCalibration::by_nodes, models.hpp):
    // a 2-node and a 4-node history with different residuals, each group's newest 5.
    void test_time_calibration_by_nodes() {
        tula::OverlapModel ov;
        std::vector<tula::IterationSample> s;
        auto add = [&](int nodes, double b, double ratio) {
            tula::IterationSample q;
            q.nodes = nodes;
            q.local_batch = b;
            q.compute_seconds = 1e-3 * b;
            q.comm_seconds = 0.01;
            q.measured_seconds = ratio * (q.compute_seconds + q.comm_seconds);
            s.push_back(q);
        };
        // oldest first: two old 2-node runs (left out of the 2-node group by the newest 5), then
        // 2-node ratios 1.10, 1.20, 1.15, 1.05, 1.30 at local batch 64 interleaved with 4-node
        // ratios 0.80, 0.70 at 128
        add(2, 64, 3.0), add(2, 64, 3.0);
        add(2, 64, 1.10), add(4, 128, 0.80), add(2, 64, 1.20), add(2, 64, 1.15), add(4, 128, 0.70), add(2, 64, 1.05),
            add(2, 64, 1.30);
        const auto c = tula::TimeCalibration::fit(s, ov);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, c.by_nodes.size());
        CPPUNIT_ASSERT_EQUAL(5, c.runs_for(2));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.15, c.factor_at(2, 1, 128.0), 1e-12);  // median of its newest 5
        CPPUNIT_ASSERT_EQUAL(2, c.runs_for(4));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.75, c.factor_at(4, 1, 64.0), 1e-12);
        CPPUNIT_ASSERT(!c.by_local_batch(2) && !c.by_local_batch(4));  // one local batch each
        // 3 nodes: no runs of its own, so the multi-node group of the newest 5 of both (1.30,
        // 1.05, 1.15, 1.20 at 64 and 0.70 at 128). Leave-one-out squared log errors: curve 0.3047,
        // median 0.3169 -> its curve, knots (64, median 1.175) and (128, 0.70)
        CPPUNIT_ASSERT(!c.own_nodes(3) && c.own_kind(3) && c.by_local_batch(3));
        CPPUNIT_ASSERT_EQUAL(5, c.runs_for(3));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.175, c.factor_at(3, 1, 32.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.70, c.factor_at(3, 1, 2048.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.15, c.factor_multi, 1e-12);
        // single-node candidates are untouched by the node groups (no single-node runs: pooled)
        CPPUNIT_ASSERT(!c.own_nodes(1));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(c.factor, c.factor_at(1, 1, 64.0), 1e-12);
        // step_time_factor with a 2-rank and a 4-rank synchronized-step profile (flat 1.3 and
        // 2.0): each node count's profile times its own runs' residual
        const std::map<int, std::vector<std::pair<double, double>>> sr{{2, {{64.0, 1.3}}}, {4, {{64.0, 2.0}}}};
        s.clear();
        add(2, 64, 1.3 * 1.2), add(4, 128, 2.0 * 0.8);
        const auto cs = tula::TimeCalibration::fit(s, ov, sr);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.3 * 1.2, tula::step_time_factor(cs, sr, 2, 128.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0 * 0.8, tula::step_time_factor(cs, sr, 4, 32.0), 1e-12);
        // 3 nodes: the 2-rank profile and the multi-node curve (1.2 at 64, 0.8 at 128) at 90
        const double r90 = 1.2 + (0.8 - 1.2) * std::log(90.0 / 64.0) / std::log(2.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.3 * r90, tula::step_time_factor(cs, sr, 3, 90.0), 1e-12);
    }

    // The ratio curve over the local batch (TimeCalibration, models.hpp): used when it predicts
    // the group's runs by leave-one-out at least as well as the median; the expected values are
    // worked out by hand in the comments.
    void test_time_calibration_curve() {
        tula::OverlapModel ov;
        auto sample = [](int nodes, double b, double ratio) {
            tula::IterationSample q;
            q.nodes = nodes;
            q.local_batch = b;
            q.compute_seconds = 1e-3 * b;
            q.comm_seconds = nodes > 1 ? 0.01 : 0.0;
            q.measured_seconds = ratio * (q.compute_seconds + q.comm_seconds);
            return q;
        };
        // Multi-node ratios rising with the local batch: 0.8 at 128, 1.0 at 256, 1.25 at 512.
        // Leave-one-out squared log errors, curve vs median of the other two:
        //   128: curve 1.0 (end value), median 1.125; 256: 1.025 both; 512: curve 1.0, median 0.9
        // -> the curve wins.
        std::vector<tula::IterationSample> s{sample(2, 128, 0.8), sample(4, 256, 1.0), sample(2, 512, 1.25)};
        const auto c = tula::TimeCalibration::fit(s, ov);
        CPPUNIT_ASSERT_EQUAL(size_t{3}, c.curve_multi.size());
        CPPUNIT_ASSERT(c.by_local_batch(2));
        CPPUNIT_ASSERT(!c.by_local_batch(1));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, c.factor_multi, 1e-12);  // the median is still reported
        // a node count without runs of its own (3) gets the multi-node curve
        CPPUNIT_ASSERT(c.by_local_batch(3) && !c.own_nodes(3));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, c.factor_at(3, 1, 32.0), 1e-12);    // held below the first knot
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.25, c.factor_at(3, 1, 8192.0), 1e-12); // and above the last
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, c.factor_at(3, 1, 256.0), 1e-12);
        // between 128 and 256, linear in log b: 0.8 + 0.2 * log2(181 / 128)
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8 + 0.2 * std::log2(181.0 / 128.0), c.factor_at(3, 1, 181.0), 1e-12);
        // 2 nodes: the curve of its own two runs, 0.8 at 128 and 1.25 at 512 (1.025 at 256), and
        // 4 nodes its one run's 1.0 at every local batch
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.025, c.factor_at(2, 1, 256.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.8, c.factor_at(2, 1, 32.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, c.factor_at(4, 1, 512.0), 1e-12);
        CPPUNIT_ASSERT(!c.by_local_batch(4));
        // single-node candidates: no single-node runs, so the pooled median (1.0)
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, c.factor_at(1, 1, 128.0), 1e-12);

        // Zig-zag multi-node ratios 1.0, 1.2, 0.9, 1.1 at 32, 64, 128, 256 (noise, no trend):
        // leave-one-out errors (squared log), curve vs median of the other three:
        //   32: 0.0332 vs 0.0091; 64: 0.0546 vs 0.0332; 128: 0.0600 vs 0.0403; 256: 0.0403 vs 0.0091
        // -> the median (1.05) serves.
        std::vector<tula::IterationSample> z{sample(2, 32, 1.0), sample(2, 64, 1.2), sample(2, 128, 0.9),
                                             sample(2, 256, 1.1)};
        const auto cz = tula::TimeCalibration::fit(z, ov);
        CPPUNIT_ASSERT(cz.curve_multi.empty());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.05, cz.factor_at(2, 1, 64.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.05, cz.factor_at(2, 1, 1000.0), 1e-12);

        // Two runs at different local batches: leave-one-out cannot tell the two apart (each is
        // predicted by the other's ratio either way), so the curve serves.
        std::vector<tula::IterationSample> two{sample(2, 32, 1.2), sample(3, 64, 0.9)};
        const auto c2 = tula::TimeCalibration::fit(two, ov);
        CPPUNIT_ASSERT_EQUAL(size_t{2}, c2.curve_multi.size());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, c2.factor_at(4, 1, 16.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.05, c2.factor_at(4, 1, std::sqrt(32.0 * 64.0)), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9, c2.factor_at(4, 1, 64.0), 1e-12);
        // on 2 and 3 nodes each run's own ratio, at every local batch
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.2, c2.factor_at(2, 1, 64.0), 1e-12);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.9, c2.factor_at(3, 1, 32.0), 1e-12);
        // two runs at the SAME local batch: one knot, no curve
        std::vector<tula::IterationSample> same{sample(2, 64, 1.2), sample(2, 64, 0.9)};
        CPPUNIT_ASSERT(tula::TimeCalibration::fit(same, ov).curve_multi.empty());
        // single-node runs keep their median even with a trend (they are what the profile measured)
        std::vector<tula::IterationSample> one{sample(1, 128, 0.8), sample(1, 256, 1.0), sample(1, 512, 1.25)};
        const auto c1 = tula::TimeCalibration::fit(one, ov);
        CPPUNIT_ASSERT(!c1.by_local_batch(1));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, c1.factor_at(1, 1, 128.0), 1e-12);
        // the curve's factor is clamped like the median's
        std::vector<tula::IterationSample> wild{sample(2, 64, 9.0), sample(2, 128, 1.0)};
        CPPUNIT_ASSERT_DOUBLES_EQUAL(tula::TimeCalibration::kMax, tula::TimeCalibration::fit(wild, ov).factor_at(2, 1, 64.0),
                                     1e-12);
    }

    // The synchronized-step profile per shape (SyncedRatios, step_synced_ratios): a profile of 3
    // nodes x 2 ranks whose synced step is 2x the planner's modelled step of that shape
    // (compute x the 2-rank-per-node concurrency, the within-node and the across-node
    // allreduce) gives 3 x 2 steps the factor 2, and 4 x 2 steps too (the largest profiled K),
    // 2 x 2 steps the 1-node 2-rank profile's 1.5; the one-rank-per-node profile of 3 ranks
    // (1.25) keeps serving 3 x 1 and, with no 3-rank-per-node profile, 1 x 3. A 1-node 2-rank
    // profile needs no across-node model.
    void test_synced_profile_per_shape() {
        auto t = [](double b) { return 1e-3 + 1e-4 * b; };
        std::vector<tula::ComputeSample> all;
        for (int b : {16, 32, 64, 128}) all.push_back(cs(b, t(b)));
        auto at_once = [&](int ranks, int R, double conc) {
            tula::ComputeSample s = cs(32, conc * t(32));
            s.ranks = ranks;
            s.ranks_per_node = R;
            all.push_back(s);
            return all.size() - 1;
        };
        const size_t i32 = at_once(6, 2, 1.5), i31 = at_once(3, 1, 1.0), i12 = at_once(2, 2, 1.2);
        const double n = 4000, bw = 1e8;  // gradient bytes, within-node bytes/s
        const auto am = tula::AllreduceModel::fit({as(2, 1000, 2e-4), as(2, 100000, 3e-4), as(4, 1000, 6e-4),
                                                   as(4, 100000, 8e-4)});
        tula::OverlapModel ov;
        ov.gamma = 2.0;
        const auto m0 = tula::ComputeModel::fit(all);  // no synced times yet: the modelled steps
        auto modelled = [&](int K, int R) {
            return ov.combine(m0.seconds_per_iter(32) * m0.concurrency_at(K, R, 32),
                              tula::hierarchical_allreduce_seconds(&am, K, R, n, bw));
        };
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, m0.concurrency_at(3, 2, 32), 1e-9);  // in the denominator
        all[i32].synced_seconds_per_iter = 2.0 * modelled(3, 2);
        all[i31].synced_seconds_per_iter = 1.25 * modelled(3, 1);
        all[i12].synced_seconds_per_iter = 1.5 * modelled(1, 2);
        const auto m = tula::ComputeModel::fit(all);
        CPPUNIT_ASSERT_EQUAL(size_t{1}, m.synced.size());  // one rank per node: 3 ranks
        CPPUNIT_ASSERT_EQUAL(size_t{2}, m.synced_on_node.at(2).size());  // 2 per node: 1 and 3 nodes
        const auto sr = tula::step_synced_ratios(m, &am, ov, n, bw);
        const tula::TimeCalibration none;
        bool from = false;
        for (double b : {16.0, 32.0, 128.0}) {  // one profiled batch: flat
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0, tula::step_time_factor(none, sr, 3, 2, b, &from), 1e-9);
            CPPUNIT_ASSERT(from);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(2.0, tula::step_time_factor(none, sr, 4, 2, b), 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.25, tula::step_time_factor(none, sr, 3, 1, b), 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.25, tula::step_time_factor(none, sr, 3, b), 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, tula::step_time_factor(none, sr, 2, 2, b), 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, tula::step_time_factor(none, sr, 1, 2, b), 1e-9);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.25, tula::step_time_factor(none, sr, 1, 3, b), 1e-9);  // 3 ranks: 3 x 1's
            CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, tula::step_time_factor(none, sr, 2, 1, b, &from), 0.0);
            CPPUNIT_ASSERT(!from);
        }
        std::pair<int, int> timed;
        CPPUNIT_ASSERT(sr.serving(5, 2, &timed) && timed == std::make_pair(3, 2));
        CPPUNIT_ASSERT(sr.serving(1, 3, &timed) && timed == std::make_pair(3, 1));
        CPPUNIT_ASSERT(!sr.serving(2, 1, &timed) && timed == std::make_pair(0, 0));
        // without an across-node model only the 1-node shape is left
        const auto local = tula::step_synced_ratios(m, nullptr, ov, n, bw);
        CPPUNIT_ASSERT(local.one_per_node.empty() && local.on_node.size() == 1 && local.on_node.at(2).size() == 1);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, tula::step_time_factor(none, local, 1, 2, 32.0), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.5, tula::step_time_factor(none, local, 3, 2, 32.0), 1e-9);
        // the one-rank-per-node form of synced_ratios leaves the on-node knots out
        CPPUNIT_ASSERT(m.synced_ratios([&](int k, double) { return modelled(k, 1); }).on_node.empty());
        // a run of 3 x 2 measured 2.2x its modelled step: its residual over the profile is 1.1
        tula::IterationSample q;
        q.nodes = 3;
        q.ranks_per_node = 2;
        q.local_batch = 32;
        q.compute_seconds = m.seconds_per_iter(32) * m.concurrency_at(3, 2, 32);
        q.comm_seconds = tula::hierarchical_allreduce_seconds(&am, 3, 2, n, bw);
        q.measured_seconds = 2.2 * modelled(3, 2);
        const auto cal = tula::TimeCalibration::fit({q}, ov, sr);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, cal.factor_at(3, 2, 32), 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.2, tula::step_time_factor(cal, sr, 3, 2, 32.0), 1e-9);
    }
};


CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaCalibrationTest);
