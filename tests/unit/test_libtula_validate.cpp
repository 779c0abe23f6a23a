// Unit tests of the leave-one-out validation (validate.hpp): exact synthetic data gives 0 %
// error; a known perturbation gives the MAPE a naive computation gives.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <string>
#include <vector>

#include "tula/error.hpp"
#include "tula/validate.hpp"

namespace {

tula::ComputeSample cs(int b, double t) {
    tula::ComputeSample s;
    s.workload = "w@d";
    s.local_batch = b;
    s.seconds_per_iter = t;
    return s;
}

tula::Workload wl() {
    tula::Workload w;
    w.name = "w@d";
    w.model = "lenet5";
    w.params = 1000;
    w.train_examples = 6000;
    return w;
}

}  // namespace

class LibtulaValidateTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaValidateTest);
    CPPUNIT_TEST(test_exact_data);
    CPPUNIT_TEST(test_known_error);
    CPPUNIT_TEST(test_partial_and_errors);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_exact_data() {
        const double t0 = 1e-3, t1 = 1e-4, alpha = 1e-4, beta = 1e-9;
        std::vector<tula::ComputeSample> c;
        for (int b : {8, 16, 32, 64, 128}) c.push_back(cs(b, t0 + t1 * b));
        std::vector<tula::AllreduceSample> a;
        for (int k : {2, 4})
            for (int64_t n : {int64_t(1000), int64_t(100000)}) {
                tula::AllreduceSample s;
                s.nodes = k;
                s.bytes = n;
                s.seconds = 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * n * beta;
                a.push_back(s);
            }
        std::vector<tula::RunRecord> runs;
        for (int k : {1, 2, 4}) {
            tula::RunRecord r;
            r.nodes = k;
            r.global_batch = 64 * k;
            r.epochs = 2;
            const double tm = k > 1 ? 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * 4000 * beta : 0;
            r.measured_seconds = 2 * std::floor(6000.0 / r.global_batch) * (t0 + t1 * 64 + tm);
            runs.push_back(r);
        }
        const auto v = tula::validate_workload(wl(), c, a, runs, false, 2.0);
        CPPUNIT_ASSERT_EQUAL(size_t(5 + 3), v.points.size());
        CPPUNIT_ASSERT(v.mape_epoch_time < 1e-6);
        CPPUNIT_ASSERT(v.mape_cost < 1e-6);
    }

    void test_known_error() {
        // A run measured 10 % slower than the exact model: MAPE = 10 % / number of points.
        std::vector<tula::ComputeSample> c;
        for (int b : {16, 32}) c.push_back(cs(b, 1e-3 + 1e-4 * b));
        tula::RunRecord r;
        r.nodes = 1;
        r.global_batch = 64;
        r.epochs = 1;
        r.measured_seconds = 1.1 * std::floor(6000.0 / 64) * (1e-3 + 1e-4 * 64);
        const auto v = tula::validate_workload(wl(), c, {}, {r}, false, 1.0);
        CPPUNIT_ASSERT_EQUAL(size_t(1), v.points.size());  // 2 batches: no compute leave-one-out
        CPPUNIT_ASSERT_DOUBLES_EQUAL(100.0 * (1 - 1 / 1.1), v.mape_epoch_time, 1e-9);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(v.mape_epoch_time, v.mape_cost, 1e-9);
        CPPUNIT_ASSERT(!v.notes.empty());
    }

    void test_partial_and_errors() {
        std::vector<tula::ComputeSample> c;
        for (int b : {8, 16, 32, 64}) c.push_back(cs(b, 1e-3 + 1e-4 * b));
        const auto v = tula::validate_workload(wl(), c, {}, {}, true, 1.0);
        CPPUNIT_ASSERT(v.points.empty());  // 2 batches left, no runs
        CPPUNIT_ASSERT(std::isnan(v.mape_epoch_time));
        tula::Workload w = wl();
        w.train_examples = 0;
        bool threw = false;
        try {
            tula::validate_workload(w, c, {}, {}, false, 1.0);
        } catch (const tula::Error&) {
            threw = true;
        }
        CPPUNIT_ASSERT(threw);
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaValidateTest);
