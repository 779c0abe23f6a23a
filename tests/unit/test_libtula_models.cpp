// Unit tests of the compute and allreduce models (models.hpp): parameters recovered from
// synthetic noisy data, agreement with closed-form least squares, non-negativity, errors.
#include <cppunit/extensions/HelperMacros.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tula/error.hpp"
#include "tula/models.hpp"

namespace {

template <class F>
bool throws(F f) {
    try {
        f();
    } catch (const tula::Error&) {
        return true;
    }
    return false;
}

// Closed-form ordinary least squares y = a + b x (normal equations), the reference.
void ols_line(const std::vector<double>& x, const std::vector<double>& y, double* a, double* b) {
    const double n = static_cast<double>(x.size());
    double sx = 0, sy = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sx += x[i];
        sy += y[i];
    }
    const double mx = sx / n, my = sy / n;
    double sxy = 0, sxx = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
    }
    *b = sxy / sxx;
    *a = my - *b * mx;
}

// Closed-form least squares y = p u + q v without intercept (2x2 normal equations, Cramer).
void ols_two(const std::vector<double>& u, const std::vector<double>& v, const std::vector<double>& y, double* p,
             double* q) {
    double uu = 0, uv = 0, vv = 0, uy = 0, vy = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        uu += u[i] * u[i];
        uv += u[i] * v[i];
        vv += v[i] * v[i];
        uy += u[i] * y[i];
        vy += v[i] * y[i];
    }
    const double det = uu * vv - uv * uv;
    *p = (uy * vv - vy * uv) / det;
    *q = (uu * vy - uv * uy) / det;
}

tula::ComputeSample cs(int b, double t) {
    tula::ComputeSample s;
    s.workload = "w@d";
    s.local_batch = b;
    s.seconds_per_iter = t;
    s.iters = 20;
    return s;
}

tula::AllreduceSample as(int k, int64_t n, double t) {
    tula::AllreduceSample s;
    s.nodes = k;
    s.bytes = n;
    s.seconds = t;
    return s;
}

}  // namespace

class LibtulaModelsTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(LibtulaModelsTest);
    CPPUNIT_TEST(test_compute_recovers_parameters);
    CPPUNIT_TEST(test_compute_matches_closed_form);
    CPPUNIT_TEST(test_compute_non_negative);
    CPPUNIT_TEST(test_compute_errors);
    CPPUNIT_TEST(test_allreduce_recovers_parameters);
    CPPUNIT_TEST(test_allreduce_non_negative);
    CPPUNIT_TEST(test_allreduce_formula);
    CPPUNIT_TEST(test_allreduce_errors);
    CPPUNIT_TEST_SUITE_END();

