// Unit tests of the exchange borrowed from the runs of a class's other workloads
// (class_exchange.hpp; StepObservation::borrowed): what the runs measured, what it says about
// another workload, and that the step fit takes it for the exchange only, weaker than the
// workload's own runs, and only when the correction class_runs is on.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "tula/class_exchange.hpp"
#include "tula/db.hpp"
#include "tula/fit_cache.hpp"
#include "tula/predict.hpp"
#include "tula/step_fit.hpp"
#include "models_fixtures.hpp"
#include "record_builders.hpp"
#include "test_util.hpp"

namespace {

constexpr double kT0 = 1e-3, kT1 = 1e-4, kAlpha = 1e-4, kBeta = 1e-6;

tula::Workload workload(const std::string& name, int64_t params) {
    tula::Workload w = models_test::wl();
    w.name = name;
    w.params = params;
    return w;
}

// A run of `name` (6,000 examples per epoch, 2 epochs) at K x R, local batch b, whose steps took
// `step` seconds each, on class `cls`.
tula::RunRecord run_of(const std::string& name, int K, int R, int b, double step, const std::string& cls = "gpu") {
    const int B = K * R * b, E = 2;
    tula::RunRecord r = tula_test::run_record("j", name, K, B, E, E * std::floor(6000.0 / B) * step, 100);
    r.ranks_per_node = R;
    r.hardware_class = cls;
    return r;
}

// The observations of a workload's own runs, s = `factor` x m at each, m = 1 + 0.1 (K > 1)
// seconds and c = 0.5 seconds.
tula::StepObservation own(int K, int R, double b, double factor) {
    tula::StepObservation o;
    o.nodes = K, o.ranks_per_node = R, o.local_batch = b;
    o.model_seconds = 1.0 + (K > 1 ? 0.1 : 0.0);
    o.compute_seconds = 0.5;
    o.measured_seconds = factor * o.model_seconds;
    return o;
}

tula::StepObservation borrowed(int K, int R, double b, double measured) {
    tula::StepObservation o = own(K, R, b, 1.0);
    o.measured_seconds = measured;
    o.compute_seconds = 0;
    o.borrowed = true;
    return o;
}

// Exact compute samples t0 + t1 b and ring allreduce samples on 2 and 4 nodes (as the step
// fit's tests), every class "".
tula::TimeModels profile_models(const tula::Workload& w) {
    std::vector<tula::ComputeSample> c;
    for (int b : {8, 16, 32, 64, 128}) c.push_back(models_test::cs(b, kT0 + kT1 * b));
    for (tula::ComputeSample& s : c) s.workload = w.name;
    return tula::fit_profile_models(tula::Config{}, w, c, models_test::ring_samples(kAlpha, kBeta), tula::Corrections{},
                                    nullptr);
}

}  // namespace

class LibtulaClassExchangeTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaClassExchangeTest);
    CPPUNIT_TEST(test_exchange_of_paired_runs);
    CPPUNIT_TEST(test_borrowed_observations);
    CPPUNIT_TEST(test_borrowed_teach_the_exchange_only);
    CPPUNIT_TEST(test_own_runs_outweigh_borrowed);
    CPPUNIT_TEST(test_fit_run_models_borrows_when_switched_on);
    CPPUNIT_TEST(test_fit_cache_keeps_borrowed_apart);
    CPPUNIT_TEST(test_load_plan_data_reads_the_others_when_asked);
    CPPUNIT_TEST(test_allreduce_from_runs_by_hand);
    CPPUNIT_TEST(test_load_plan_data_allreduce_from_runs);
    CPPUNIT_TEST_SUITE_END();

