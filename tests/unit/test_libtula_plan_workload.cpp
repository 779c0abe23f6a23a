// Unit tests of plan_workload and make_plan_request: the whole planning path from profile databases (fitted models, run history, measured noise scale, a fixed node count, --limit-train, 20,000 profiled batch sizes).
#include <cppunit/extensions/HelperMacros.h>

#include "planner_fixtures.hpp"
#include "record_builders.hpp"

using namespace planner_test;

class LibtulaPlanWorkloadTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaPlanWorkloadTest);
    CPPUNIT_TEST(test_make_plan_request);
    CPPUNIT_TEST(test_plan_workload);
    CPPUNIT_TEST(test_plan_workload_measured_noise_scale);
    CPPUNIT_TEST(test_plan_workload_fixed_nodes_keeps_choice);
    CPPUNIT_TEST(test_plan_node_counts_equals_per_count);
    CPPUNIT_TEST(test_plan_workload_limit_train);
    CPPUNIT_TEST(test_plan_20000_profiled_batches);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_make_plan_request() {
        tula::Config cfg;
        cfg.max_nodes = 6;
        cfg.default_epochs = 9;
        cfg.global_batches = {8, 16};
        cfg.price_per_node_hour = 3;
        cfg.time_margin = 0.1;
        cfg.time_overhead = 10;
        const auto w = workload(5, 6);
        auto r = tula::make_plan_request(cfg, w, 0, 0, tula::Policy::Cost);
        CPPUNIT_ASSERT_EQUAL(9, r.epochs);
        CPPUNIT_ASSERT_EQUAL(1, r.min_nodes);
        CPPUNIT_ASSERT_EQUAL(6, r.max_nodes);
        CPPUNIT_ASSERT(r.global_batches == cfg.global_batches);
        CPPUNIT_ASSERT_EQUAL(3.0, r.price_per_node_hour);
        CPPUNIT_ASSERT_EQUAL(0.1, r.time_margin);
        CPPUNIT_ASSERT_EQUAL(10.0, r.time_overhead);
        CPPUNIT_ASSERT(r.policy == tula::Policy::Cost);
        CPPUNIT_ASSERT_EQUAL(w.name, r.workload.name);
        r = tula::make_plan_request(cfg, w, 4, 3, tula::Policy::Auto);
        CPPUNIT_ASSERT_EQUAL(4, r.epochs);
        CPPUNIT_ASSERT_EQUAL(3, r.max_nodes);
        r = tula::make_plan_request(cfg, w, 4, 30, tula::Policy::Auto);
        CPPUNIT_ASSERT_EQUAL(6, r.max_nodes);
    }

    void test_plan_workload() {
        TempDir d;
        const std::string db_path = d / "p.db";
        const double t0 = 2e-3, t1 = 1.5e-4, alpha = 4e-5, beta = 2e-9;
        {
            auto db = lenet5_db(db_path);
            add_linear_compute(db, {16, 32, 64, 128, 256}, t0, t1);
        }
        tula::Config cfg;
        cfg.max_nodes = 4;
        cfg.global_batches = {64, 128, 256, 512, 1024};
        cfg.default_epochs = 5;
        std::vector<std::string> warn;
        // no allreduce profile: 1 node only, said in the reason
        tula::Plan p = tula::plan_workload(cfg, {db_path, d / "missing.db"}, "lenet5@fashion-mnist", 0, 0, 0,
                                           tula::Policy::Time, &warn);
        CPPUNIT_ASSERT(warn.empty());
        for (const auto& c : p.candidates) CPPUNIT_ASSERT_EQUAL(1, c.nodes);
        CPPUNIT_ASSERT_MESSAGE(p.reason, contains(p.reason, "allreduce"));
        // the epochs follow the batch: 5 at the smallest global batch (64), by hand for this one
        const int e1 = hand_epochs(cfg.noise_scale, p.choice().global_batch, 5, 64);
        CPPUNIT_ASSERT_EQUAL(e1, p.choice().epochs);
        const double t = hand_total(1, p.choice().global_batch, e1, 60000, 61706, t0, t1, 0, 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t, p.choice().total_seconds, 1e-9 * t);
        // fixed nodes > 1 without an allreduce profile: an error
        std::string e = error_of([&] {
            tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 3, 0, 2, tula::Policy::Auto, &warn);
        });
        CPPUNIT_ASSERT_MESSAGE(e, contains(e, "allreduce"));
        // unknown workload
        e = error_of([&] { tula::plan_workload(cfg, {db_path}, "vgg11@cifar10", 3, 0, 0, tula::Policy::Auto, &warn); });
        CPPUNIT_ASSERT_MESSAGE(
            e, contains(e, "tula: no profile for workload vgg11@cifar10; run `tula profile compute --workload vgg11@cifar10`"));

        {
            auto db = tula::ProfileDb::open(db_path, tula::ProfileDb::Mode::ReadWrite);
            add_ring_allreduce(db, alpha, beta);
        }
        p = tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 4, 0, 0, tula::Policy::Auto, &warn);
        int max_k = 0;
        for (const auto& c : p.candidates) {
            max_k = std::max(max_k, c.nodes);
            CPPUNIT_ASSERT_EQUAL(hand_epochs(cfg.noise_scale, c.global_batch, 4, 64), c.epochs);
            const double h = hand_total(c.nodes, c.global_batch, c.epochs, 60000, 61706, t0, t1, alpha, beta);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(h, c.total_seconds, 1e-6 * h);
        }
        CPPUNIT_ASSERT_EQUAL(4, max_k);
        // fixed 3 nodes: every candidate has 3 nodes and a global batch that is a multiple of 3
        p = tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 4, 0, 3, tula::Policy::Auto, &warn);
        CPPUNIT_ASSERT(!p.candidates.empty());
        for (const auto& c : p.candidates) {
            CPPUNIT_ASSERT_EQUAL(3, c.nodes);
            CPPUNIT_ASSERT_EQUAL(0, c.global_batch % 3);
        }
        // A plan for the node count the plan over every node count chose (the nodes a job is
        // allocated after sbatch --tula=auto) keeps that plan's global batch and time limit;
        // checked for each policy, B_noise and list of global batches. (With these profiles and
        // no accuracy history the node count's own knee is that batch already; the case where
        // it is not is test_plan_workload_fixed_nodes_keeps_choice.)
        for (const auto& batches : {std::vector<int>{64, 128, 256, 512, 1024},
                                    std::vector<int>{32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048}})
            for (double ns : {64.0, 512.0, 4096.0})
            for (auto pol : {tula::Policy::Auto, tula::Policy::Time, tula::Policy::Cost}) {
                tula::Config c2 = cfg;
                c2.global_batches = batches;
                c2.noise_scale = ns;
                const tula::Plan all = tula::plan_workload(c2, {db_path}, "lenet5@fashion-mnist", 4, 0, 0, pol, &warn);
                const int k = all.choice().nodes;
                const tula::Plan fixed = tula::plan_workload(c2, {db_path}, "lenet5@fashion-mnist", 4, 0, k, pol, &warn);
                CPPUNIT_ASSERT_EQUAL(k, fixed.choice().nodes);
                CPPUNIT_ASSERT_EQUAL(all.choice().global_batch, fixed.choice().global_batch);
                CPPUNIT_ASSERT_EQUAL(all.time_limit_minutes, fixed.time_limit_minutes);
            }
        // a bad database next to the good one: a warning, still a plan
        {
            FILE* f = std::fopen((d / "bad.db").c_str(), "w");
            std::fputs("not a database at all, just some text long enough to be read as a header........\n", f);
            std::fclose(f);
        }
        warn.clear();
        p = tula::plan_workload(cfg, {d / "bad.db", db_path}, "lenet5@fashion-mnist", 4, 2, 0, tula::Policy::Cost, &warn);
        CPPUNIT_ASSERT_EQUAL(size_t(1), warn.size());
        for (const auto& c : p.candidates) CPPUNIT_ASSERT(c.nodes <= 2);
    }

    // The case test_plan_workload's exact profiles cannot reach: the run history's accuracy
    // falls with the global batch, and the smallest batch fits only on 1 node (its local batch
    // on 2 or more nodes is below 1/4 of the smallest profiled one). The plan over every node
    // count then measures the accuracy bound from that batch, the plan for a given node count
    // from its own smallest batch, so it admits a larger and faster batch. A plan for the node
    // count the plan over every node count chose must still keep that plan's global batch and
    // time limit; the loop must meet at least one case where the node count's own plan would
    // have chosen another batch (said in the reason), else it tests nothing.
    // plan_node_counts over the counts 1..4 (the rows of `tula plan --node-range`, from data
    // read once) against one plan_workload call per node count: the same choice, prediction
    // and time limit, and a run history flagged into every row alike.
    void test_plan_node_counts_equals_per_count() {
        TempDir d;
        const std::string db_path = d / "p.db";
        {
            auto db = lenet5_db(db_path);
            add_linear_compute(db, {16, 32, 64, 128, 256}, 2e-3, 1.5e-4);
            add_ring_allreduce(db, 4e-5, 2e-9);
            for (int k = 1; k <= 3; ++k) {
                tula::RunRecord r = tula_test::run_record(std::to_string(k), "lenet5@fashion-mnist", k, 64 * k, 2, 20.0 * k, 1.7e9 + k);
                r.test_accuracy = 0.9 - 0.01 * k;
                db.add_run(r);
            }
        }
        tula::Config cfg;
        cfg.max_nodes = 2;  // below the range: an explicit -N is not cut
        for (auto pol : {tula::Policy::Auto, tula::Policy::Time, tula::Policy::Cost}) {
            tula::PolicySpec spec;
            spec.policy = pol;
            std::vector<std::string> w;
            const tula::PlanData data = tula::load_plan_data({db_path}, "lenet5@fashion-mnist", &w);
            const std::vector<tula::Plan> rows = tula::plan_node_counts(cfg, data, 3, 4, {1, 2, 3, 4}, spec, &w, tula::EpochExamples{6000});
            CPPUNIT_ASSERT_EQUAL(size_t(4), rows.size());
            for (int n = 1; n <= 4; ++n) {
                const tula::Plan one =
                    tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 3, 4, n, spec, &w, tula::EpochExamples{6000});
                const tula::Plan& row = rows[static_cast<size_t>(n - 1)];
                CPPUNIT_ASSERT_EQUAL(n, row.choice().nodes);
                CPPUNIT_ASSERT_EQUAL(one.choice().global_batch, row.choice().global_batch);
                CPPUNIT_ASSERT_EQUAL(one.choice().total_seconds, row.choice().total_seconds);
                CPPUNIT_ASSERT_EQUAL(one.time_limit_minutes, row.time_limit_minutes);
                CPPUNIT_ASSERT_EQUAL(one.reason, row.reason);
                CPPUNIT_ASSERT_EQUAL(one.flagged_runs.size(), row.flagged_runs.size());
            }
        }
        std::vector<std::string> w;
        CPPUNIT_ASSERT(!error_of([&] { tula::load_plan_data({db_path}, "resnet50@imagenet", &w); }).empty());
    }

    void test_plan_workload_fixed_nodes_keeps_choice() {
        TempDir d;
        const std::string db_path = d / "p.db";
        const double t0 = 2e-3, t1 = 1.5e-4, alpha = 4e-5, beta = 2e-9;
        {
            auto db = lenet5_db(db_path);
            add_linear_compute(db, {64, 128, 256, 512}, t0, t1);  // local batches below 16 are not planned
            add_ring_allreduce(db, alpha, beta);
            // accuracy history: 0.90 at 16, 0.84 at 1024 (-1 point per doubling); no time
            // measured, so no time calibration
            int id = 0;
            for (auto ba : {std::pair<int, double>{16, 0.90}, {1024, 0.84}}) {
                ++id;
                tula::RunRecord r = tula_test::run_record(std::to_string(id), "lenet5@fashion-mnist", 1, ba.first, 5, 0,
                                                          1.7e9 + id);
                r.test_accuracy = ba.second;
                db.add_run(r);
            }
        }
        std::vector<std::string> warn;
        int kept = 0, cases = 0;
        for (double loss : {0.005, 0.01, 0.02})
            for (double ns : {64.0, 512.0, 4096.0})
                for (auto pol : {tula::Policy::Auto, tula::Policy::Time, tula::Policy::Cost}) {
                    tula::Config cfg;
                    cfg.max_nodes = 4;
                    cfg.default_epochs = 5;
                    cfg.global_batches = {16, 32, 64, 128, 256, 512, 1024};
                    cfg.noise_scale = ns;
                    cfg.max_accuracy_loss = loss;
                    cfg.fixed_epochs = true;  // the accuracy bound applies at fixed epochs only
                    const tula::Plan all = tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 5, 0, 0, pol, &warn);
                    const int k = all.choice().nodes;
                    if (k < 2) continue;  // one node: no smaller batch is lost, nothing to keep
                    ++cases;
                    const tula::Plan fixed = tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 5, 0, k, pol, &warn);
                    CPPUNIT_ASSERT_EQUAL(k, fixed.choice().nodes);
                    CPPUNIT_ASSERT_EQUAL_MESSAGE(all.reason + " | " + fixed.reason, all.choice().global_batch,
                                                 fixed.choice().global_batch);
                    CPPUNIT_ASSERT_EQUAL(all.time_limit_minutes, fixed.time_limit_minutes);
                    if (contains(fixed.reason, "as given, the plan over every node count's choice")) ++kept;
                }
        CPPUNIT_ASSERT_MESSAGE(std::to_string(cases) + " multi-node cases", cases > 0);
        CPPUNIT_ASSERT_MESSAGE("no case where the node count's own plan differs", kept > 0);
    }

    // The convergence model takes B_noise from the runs' measured noise scale (the median of the
    // newest 5 valid values over every database) instead of tula.conf's noise_scale; epochs_to_target
    // of every candidate is checked against E(B) = E_min (1 + B/B_noise) written out here.
    void test_plan_workload_measured_noise_scale() {
        TempDir d;
        const std::string sys = d / "sys.db", user = d / "user.db";
        {
            auto db = lenet5_db(sys);
            add_linear_compute(db, {16, 32, 64, 128, 256}, 2e-3, 1.5e-4);
        }
        tula::Config cfg;
        cfg.max_nodes = 1;
        cfg.global_batches = {64, 128, 256, 512, 1024};
        cfg.noise_scale = 1024;
        const int E = 6;
        // epochs_to_target of every candidate against E (1 + B/bn) / (1 + 64/bn)
        auto check = [&](const tula::Plan& p, double bn) {
            CPPUNIT_ASSERT(!p.candidates.empty());
            CPPUNIT_ASSERT_EQUAL(64, p.reference_batch);
            for (const auto& c : p.candidates) {
                const double want = E * (1.0 + c.global_batch / bn) / (1.0 + 64.0 / bn);
                CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.epochs_to_target, 1e-9 * want);
            }
        };
        std::vector<std::string> warn;
        // no run history: tula.conf's value
        tula::Plan p = tula::plan_workload(cfg, {sys, user}, "lenet5@fashion-mnist", E, 0, 0, tula::Policy::Auto, &warn);
        CPPUNIT_ASSERT_EQUAL(0, p.convergence.measured_runs);
        CPPUNIT_ASSERT_EQUAL(std::string("tula.conf"), p.convergence.origin());
        CPPUNIT_ASSERT_EQUAL(1024.0, p.convergence.noise_scale);
        check(p, 1024);

        // runs (created, noise scale; 0 = not measured), spread over both databases
        const std::vector<std::pair<double, double>> runs = {
            {1, 5000}, {2, 6000}, {3, 300}, {4, std::nan("")}, {5, 500}, {6, -1},
            {7, 0}, {8, 900}, {9, 200}, {10, HUGE_VAL}};
        for (size_t i = 0; i < runs.size(); ++i) {
            auto db = tula::ProfileDb::open(i % 2 ? sys : user, tula::ProfileDb::Mode::ReadWrite);
            tula::RunRecord r = tula_test::run_record(std::to_string(i), "lenet5@fashion-mnist", 1, 64, 1, 10, 1.7e9 + runs[i].first);
            r.noise_scale = runs[i].second;
            r.noise_observations = 10;
            db.add_run(r);
        }
        {  // another workload's run must not count
            auto db = tula::ProfileDb::open(user, tula::ProfileDb::Mode::ReadWrite);
            tula::RunRecord r = tula_test::run_record("", "fmnist-cnn@fashion-mnist", 1, 64, 1, 10, 1.8e9);
            r.noise_scale = 7;
            db.add_run(r);
        }
        // independent reference: finite values > 0, newest 5 by creation time, their median
        std::vector<std::pair<double, double>> valid;
        for (const auto& x : runs)
            if (std::isfinite(x.second) && x.second > 0) valid.push_back(x);
        std::sort(valid.begin(), valid.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
        valid.resize(5);  // 200 (9), 900 (8), 500 (5), 300 (3), 6000 (2)
        std::vector<double> v;
        for (const auto& x : valid) v.push_back(x.second);
        std::sort(v.begin(), v.end());
        const double bn = v[2];
        CPPUNIT_ASSERT_EQUAL(500.0, bn);  // the reference itself, by hand
        p = tula::plan_workload(cfg, {sys, user}, "lenet5@fashion-mnist", E, 0, 0, tula::Policy::Auto, &warn);
        CPPUNIT_ASSERT(warn.empty());
        CPPUNIT_ASSERT_EQUAL(5, p.convergence.measured_runs);
        CPPUNIT_ASSERT_EQUAL(std::string("measured in 5 runs"), p.convergence.origin());
        CPPUNIT_ASSERT_DOUBLES_EQUAL(bn, p.convergence.noise_scale, 0.0);
        check(p, bn);
        // the interval of epochs_to_target: the formula at the smallest and largest of the 5
        // (200 and 6000): a larger B_noise means fewer epochs
        for (const auto& c : p.candidates) {
            const double lo = E * (1.0 + c.global_batch / v[4]) / (1.0 + 64.0 / v[4]);
            const double hi = E * (1.0 + c.global_batch / v[0]) / (1.0 + 64.0 / v[0]);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(lo, c.epochs_to_target_low, 1e-9 * lo);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(hi, c.epochs_to_target_high, 1e-9 * hi);
            CPPUNIT_ASSERT(c.epochs_to_target_low <= c.epochs_to_target && c.epochs_to_target <= c.epochs_to_target_high);
        }
    }

    // plan_workload's trailing train_examples: the same plan as the full set's, with the
    // totals of 6,000 examples per epoch (the fitted exact line reproduces t0, t1).
    void test_plan_workload_limit_train() {
        TempDir d;
        const std::string db_path = d / "p.db";
        const double t0 = 2e-3, t1 = 1.5e-4;
        {
            auto db = lenet5_db(db_path);
            add_linear_compute(db, {16, 32, 64, 128, 256}, t0, t1);
        }
        tula::Config cfg;
        cfg.global_batches = {64, 128, 256};
        cfg.default_epochs = 5;
        std::vector<std::string> warn;
        const tula::Plan full =
            tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 0, 0, 0, tula::Policy::Time, &warn);
        const tula::Plan lim =
            tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 0, 0, 0, tula::Policy::Time, &warn, tula::EpochExamples{6000});
        CPPUNIT_ASSERT_EQUAL(int64_t(6000), lim.train_examples);
        CPPUNIT_ASSERT_EQUAL(full.candidates.size(), lim.candidates.size());
        for (const auto& c : lim.candidates) {
            CPPUNIT_ASSERT_EQUAL(hand_epochs(cfg.noise_scale, c.global_batch, 5, 64), c.epochs);
            const double want = hand_total(1, c.global_batch, c.epochs, 6000, 61706, t0, t1, 0, 0);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, c.total_seconds, 1e-9 * want);
        }
        tula::PolicySpec spec;
        const tula::Plan lim2 = tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 0, 0, 1, spec, &warn, tula::EpochExamples{6000});
        CPPUNIT_ASSERT_EQUAL(int64_t(6000), lim2.train_examples);
    }

    // A profile of n distinct local batches (one rank, 1..n, a floor then a line with 1 %
    // noise) written to `db_path` with sqlite3 in one transaction (a commit per add_compute
    // takes seconds); returns the samples.
    static std::vector<tula::ComputeSample> floor_line_profile(const std::string& db_path, int n) {
        std::mt19937 rng(3);
        std::normal_distribution<double> noise(0.0, 0.01);
        std::vector<tula::ComputeSample> samples;
        std::string sql = "BEGIN;";
        for (int b = 1; b <= n; ++b) {
            tula::ComputeSample c;
            c.workload = "lenet5@fashion-mnist";
            c.local_batch = b;
            c.seconds_per_iter = std::max(0.02, 1e-3 + 1e-4 * b) * (1 + noise(rng));
            samples.push_back(c);
            char row[256];
            std::snprintf(row, sizeof row,
                          "INSERT INTO compute_profile(workload, host, local_batch, threads, seconds_per_iter, iters, "
                          "created, ranks) VALUES('lenet5@fashion-mnist', 'h', %d, 1, %.17g, 20, 1700000000, 1);",
                          b, c.seconds_per_iter);
            sql += row;
        }
        sql += "COMMIT;";
        lenet5_db(db_path);  // the schema and the workload row
        sqlite3* db = nullptr;
        CPPUNIT_ASSERT_EQUAL(SQLITE_OK, sqlite3_open(db_path.c_str(), &db));
        const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
        sqlite3_close(db);
        CPPUNIT_ASSERT_EQUAL(SQLITE_OK, rc);
        return samples;
    }

    // The least of 3 CPU times of f() in a child process (seconds; +inf past 10 s of wall time).
    template <class F>
    static double least_seconds(F f) {
        double best = std::numeric_limits<double>::infinity();
        for (int i = 0; i < 3; ++i)
            best = std::min(best, seconds_in_child(
                                      [&] {
                                          const double t = thread_cpu_seconds();
                                          f();
                                          return thread_cpu_seconds() - t;
                                      },
                                      10.0));
        return best;
    }

    // A profile of 20,000 distinct local batches: ComputeModel::fit and plan_workload grow
    // about linearly with the profile, checked as the CPU time at 20,000 batches over the CPU
    // time at 2,000 (wall time would count the waits of a loaded machine): well under the 100 of a quadratic algorithm (a quadratic fit took over a
    // second at 200 batches). bench/bench-planner reports the absolute figures. The fit
    // still finds the floor and the slope.
    void test_plan_20000_profiled_batches() {
        TempDir d;
        tula::Config cfg;
        cfg.global_batches = {1024, 4096, 16384};
        double fit_s[2], plan_s[2];
        std::vector<tula::ComputeSample> samples;
        const int sizes[2] = {2000, 20000};
        for (int i = 0; i < 2; ++i) {
            const std::string db_path = d / ("p" + std::to_string(sizes[i]) + ".db");
            samples = floor_line_profile(db_path, sizes[i]);
            CPPUNIT_ASSERT_EQUAL(size_t(sizes[i]), tula::ProfileDb::open(db_path, tula::ProfileDb::Mode::ReadOnly)
                                                       .compute_samples("lenet5@fashion-mnist")
                                                       .size());
            fit_s[i] = least_seconds([&] { tula::ComputeModel::fit(samples); });
            plan_s[i] = least_seconds([&] {
                tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 2, 0, 0, tula::Policy::Auto, nullptr);
            });
        }
        const std::string times = "fit " + std::to_string(fit_s[0] * 1e3) + " -> " + std::to_string(fit_s[1] * 1e3) +
                                  " ms, plan " + std::to_string(plan_s[0] * 1e3) + " -> " +
                                  std::to_string(plan_s[1] * 1e3) + " ms";
        CPPUNIT_ASSERT_MESSAGE(times, std::isfinite(fit_s[1]) && std::isfinite(plan_s[1]));
        // 1 ms is added to the smaller time: below it the ratio would measure timer noise
        CPPUNIT_ASSERT_MESSAGE(times, fit_s[1] / (fit_s[0] + 1e-3) < 40);
        CPPUNIT_ASSERT_MESSAGE(times, plan_s[1] / (plan_s[0] + 1e-3) < 40);
        const std::string db_path = d / "p20000.db";
        const auto m = tula::ComputeModel::fit(samples);
        CPPUNIT_ASSERT(m.flat);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.02, m.t_min, 0.01 * 0.02);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1e-4, m.t1, 0.01 * 1e-4);
        CPPUNIT_ASSERT_EQUAL(tula::ComputeModel::kLooKnots, m.loo_points);
        const tula::Plan p = tula::plan_workload(cfg, {db_path}, "lenet5@fashion-mnist", 2, 0, 0, tula::Policy::Auto, nullptr);
        CPPUNIT_ASSERT_EQUAL(size_t(3), p.candidates.size());
        for (const auto& c : p.candidates) {
            CPPUNIT_ASSERT_EQUAL(hand_epochs(cfg.noise_scale, c.global_batch, 2, 1024), c.epochs);
            CPPUNIT_ASSERT_DOUBLES_EQUAL(c.epochs * std::floor(60000.0 / c.global_batch) * m.seconds_per_iter(c.local_batch),
                                         c.total_seconds, 1e-9 * c.total_seconds);
        }
    }
};


CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaPlanWorkloadTest);
