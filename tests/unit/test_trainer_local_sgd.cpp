// Unit tests of Local SGD's adaptive batch (Lau et al. 2024): the micro-batch variance
// estimate recovers a known tr(Sigma) of synthetic per-example gradients; sums of two
// "ranks" combine to the sums of all their micro-batches (the law of total variance done by
// the allreduce); the norm test grows the batch on a noisy problem and keeps it on a
// noiseless one; the inner-product test likewise; the batch never shrinks; and a short
// Local SGD run on synthetic data grows its batch monotonically.
#include <cppunit/extensions/HelperMacros.h>

#include <sys/stat.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "dist/local_sgd.hpp"
#include "core/model.hpp"
#include "core/rng.hpp"
#include "test_util.hpp"

using namespace tula::train;

namespace {

// Mean of m per-example gradients G + xi, xi ~ N(0, diag(sd^2)), written to h.
void micro_mean(const std::vector<double>& G, const std::vector<double>& sd, int m, Rng& rng, std::vector<float>& h) {
    h.assign(G.size(), 0.0f);
    for (size_t j = 0; j < G.size(); ++j) {
        double s = 0;
        for (int i = 0; i < m; ++i) s += G[j] + sd[j] * rng.normal();
        h[j] = static_cast<float>(s / m);
    }
}

// Statistics of `micro` micro-batches of m examples from the synthetic problem.
BatchStatistics measure(const std::vector<double>& G, const std::vector<double>& sd, int micro, int m, bool inner,
                        uint64_t seed) {
    Rng rng(seed);
    BatchVariance bv(G.size(), inner);
    std::vector<float> h;
    for (int i = 0; i < micro; ++i) {
        micro_mean(G, sd, m, rng, h);
        bv.add(h.data(), m);
    }
    Comm serial;
    return bv.finish(serial, inner);
}

// 3 epochs of Local SGD (norm test, eta 0.5) of lenet5 (seed 4) on one rank, from global
// batch b0 at rate 0.01 for b0; H local steps, M micro-batches; *w gets the final weights.
std::vector<EpochResult> local_run(const Dataset& tr, const Dataset& te, int b0, int H, int M, bool prefetch,
                                   std::vector<float>* w, const Augment& aug = Augment{}) {
    auto m = build_model("lenet5", Shape{tr.channels, tr.rows, tr.cols}, tr.classes);
    m->init(4);
    TrainConfig cfg;
    cfg.epochs = 3;
    cfg.global_batch = b0;
    cfg.lr.lr = 0.01;
    cfg.lr.base_batch = b0;
    cfg.prefetch = prefetch;
    cfg.augment = aug;
    LocalSgdConfig lc;
    lc.local_steps = H;
    lc.micro_batches = M;
    lc.eta = 0.5;
    Comm serial;
    auto res = train_local_sgd(*m, tr, te, cfg, lc, serial, nullptr);
    if (w) w->assign(m->params(), m->params() + m->num_params());
    return res;
}

}  // namespace

class TrainerLocalSgdTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerLocalSgdTest);
    CPPUNIT_TEST(test_trace_recovered);
    CPPUNIT_TEST(test_ranks_combine_like_one);
    CPPUNIT_TEST(test_norm_test_grows_on_noisy_not_on_noiseless);
    CPPUNIT_TEST(test_inner_test_grows_on_noisy_not_on_noiseless);
    CPPUNIT_TEST(test_batch_follows_need_and_is_capped);
    CPPUNIT_TEST(test_parse);
    CPPUNIT_TEST(test_local_sgd_run_grows_batch);
    CPPUNIT_TEST(test_local_sgd_prefetch_same);
    CPPUNIT_TEST(test_local_sgd_augments);
    CPPUNIT_TEST(test_memory_cap);
    CPPUNIT_TEST(test_cgroup_memory_left);
    CPPUNIT_TEST_SUITE_END();

    // per-example gradient covariance diag(sd^2): tr(Sigma) = sum sd^2, known
    void test_trace_recovered() {
        const int n = 50;
        std::vector<double> G(n, 0.1), sd(n);
        double tr = 0;
        for (int j = 0; j < n; ++j) {
            sd[j] = 0.5 + 0.02 * j;
            tr += sd[j] * sd[j];
        }
        const BatchStatistics st = measure(G, sd, 400, 8, false, 3);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(3200.0, st.examples, 0);
        if (std::fabs(st.trace - tr) > 0.1 * tr)
            CPPUNIT_FAIL("trace estimate " + std::to_string(st.trace) + " vs true " + std::to_string(tr));
        // |g|^2 of the mean of 3200 examples: |G|^2 + tr/3200
        const double g2 = n * 0.01 + tr / 3200.0;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(g2, st.grad_norm2, 0.2 * g2);
    }

    // Two ranks' sums combined == one rank holding all micro-batches: the pooled variance
    // (within + between ranks) is exact, not an approximation.
    void test_ranks_combine_like_one() {
        const int n = 20;
        Rng rng(8);
        std::vector<double> G(n), sd(n, 1.0);
        for (auto& g : G) g = rng.normal();
        BatchVariance a(n, false), b(n, false), all(n, false);
        std::vector<float> h;
        for (int i = 0; i < 6; ++i) {
            const int m = 3 + i;  // unequal sizes
            micro_mean(G, sd, m, rng, h);
            // rank b gets a shifted gradient: a between-rank difference to pool
            if (i >= 3)
                for (auto& v : h) v += 0.5f;
            (i < 3 ? a : b).add(h.data(), m);
            all.add(h.data(), m);
        }
        const BatchStatistics two = batch_statistics(combine_batch_sums({a.sums(), b.sums()}));
        Comm serial;
        const BatchStatistics one = all.finish(serial, false);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(one.trace, two.trace, 1e-9 * one.trace);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(one.grad_norm2, two.grad_norm2, 1e-9 * one.grad_norm2);
        // and against the naive pooled formula sum_i m_i |h_i - g|^2 / (M - 1)
        Rng rng2(8);
        std::vector<double> g(n, 0.0);
        std::vector<std::vector<float>> hs;
        std::vector<int> ms;
        for (auto& v : G) v = rng2.normal();
        for (int i = 0; i < 6; ++i) {
            micro_mean(G, sd, 3 + i, rng2, h);
            if (i >= 3)
                for (auto& v : h) v += 0.5f;
            hs.push_back(h);
            ms.push_back(3 + i);
        }
        double N = 0;
        for (int i = 0; i < 6; ++i) {
            N += ms[i];
            for (int j = 0; j < n; ++j) g[j] += ms[i] * hs[i][j];
        }
        for (auto& v : g) v /= N;
        double naive = 0;
        for (int i = 0; i < 6; ++i)
            for (int j = 0; j < n; ++j) naive += ms[i] * (hs[i][j] - g[j]) * (hs[i][j] - g[j]);
        naive /= 5;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(naive, two.trace, 1e-4 * naive);
        // the within-rank variance: each micro-batch around its own rank's mean, naively,
        // sum_i m_i |h_i - gbar_r(i)|^2 / (M - R), M = 6 micro-batches, R = 2 ranks; the 0.5
        // shift of rank b is between the ranks, so it is in `trace` and not in `trace_within`
        double within = 0;
        for (int r = 0; r < 2; ++r) {
            std::vector<double> gr(n, 0.0);
            double br = 0;
            for (int i = 3 * r; i < 3 * r + 3; ++i) {
                br += ms[i];
                for (int j = 0; j < n; ++j) gr[j] += ms[i] * hs[i][j];
            }
            for (int i = 3 * r; i < 3 * r + 3; ++i)
                for (int j = 0; j < n; ++j) within += ms[i] * (hs[i][j] - gr[j] / br) * (hs[i][j] - gr[j] / br);
        }
        within /= 6 - 2;
        CPPUNIT_ASSERT_DOUBLES_EQUAL(within, two.trace_within, 1e-4 * within);
        // law of total variance: (M - 1) trace = (M - R) trace_within + sum_r b_r |gbar_r - g|^2,
        // the between-rank sum (here mostly the shift) worked out naively
        double between = 0;
        for (int r = 0; r < 2; ++r) {
            double br = 0;
            std::vector<double> gr(n, 0.0);
            for (int i = 3 * r; i < 3 * r + 3; ++i) {
                br += ms[i];
                for (int j = 0; j < n; ++j) gr[j] += ms[i] * hs[i][j];
            }
            for (int j = 0; j < n; ++j) between += br * (gr[j] / br - g[j]) * (gr[j] / br - g[j]);
        }
        CPPUNIT_ASSERT(between > 0.2 * 4 * within);  // the shift is a sizeable part of the pooled sum
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5 * two.trace, 4 * two.trace_within + between, 1e-4 * 5 * two.trace);
        // one rank holding them all: the within-rank variance is the pooled one
        CPPUNIT_ASSERT_DOUBLES_EQUAL(one.trace, one.trace_within, 1e-9 * one.trace);
    }

    void test_norm_test_grows_on_noisy_not_on_noiseless() {
        const int n = 30;
        std::vector<double> G(n, 0.2), noisy(n, 2.0), quiet(n, 0.0);
        // noisy: tr(Sigma)/|G|^2 = 30*4 / (30*0.04) = 100 examples; with eta 0.5 the test wants
        // b >= 100 / 0.25 = 400 > 32 (|g|^2 of 1,600 examples is |G|^2 + 120/1600, about 6 % more)
        const BatchStatistics sn = measure(G, noisy, 200, 8, false, 5);
        const int bn = next_local_batch(BatchTest::Norm, 32, sn, 0.5, 0.5, 100000);
        if (!(bn > 200 && bn < 800)) CPPUNIT_FAIL("noisy problem: batch 32 -> " + std::to_string(bn) + ", expected about 400");
        const BatchStatistics sq = measure(G, quiet, 200, 8, false, 5);
        CPPUNIT_ASSERT(sq.trace < 1e-9);
        CPPUNIT_ASSERT_EQUAL(32, next_local_batch(BatchTest::Norm, 32, sq, 0.5, 0.5, 100000, 0, 32));  // the floor
    }

    void test_inner_test_grows_on_noisy_not_on_noiseless() {
        const int n = 30;
        std::vector<double> G(n, 0.2), noisy(n, 2.0), quiet(n, 0.0);
        const BatchStatistics sn = measure(G, noisy, 200, 8, true, 6);
        CPPUNIT_ASSERT(sn.ip_var > 0);
        // Var(grad f_i . G) = G' Sigma G = 4 |G|^2 = 4.8; / (theta^2 |G|^4 = 0.25 * 1.44): about 13
        // (|g|^2 of 1,600 examples is |G|^2 + 120/1600, close to |G|^2)
        const int bn = next_local_batch(BatchTest::Inner, 2, sn, 0.5, 0.5, 100000);
        if (!(bn > 8 && bn < 25)) CPPUNIT_FAIL("noisy problem: batch 2 -> " + std::to_string(bn) + ", expected about 13");
        const BatchStatistics sq = measure(G, quiet, 200, 8, true, 6);
        CPPUNIT_ASSERT_EQUAL(2, next_local_batch(BatchTest::Inner, 2, sq, 0.5, 0.5, 100000, 0, 2));
    }

    // The batch follows the test's need up and down, between min_batch and max_batch.
    void test_batch_follows_need_and_is_capped() {
        BatchStatistics st;
        st.trace = 100;
        st.grad_norm2 = 1;
        // need = 100 / 0.25 = 400
        CPPUNIT_ASSERT_EQUAL(400, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 1000));
        CPPUNIT_ASSERT_EQUAL(400, next_local_batch(BatchTest::Norm, 500, st, 0.5, 0.5, 1000));  // shrinks to the need
        CPPUNIT_ASSERT_EQUAL(450, next_local_batch(BatchTest::Norm, 500, st, 0.5, 0.5, 1000, 0, 450));  // not below the floor
        CPPUNIT_ASSERT_EQUAL(300, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 300));   // capped
        CPPUNIT_ASSERT_EQUAL(64, next_local_batch(BatchTest::None, 64, st, 0.5, 0.5, 1000));
        // growth cap per round: min(need, floor(factor x b)); 0 and 1 mean no cap
        CPPUNIT_ASSERT_EQUAL(128, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 1000, 2.0));
        CPPUNIT_ASSERT_EQUAL(96, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 1000, 1.5));
        CPPUNIT_ASSERT_EQUAL(400, next_local_batch(BatchTest::Norm, 300, st, 0.5, 0.5, 1000, 2.0));  // need < 2b
        CPPUNIT_ASSERT_EQUAL(400, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 1000, 0.0));
        CPPUNIT_ASSERT_EQUAL(100, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 100, 2.0));    // max_batch first
        st.grad_norm2 = 0;  // no direction: no decision
        CPPUNIT_ASSERT_EQUAL(64, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 1000));
        st.grad_norm2 = NAN;
        CPPUNIT_ASSERT_EQUAL(64, next_local_batch(BatchTest::Norm, 64, st, 0.5, 0.5, 1000));
    }

    void test_parse() {
        CPPUNIT_ASSERT(parse_batch_test("norm") == BatchTest::Norm);
        CPPUNIT_ASSERT(parse_batch_test("inner") == BatchTest::Inner);
        CPPUNIT_ASSERT(parse_batch_test("none") == BatchTest::None);
        CPPUNIT_ASSERT_THROW(parse_batch_test("augmented"), std::invalid_argument);
    }

    // Random labels on random images (synthetic data) are all noise: the norm test must
    // grow the batch; the batch never falls below the starting one; the run stays finite.
    // The noise scale is finite and >= 0: 0 when the unbiased |G|^2 estimate is not above 0
    // (a gradient not resolved above the noise), as it may well be on such data.
    void test_local_sgd_run_grows_batch() {
        const SyntheticSpec spec = parse_synthetic("synthetic:1x12x12:4");
        const Dataset tr = make_synthetic(spec, 512, 1), te = make_synthetic(spec, 64, 2);
        const auto res = local_run(tr, te, 8, 4, 4, true, nullptr);
        CPPUNIT_ASSERT_EQUAL(static_cast<size_t>(3), res.size());
        int prev = 8;
        for (const auto& r : res) {
            CPPUNIT_ASSERT(r.batch >= prev);
            CPPUNIT_ASSERT(std::isfinite(r.train_loss));
        }
        CPPUNIT_ASSERT(res.back().batch > 8);
        CPPUNIT_ASSERT(std::isfinite(res.back().noise_scale) && res.back().noise_scale >= 0);
        // No example is skipped when the batch grows: an epoch trains on consecutive slices of
        // its permutation, so fewer than one (final) global batch of the 512 is left over.
        for (const auto& r : res) {
            const double examples = r.images_per_second * r.seconds;
            CPPUNIT_ASSERT_MESSAGE(std::to_string(examples) + " examples, batch " + std::to_string(r.batch),
                                   512.0 - examples < r.batch + 1e-6);
        }
        CPPUNIT_ASSERT_THROW(local_run(tr, te, 8, 0, 4, true, nullptr), TrainError);
    }

    // The batch grows between averaging rounds; with the prefetching loader the run must be
    // the synchronous one bit for bit (a batch prefetched at the old size is never used).
    void test_local_sgd_prefetch_same() {
        const SyntheticSpec spec = parse_synthetic("synthetic:1x12x12:4");
        const Dataset tr = make_synthetic(spec, 300, 1), te = make_synthetic(spec, 40, 2);
        std::vector<EpochResult> res[2];
        std::vector<float> w[2];
        for (int on = 0; on < 2; ++on) res[on] = local_run(tr, te, 6, 3, 3, on == 1, &w[on]);
        CPPUNIT_ASSERT(res[0].back().batch > 6);  // it grew
        CPPUNIT_ASSERT_EQUAL(res[0].size(), res[1].size());
        for (size_t e = 0; e < res[0].size(); ++e) {
            CPPUNIT_ASSERT_EQUAL(res[0][e].batch, res[1][e].batch);
            CPPUNIT_ASSERT_EQUAL(res[0][e].train_loss, res[1][e].train_loss);  // bit for bit
            CPPUNIT_ASSERT_EQUAL(res[0][e].test_loss, res[1][e].test_loss);
        }
        CPPUNIT_ASSERT(w[0] == w[1]);
    }

    // --augment reaches Local SGD: crop/flip changes the weights against no augmentation,
    // and two augmented runs (prefetch on and off) are bit-identical (same per-step draws).
    void test_local_sgd_augments() {
        const SyntheticSpec spec = parse_synthetic("synthetic:1x12x12:4");
        const Dataset tr = make_synthetic(spec, 300, 1), te = make_synthetic(spec, 40, 2);
        Augment aug;
        aug.crop_pad = 2;
        aug.flip = true;
        std::vector<float> plain, a0, a1;
        local_run(tr, te, 6, 3, 3, false, &plain);
        local_run(tr, te, 6, 3, 3, false, &a0, aug);
        local_run(tr, te, 6, 3, 3, true, &a1, aug);
        CPPUNIT_ASSERT(plain != a0);
        CPPUNIT_ASSERT(a0 == a1);
    }

    // The memory cap against the formula worked by hand: 1 GB before the first step, 1.5 GB
    // at local batch 100 (5 MB an example), 10 GB available, 3/4 of it all:
    // floor((0.75 (1.5 + 10 / ranks) GB - 1 GB) / 5 MB).
    void test_memory_cap() {
        constexpr int none = std::numeric_limits<int>::max();
        CPPUNIT_ASSERT_EQUAL(1525, memory_local_batch_cap(1e9, 1.5e9, 100, 10e9, 1, 0.75));
        CPPUNIT_ASSERT_EQUAL(775, memory_local_batch_cap(1e9, 1.5e9, 100, 10e9, 2, 0.75));
        // never below the current batch: the batch only grows
        CPPUNIT_ASSERT_EQUAL(100, memory_local_batch_cap(1e9, 1.5e9, 100, 1e6, 1, 0.75));
        // nothing measured or a figure missing: no cap
        CPPUNIT_ASSERT_EQUAL(none, memory_local_batch_cap(1e9, 1e9, 100, 10e9, 1, 0.75));
        CPPUNIT_ASSERT_EQUAL(none, memory_local_batch_cap(1e9, 1.5e9, 100, std::nan(""), 1, 0.75));
        CPPUNIT_ASSERT_EQUAL(none, memory_local_batch_cap(std::nan(""), 1.5e9, 100, 10e9, 1, 0.75));
        CPPUNIT_ASSERT_EQUAL(none, memory_local_batch_cap(1e9, 1.5e9, 100, 10e9, 1, 0.0));
        // the readers give this process's figures: both positive, and a 64 MiB buffer that is
        // written shows up in the resident set
        const double avail = available_memory_bytes(), r0 = resident_bytes();
        CPPUNIT_ASSERT(std::isfinite(avail) && avail > 0);
        CPPUNIT_ASSERT(std::isfinite(r0) && r0 > 0);
        std::vector<char> buf(64 << 20, 1);
        const double r1 = resident_bytes();
        if (!(r1 - r0 > 0.9 * buf.size()))
            CPPUNIT_FAIL("resident set grew by " + std::to_string(r1 - r0) + " bytes for a 64 MiB buffer");
        CPPUNIT_ASSERT_EQUAL(char(1), buf[buf.size() / 2]);
    }

    // cgroup_memory_left on a made-up cgroup tree: v1 and v2 limits minus usage, the smaller of
    // both, "max" and v1's huge "unlimited" as no limit, and a group path that the mount does not
    // show (a container mounting its own group as the root) found with its leading parts dropped.
    void test_cgroup_memory_left() {
        tula_test::TempDir d("cgroup");
        auto put = [&](const std::string& dir, const std::string& file, const std::string& text) {
            const std::string p = d / dir;
            for (size_t i = 1; i <= p.size(); ++i)
                if (i == p.size() || p[i] == '/') ::mkdir(p.substr(0, i).c_str(), 0700);
            std::ofstream(p + "/" + file) << text << "\n";
        };
        CPPUNIT_ASSERT(std::isnan(cgroup_memory_left("0::/job\n", d.path)));  // nothing mounted
        put("job/step", "memory.max", "5000000");
        put("job/step", "memory.current", "1000000");
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4e6, cgroup_memory_left("0::/job/step\n", d.path), 0.0);
        // the container's view: its group is the mount's root, /proc/self/cgroup names the host's path
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4e6, cgroup_memory_left("0::/docker/abc/job/step\n", d.path), 0.0);
        put("memory", "memory.limit_in_bytes", "3000000");
        put("memory", "memory.usage_in_bytes", "500000");
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.5e6, cgroup_memory_left("4:memory:/slurm/uid_0/job_7\n", d.path), 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(2.5e6, cgroup_memory_left("4:memory:/slurm/uid_0/job_7\n0::/job/step\n", d.path),
                                     0.0);  // both: the smaller
        put("job/step", "memory.max", "max");
        put("memory", "memory.limit_in_bytes", "9223372036854771712");
        CPPUNIT_ASSERT(std::isnan(cgroup_memory_left("4:memory:/x\n0::/job/step\n", d.path)));  // no limits
        CPPUNIT_ASSERT(std::isnan(cgroup_memory_left("garbage\n\n", d.path)));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerLocalSgdTest);