public:
    // s(K, R, b) - s(1, R, b) of the same workload, class and local batch, the median over b;
    // unpaired placements, unknown workloads and workloads without params give nothing.
    void test_exchange_of_paired_runs() {
        const std::vector<tula::Workload> ws = {workload("v@d", 1000000), workload("z@d", 0)};
        std::vector<tula::RunRecord> runs = {
            run_of("v@d", 1, 2, 32, 0.10), run_of("v@d", 2, 2, 32, 0.13),   // 0.03
            run_of("v@d", 1, 2, 64, 0.20), run_of("v@d", 2, 2, 64, 0.25),   // 0.05
            run_of("v@d", 2, 2, 64, 0.27),                                  // median of 0.25, 0.27: 0.06
            run_of("v@d", 1, 2, 16, 0.05), run_of("v@d", 2, 2, 16, 0.09),   // 0.04
            run_of("v@d", 2, 4, 16, 0.30),                                  // no 1 x 4 run
            run_of("v@d", 2, 2, 32, 0.50, "other"),                         // no 1-node run of its class
            run_of("u@d", 1, 2, 32, 0.10), run_of("u@d", 2, 2, 32, 0.20),   // no workload row
            run_of("z@d", 1, 2, 32, 0.10), run_of("z@d", 2, 2, 32, 0.20)};  // params 0
        const std::vector<tula::ClassExchange> e = tula::class_exchange(runs, ws);
        CPPUNIT_ASSERT_EQUAL(size_t(1), e.size());
        CPPUNIT_ASSERT_EQUAL(std::string("gpu"), e[0].hardware_class);
        CPPUNIT_ASSERT_EQUAL(std::string("v@d"), e[0].workload);
        CPPUNIT_ASSERT_EQUAL(2, e[0].nodes);
        CPPUNIT_ASSERT_EQUAL(2, e[0].ranks_per_node);
        CPPUNIT_ASSERT_EQUAL(3, e[0].batches);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(4e6, e[0].bytes, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.04, e[0].exchange_seconds, 1e-12);
    }

    // rho = measured / modelled across time of the other workload carries to this one's bytes:
    // measured m1 + rho x across(K, ours) against mK; this workload's own entries, another
    // class's and a negative exchange (clamped at 0) are handled as the header says.
    void test_borrowed_observations() {
        auto ex = [](const std::string& cls, const std::string& w, int K, double seconds) {
            tula::ClassExchange e;
            e.hardware_class = cls, e.workload = w, e.nodes = K, e.ranks_per_node = 4, e.bytes = 4e6;
            e.exchange_seconds = seconds, e.batches = 1;
            return e;
        };
        const std::vector<tula::ClassExchange> all = {ex("gpu", "v@d", 2, 0.08), ex("gpu", "s@d", 2, 1.0),
                                                      ex("cpu", "v@d", 2, 1.0), ex("gpu", "x@d", 4, -0.01)};
        const tula::Workload self = workload("s@d", 2000000);
        auto batch = [](int R) { return 8.0 * R; };
        auto step = [](int K, int R, double b) { return 1.0 + 0.1 * (K > 1) + 1e-3 * R * b; };
        auto across = [](int K, double bytes) { return 1e-8 * bytes * tula::StepFit::psi(K); };  // 0.04 s for theirs at K = 2
        const std::string cls = "gpu";
        const std::vector<tula::StepObservation> obs = tula::borrowed_exchange_observations(all, self, &cls, batch, step, across);
        CPPUNIT_ASSERT_EQUAL(size_t(2), obs.size());
        const double m1 = step(1, 4, 32), m2 = step(2, 4, 32), m4 = step(4, 4, 32);
        CPPUNIT_ASSERT(obs[0].borrowed && obs[0].nodes == 2 && obs[0].ranks_per_node == 4);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(32.0, obs[0].local_batch, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.0, obs[0].compute_seconds, 0.0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m2, obs[0].model_seconds, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m1 + 2.0 * 0.08, obs[0].measured_seconds, 1e-12);  // rho 2, ours 0.08 s
        CPPUNIT_ASSERT_EQUAL(4, obs[1].nodes);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m4, obs[1].model_seconds, 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m1, obs[1].measured_seconds, 1e-15);
        CPPUNIT_ASSERT_EQUAL(size_t(3), tula::borrowed_exchange_observations(all, self, nullptr, batch, step, across).size());
        CPPUNIT_ASSERT(tula::borrowed_exchange_observations(all, workload("s@d", 0), nullptr, batch, step, across).empty());
    }

    // A workload run on one node only: another workload's exchange at 2 x 4 moves its 2 x 4 and
    // 3 x 4 steps toward it and leaves its 1-node steps as they were; the fit counts its own
    // runs and node counts, and the borrowed observations apart.
    void test_borrowed_teach_the_exchange_only() {
        std::vector<tula::StepObservation> obs;
        for (double b : {16.0, 32.0, 64.0})
            for (int R : {1, 4}) obs.push_back(own(1, R, b, 1.2));
        const tula::StepFit alone = tula::StepFit::fit(obs);
        for (int i = 0; i < 3; ++i) obs.push_back(borrowed(2, 4, 32, 1.5 * 1.1));
        const tula::StepFit with = tula::StepFit::fit(obs);
        CPPUNIT_ASSERT_EQUAL(6, with.runs);
        CPPUNIT_ASSERT_EQUAL(3, with.borrowed);
        CPPUNIT_ASSERT_EQUAL(1, with.max_nodes);
        for (double b : {16.0, 64.0}) {
            CPPUNIT_ASSERT_DOUBLES_EQUAL(alone.seconds(1, 4, b, 1.0, 0.5), with.seconds(1, 4, b, 1.0, 0.5), 1e-12);
            for (int K : {2, 3}) {
                const double m = 1.1, before = alone.seconds(K, 4, b, m, 0.5), after = with.seconds(K, 4, b, m, 0.5);
                CPPUNIT_ASSERT_MESSAGE(std::to_string(K) + " nodes: " + std::to_string(after - before),
                                       after - before > 0.1 * 0.55 * tula::StepFit::psi(K));
            }
        }
    }

    // Six runs of the workload at 2 x 4 where its model is right outweigh five borrowed
    // observations there that say 1.5 times: the step stays within 5 % of the runs'.
    void test_own_runs_outweigh_borrowed() {
        std::vector<tula::StepObservation> obs;
        for (int i = 0; i < 6; ++i) obs.push_back(own(2, 4, 32, 1.0 + 0.01 * (i % 3 - 1)));
        for (int i = 0; i < 5; ++i) obs.push_back(borrowed(2, 4, 32, 1.5 * 1.1));
        const tula::StepFit f = tula::StepFit::fit(obs);
        CPPUNIT_ASSERT_EQUAL(6, f.runs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.1, f.seconds(2, 4, 32, 1.1, 0.5), 0.05 * 1.1);
    }

    // fit_run_models: with the class's exchange in the models, the workload's 4-node step rises
    // only with the correction class_runs on (off by default), and its 1-node step stays.
    void test_fit_run_models_borrows_when_switched_on() {
        const tula::Workload w = models_test::wl();
        std::vector<tula::RunRecord> runs;
        for (int b : {16, 32, 64}) runs.push_back(run_of(w.name, 1, 1, b, kT0 + kT1 * b, ""));
        tula::TimeModels pm = profile_models(w);
        const double across = tula::hierarchical_allreduce_seconds(&*pm.allreduce, 2, 1, 8e6, 0.0);
        tula::ClassExchange e;
        e.workload = "v@d", e.nodes = 2, e.ranks_per_node = 1, e.bytes = 8e6, e.batches = 1;
        e.exchange_seconds = 3.0 * across;  // three times the modelled allreduce
        pm.class_exchange = {e, e, e};
        auto step = [](const tula::TimeModels& m, int K) {
            return tula::Predictor(m, m.run_target("")).step(K, 1, 32).seconds;
        };
        const tula::TimeModels off = tula::fit_run_models(pm, runs, nullptr);
        pm.class_exchange.clear();
        const tula::TimeModels none = tula::fit_run_models(pm, runs, nullptr);
        CPPUNIT_ASSERT_EQUAL(0, off.step_fits.at("").borrowed);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(step(none, 4), step(off, 4), 0.0);
        pm.class_exchange = {e, e, e};
        pm.corrections = tula::Corrections::select("class-runs", "");
        const tula::TimeModels on = tula::fit_run_models(pm, runs, nullptr);
        CPPUNIT_ASSERT_EQUAL(3, on.step_fits.at("").borrowed);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(step(none, 1), step(on, 1), 1e-12 * step(none, 1));
        CPPUNIT_ASSERT(step(on, 4) > step(none, 4));
    }

    // The same numbers as a run and as a borrowed observation are different evidence: other
    // keys, other fits, and the borrowed count read back from the file.
    void test_fit_cache_keeps_borrowed_apart() {
        tula_test::TempDir dir("class-exchange");
        std::vector<tula::StepObservation> obs = {own(1, 1, 32, 1.1), own(1, 1, 64, 1.2), own(2, 1, 32, 1.3)};
        std::vector<tula::StepObservation> lent = obs;
        lent.push_back(borrowed(2, 1, 32, 1.6));
        std::vector<tula::StepObservation> owned = obs;
        owned.push_back(borrowed(2, 1, 32, 1.6));
        owned.back().borrowed = false;
        owned.back().compute_seconds = 0.5;
        CPPUNIT_ASSERT(tula::FitCache::key(lent) != tula::FitCache::key(owned));
        tula::FitCache{dir.path}.step_fit(lent);
        tula::FitCache next(dir.path);
        const tula::StepFit f = next.step_fit(lent);
        CPPUNIT_ASSERT_EQUAL(1, next.stats().file_hits);
        CPPUNIT_ASSERT_EQUAL(1, f.borrowed);
        CPPUNIT_ASSERT_EQUAL(3, f.runs);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(tula::StepFit::fit(lent).phi0, f.phi0, 0.0);
    }

    // One database, two workloads: the plan data of w holds w's runs, and the exchange of v's
    // paired runs only when asked for.
    void test_load_plan_data_reads_the_others_when_asked() {
        tula_test::TempDir d("class-exchange");
        const std::string path = d.path + "/p.db";
        {
            auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
            db.upsert_workload(workload("w@d", 1000));
            db.upsert_workload(workload("v@d", 1000000));
            for (int b : {16, 32}) {
                db.add_run(run_of("w@d", 1, 1, b, kT0 + kT1 * b));
                db.add_run(run_of("v@d", 1, 1, b, 0.1));
                db.add_run(run_of("v@d", 2, 1, b, 0.1 + 0.02 * b / 16));
            }
        }
        std::vector<std::string> warn;
        const tula::PlanData plain = tula::load_plan_data({path}, "w@d", &warn);
        CPPUNIT_ASSERT_EQUAL(size_t(2), plain.runs.size());
        CPPUNIT_ASSERT(plain.class_exchange.empty());
        const tula::PlanData asked = tula::load_plan_data({path}, "w@d", &warn, true);
        CPPUNIT_ASSERT_EQUAL(size_t(2), asked.runs.size());
        for (const tula::RunRecord& r : asked.runs) CPPUNIT_ASSERT_EQUAL(std::string("w@d"), r.workload);
        CPPUNIT_ASSERT_EQUAL(size_t(1), asked.class_exchange.size());
        CPPUNIT_ASSERT_EQUAL(std::string("v@d"), asked.class_exchange[0].workload);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.03, asked.class_exchange[0].exchange_seconds, 1e-9);  // median of 0.02, 0.04
    }

    // A class that no across-node profile row serves takes its own exchange at the fewest ranks
    // per node with a positive one; a row of its class or of the unknown class serves it, a
    // within-node row does not.
    void test_allreduce_from_runs_by_hand() {
        auto ex = [](const std::string& cls, int K, int R, double e) {
            tula::ClassExchange x;
            x.hardware_class = cls, x.workload = "w@d", x.nodes = K, x.ranks_per_node = R, x.bytes = 4000, x.exchange_seconds = e;
            return x;
        };
        const std::vector<tula::ClassExchange> own = {ex("gpu", 2, 1, 0.02), ex("gpu", 3, 1, 0.03), ex("gpu", 2, 2, 0.05),
                                                      ex("other", 2, 1, -0.01), ex("other", 2, 2, 0.04)};
        auto sample = [](const std::string& cls, int K, int R) {
            tula::AllreduceSample a;
            a.hardware_class = cls, a.nodes = K, a.ranks_per_node = R, a.bytes = 1 << 20, a.seconds = 1e-3;
            return a;
        };
        // (class, nodes, seconds) of each sample, in order
        auto rows = [](const std::vector<tula::AllreduceSample>& v) {
            std::vector<std::tuple<std::string, int, double>> out;
            for (const tula::AllreduceSample& a : v) {
                CPPUNIT_ASSERT_EQUAL(1, a.ranks_per_node);
                CPPUNIT_ASSERT_EQUAL(int64_t(4000), a.bytes);
                out.emplace_back(a.hardware_class, a.nodes, a.seconds);
            }
            return out;
        };
        using Row = std::tuple<std::string, int, double>;
        const std::vector<Row> both = {Row{"gpu", 2, 0.02}, Row{"gpu", 3, 0.03}, Row{"other", 2, 0.04}};
        CPPUNIT_ASSERT(rows(tula::allreduce_from_runs(own, {})) == both);
        CPPUNIT_ASSERT(rows(tula::allreduce_from_runs(own, {sample("", 1, 4)})) == both);
        CPPUNIT_ASSERT(rows(tula::allreduce_from_runs(own, {sample("gpu", 2, 1)})) == std::vector<Row>{both.back()});
        CPPUNIT_ASSERT(tula::allreduce_from_runs(own, {sample("", 4, 1)}).empty());
        CPPUNIT_ASSERT(tula::allreduce_from_runs({ex("gpu", 2, 1, 0.0), ex("gpu", 2, 2, std::nan(""))}, {}).empty());
    }

    // Runs on 1 and 2 nodes and no allreduce profile: the plan data holds the 2-node exchange
    // the runs measured as the class's across-node allreduce, with a warning, and the fitted
    // allreduce at 2 nodes is that exchange.
    void test_load_plan_data_allreduce_from_runs() {
        tula_test::TempDir d("class-exchange");
        const std::string path = d.path + "/p.db";
        {
            auto db = tula::ProfileDb::open(path, tula::ProfileDb::Mode::ReadWrite);
            db.upsert_workload(workload("w@d", 1000));
            for (int b : {16, 32}) {
                db.add_run(run_of("w@d", 1, 1, b, kT0 + kT1 * b));
                db.add_run(run_of("w@d", 2, 1, b, kT0 + kT1 * b + 0.02));
            }
        }
        std::vector<std::string> warn;
        const tula::PlanData p = tula::load_plan_data({path}, "w@d", &warn);
        CPPUNIT_ASSERT_EQUAL(size_t(1), p.allreduce.size());
        CPPUNIT_ASSERT_EQUAL(2, p.allreduce[0].nodes);
        CPPUNIT_ASSERT_EQUAL(std::string("gpu"), p.allreduce[0].hardware_class);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.02, p.allreduce[0].seconds, 1e-9);
        bool said = false;
        for (const std::string& w : warn) said = said || (tula_test::contains(w, "no across-node allreduce profile of class gpu") &&
                                                          tula_test::contains(w, "w@d") && tula_test::contains(w, "on 2 nodes"));
        CPPUNIT_ASSERT_MESSAGE(warn.empty() ? "" : warn.back(), said);
        const tula::TimeModels m =
            tula::fit_profile_models(tula::Config{}, p.workload, p.compute, p.allreduce, tula::Corrections{}, nullptr);
        const tula::PartitionTarget t = m.run_target("gpu");
        CPPUNIT_ASSERT(t.allreduce);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.02, t.allreduce->seconds(2, 4000), 1e-9);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaClassExchangeTest);