public:
    void test_compute_recovers_parameters() {
        const double t0 = 2.5e-3, t1 = 1.8e-4;  // 2.5 ms overhead, 0.18 ms per example
        std::mt19937 rng(2024);
        std::normal_distribution<double> noise(0.0, 0.01);  // 1 % multiplicative noise
        std::vector<tula::ComputeSample> s;
        for (int rep = 0; rep < 5; ++rep)
            for (int b : {8, 16, 32, 64, 128, 256, 512}) s.push_back(cs(b, (t0 + t1 * b) * (1 + noise(rng))));
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t1, m.t1, 0.02 * t1);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(t0, m.t0, 0.25 * t0);
        CPPUNIT_ASSERT_EQUAL(8, m.min_batch);
        CPPUNIT_ASSERT_EQUAL(512, m.max_batch);
        CPPUNIT_ASSERT(m.rmse > 0 && m.rmse < 0.02 * (t0 + t1 * 512));
        CPPUNIT_ASSERT_DOUBLES_EQUAL(m.t0 + m.t1 * 100, m.seconds_per_iter(100), 1e-15);
    }

    void test_compute_matches_closed_form() {
        std::mt19937 rng(99);
        std::uniform_real_distribution<double> u(0.5, 1.5);
        std::vector<tula::ComputeSample> s;
        std::vector<double> x, y;
        for (int i = 0; i < 30; ++i) {
            const int b = 1 + static_cast<int>(rng() % 1000);
            const double t = 0.01 + 1e-4 * b * u(rng);
            s.push_back(cs(b, t));
            x.push_back(b);
            y.push_back(t);
        }
        double a = 0, b = 0;
        ols_line(x, y, &a, &b);
        CPPUNIT_ASSERT(a > 0 && b > 0);  // the unconstrained fit is feasible here
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(a, m.t0, 1e-9 * std::fabs(a) + 1e-15);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(b, m.t1, 1e-9 * std::fabs(b));
        double sse = 0;
        for (size_t i = 0; i < x.size(); ++i) sse += std::pow(a + b * x[i] - y[i], 2);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(std::sqrt(sse / x.size()), m.rmse, 1e-12);
    }

    void test_compute_non_negative() {
        // A true negative intercept: the unconstrained fit says t0 < 0; the model fixes t0 = 0
        // and refits t1 through the origin: t1 = sum(b t) / sum(b^2).
        std::vector<tula::ComputeSample> s;
        std::vector<double> x, y;
        for (int b : {16, 32, 64, 128}) {
            const double t = -0.001 + 1e-4 * b;
            s.push_back(cs(b, t));
            x.push_back(b);
            y.push_back(t);
        }
        double a = 0, b = 0;
        ols_line(x, y, &a, &b);
        CPPUNIT_ASSERT(a < 0);
        double sxy = 0, sxx = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            sxy += x[i] * y[i];
            sxx += x[i] * x[i];
        }
        const auto m = tula::ComputeModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(0.0, m.t0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(sxy / sxx, m.t1, 1e-12);
        // Time falling with batch (noise): slope fixed at 0, t0 = mean time.
        const auto f = tula::ComputeModel::fit({cs(16, 0.03), cs(32, 0.02)});
        CPPUNIT_ASSERT_EQUAL(0.0, f.t1);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(0.025, f.t0, 1e-15);
    }

    void test_compute_errors() {
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(32, 0.11), cs(32, 0.09)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, 0.0)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, -1.0)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, NAN)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, INFINITY)}); }));
        CPPUNIT_ASSERT(throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(0, 0.1)}); }));
        CPPUNIT_ASSERT(!throws([] { tula::ComputeModel::fit({cs(32, 0.1), cs(64, 0.2)}); }));
        try {
            tula::ComputeModel::fit({cs(32, 0.1)});
        } catch (const tula::Error& e) {
            CPPUNIT_ASSERT_MESSAGE(e.what(), std::string(e.what()).find("tula profile compute") != std::string::npos);
        }
    }

    void test_allreduce_recovers_parameters() {
        const double alpha = 30e-6, beta = 1.0 / 1.2e9;  // 30 us per step, 1.2 GB/s
        std::mt19937 rng(77);
        std::normal_distribution<double> noise(0.0, 0.02);
        std::vector<tula::AllreduceSample> s;
        std::vector<double> u, v, y;
        for (int rep = 0; rep < 3; ++rep)
            for (int k : {1, 2, 3, 4, 8})
                for (int64_t n : {int64_t(256), int64_t(65536), int64_t(1) << 20, int64_t(4) << 20}) {
                    const double truth = k == 1 ? 0.0 : 2.0 * (k - 1) * alpha + 2.0 * (k - 1) / k * n * beta;
                    const double t = truth * (1 + noise(rng));
                    s.push_back(as(k, n, t));
                    if (k > 1) {  // 1-node samples carry no information
                        u.push_back(2.0 * (k - 1));
                        v.push_back(2.0 * (k - 1) / k * n);
                        y.push_back(t);
                    }
                }
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(alpha, m.alpha, 0.1 * alpha);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(beta, m.beta, 0.02 * beta);
        double p = 0, q = 0;
        ols_two(u, v, y, &p, &q);
        CPPUNIT_ASSERT(p > 0 && q > 0);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(p, m.alpha, 1e-6 * p);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(q, m.beta, 1e-6 * q);
        CPPUNIT_ASSERT(m.rmse > 0);
    }

    void test_allreduce_non_negative() {
        // Seconds that fall with the step count at a fixed volume push alpha below 0: the fit
        // fixes alpha = 0 and refits beta alone: beta = sum(v t) / sum(v^2).
        std::vector<tula::AllreduceSample> s;
        std::vector<double> u, v, y;
        const double beta = 1e-9;
        for (int k : {2, 4, 8})
            for (int64_t n : {int64_t(1) << 20, int64_t(8) << 20}) {
                const double vol = 2.0 * (k - 1) / k * n;
                const double t = vol * beta - 2.0 * (k - 1) * 5e-5;
                CPPUNIT_ASSERT(t > 0);
                s.push_back(as(k, n, t));
                u.push_back(2.0 * (k - 1));
                v.push_back(vol);
                y.push_back(t);
            }
        double p = 0, q = 0;
        ols_two(u, v, y, &p, &q);
        CPPUNIT_ASSERT(p < 0);
        double vy = 0, vv = 0;
        for (size_t i = 0; i < y.size(); ++i) {
            vy += v[i] * y[i];
            vv += v[i] * v[i];
        }
        const auto m = tula::AllreduceModel::fit(s);
        CPPUNIT_ASSERT_EQUAL(0.0, m.alpha);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(vy / vv, m.beta, 1e-9 * vy / vv);
        // and a negative beta (time shrinking with size) gives beta = 0, alpha = mean(t / u)-ish fit
        const auto m2 = tula::AllreduceModel::fit({as(2, 1000, 2e-4), as(2, 100000, 1e-4)});
        CPPUNIT_ASSERT_EQUAL(0.0, m2.beta);
        CPPUNIT_ASSERT_DOUBLES_EQUAL((2e-4 + 1e-4) / 2 / 2, m2.alpha, 1e-15);
    }

    void test_allreduce_formula() {
        tula::AllreduceModel m;
        m.alpha = 1e-5;
        m.beta = 2e-9;
        CPPUNIT_ASSERT_EQUAL(0.0, m.seconds(1, 1e6));
        CPPUNIT_ASSERT_EQUAL(0.0, m.seconds(0, 1e6));
        for (int k = 2; k <= 16; ++k) {
            const double n = 246824.0;  // 4 * 61706 bytes, LeNet-5's gradient
            const double want = 2.0 * (k - 1) * 1e-5 + 2.0 * (k - 1) / k * n * 2e-9;
            CPPUNIT_ASSERT_DOUBLES_EQUAL(want, m.seconds(k, n), 1e-15);
        }
    }

    void test_allreduce_errors() {
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(1, 1000, 0.0), as(1, 2000, 0.0)}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(2, 1000, 1.1e-4)}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(3, 1000, NAN)}); }));
        CPPUNIT_ASSERT(throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(3, -5, 1e-4)}); }));
        CPPUNIT_ASSERT(!throws([] { tula::AllreduceModel::fit({as(2, 1000, 1e-4), as(3, 1000, 2e-4)}); }));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(LibtulaModelsTest);
