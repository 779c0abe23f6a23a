// Unit tests of the top-Hessian-eigenvalue power iteration (finite-difference Hessian-vector
// products): on a known quadratic it recovers the largest eigenvalue that Eigen's
// SelfAdjointEigenSolver computes from the dense matrix (the independent reference); on a
// non-quadratic function with an analytic Hessian it recovers the analytic value; the
// model probe leaves the parameters, gradients and BN statistics as they were.
#include <cppunit/extensions/HelperMacros.h>

// GCC 12 reports a false -Wmaybe-uninitialized inside Eigen's symmetric matrix-vector
// kernels used by SelfAdjointEigenSolver; the warning is about Eigen, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <Eigen/Dense>
#pragma GCC diagnostic pop

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "dist/comm.hpp"
#include "data/data.hpp"
#include "optim/hessian.hpp"
#include "core/model.hpp"
#include "core/rng.hpp"

using namespace tula::train;

class TrainerHessianTest : public CppUnit::TestFixture {
    CPPUNIT_TEST_SUITE(TrainerHessianTest);
    CPPUNIT_TEST(test_quadratic_matches_eigen_solver);
    CPPUNIT_TEST(test_quartic_analytic_hessian);
    CPPUNIT_TEST(test_warm_start_keeps_eigenvector);
    CPPUNIT_TEST(test_bad_settings_rejected);
    CPPUNIT_TEST(test_probe_restores_model);
    CPPUNIT_TEST_SUITE_END();

    // L(w) = 0.5 w'Aw - b'w, gradient Aw - b; A symmetric positive definite, random.
    void quadratic(int n, uint64_t seed) {
        Rng rng(seed);
        Eigen::MatrixXd M(n, n);
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < n; ++j) M(i, j) = rng.normal();
        const Eigen::MatrixXd A = M * M.transpose() / n + 0.1 * Eigen::MatrixXd::Identity(n, n);
        Eigen::VectorXd b(n), w(n);
        for (int i = 0; i < n; ++i) {
            b(i) = rng.normal();
            w(i) = rng.normal();
        }
        const Eigen::MatrixXf Af = A.cast<float>();
        const Eigen::VectorXf bf = b.cast<float>();
        GradientFn grad = [&](const float* x, float* g) {
            Eigen::Map<Eigen::VectorXf>(g, n) = Af * Eigen::Map<const Eigen::VectorXf>(x, n) - bf;
        };
        const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> es(A);
        const double truth = es.eigenvalues().maxCoeff();
        std::vector<float> wf(n), v;
        for (int i = 0; i < n; ++i) wf[i] = static_cast<float>(w(i));
        PowerIterConfig cfg;
        cfg.max_iters = 1000;
        cfg.tol = 1e-7;
        const PowerIterResult r = top_hessian_eigenvalue(grad, wf.data(), n, v, cfg, seed + 1);
        if (std::fabs(r.eigenvalue - truth) > 1e-3 * truth)
            CPPUNIT_FAIL("power iteration " + std::to_string(r.eigenvalue) + " vs Eigen " + std::to_string(truth) +
                         " after " + std::to_string(r.iterations) + " iterations");
        CPPUNIT_ASSERT(r.iterations >= 2);
        // the iterate is the top eigenvector (up to sign)
        Eigen::VectorXd top = es.eigenvectors().col(n - 1);
        Eigen::VectorXd vd(n);
        for (int i = 0; i < n; ++i) vd(i) = v[i];
        CPPUNIT_ASSERT_DOUBLES_EQUAL(1.0, std::fabs(vd.dot(top)), 1e-2);
    }

    void test_quadratic_matches_eigen_solver() {
        quadratic(30, 3);
        quadratic(80, 4);
    }

    // L(w) = sum_i c_i w_i^4 / 12 + sum_i w_i w_{i+1} / 2: gradient c_i w_i^3 / 3 + (w_{i-1} +
    // w_{i+1}) / 2, Hessian tridiagonal with diagonal c_i w_i^2 and off-diagonal 1/2 —
    // non-quadratic, so the finite differences are not exact; the reference is the dense
    // analytic Hessian solved by Eigen.
    void test_quartic_analytic_hessian() {
        const int n = 40;
        Rng rng(9);
        std::vector<double> c(n);
        std::vector<float> w(n);
        for (int i = 0; i < n; ++i) {
            c[i] = 1.0 + 9.0 * rng.uniform();
            w[i] = static_cast<float>(0.5 + rng.uniform());
        }
        GradientFn grad = [&](const float* x, float* g) {
            for (int i = 0; i < n; ++i) {
                double s = c[i] * x[i] * x[i] * x[i] / 3.0;
                if (i > 0) s += 0.5 * x[i - 1];
                if (i + 1 < n) s += 0.5 * x[i + 1];
                g[i] = static_cast<float>(s);
            }
        };
        Eigen::MatrixXd H = Eigen::MatrixXd::Zero(n, n);
        for (int i = 0; i < n; ++i) {
            H(i, i) = c[i] * static_cast<double>(w[i]) * w[i];
            if (i + 1 < n) H(i, i + 1) = H(i + 1, i) = 0.5;
        }
        const double truth = Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(H).eigenvalues().maxCoeff();
        std::vector<float> v;
        PowerIterConfig cfg;
        cfg.max_iters = 2000;
        cfg.tol = 1e-8;
        const PowerIterResult r = top_hessian_eigenvalue(grad, w.data(), n, v, cfg, 2);
        if (std::fabs(r.eigenvalue - truth) > 2e-3 * truth)
            CPPUNIT_FAIL("power iteration " + std::to_string(r.eigenvalue) + " vs analytic " + std::to_string(truth));
    }

    // Started from the converged eigenvector, the iteration stops after two iterations.
    void test_warm_start_keeps_eigenvector() {
        const int n = 3;
        // diag(5, 2, 1): top eigenvalue 5, eigenvector e1
        GradientFn grad = [&](const float* x, float* g) {
            g[0] = 5 * x[0];
            g[1] = 2 * x[1];
            g[2] = x[2];
        };
        std::vector<float> w{1, 1, 1}, v{1, 0, 0};
        PowerIterConfig cfg;
        cfg.max_iters = 50;
        const PowerIterResult r = top_hessian_eigenvalue(grad, w.data(), n, v, cfg, 1);
        CPPUNIT_ASSERT(r.converged);
        CPPUNIT_ASSERT_EQUAL(2, r.iterations);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5.0, r.eigenvalue, 1e-3);
        // a cold start (v of the wrong size) needs more iterations to get there
        std::vector<float> cold;
        const PowerIterResult rc = top_hessian_eigenvalue(grad, w.data(), n, cold, cfg, 1);
        CPPUNIT_ASSERT(rc.iterations > 2);
        CPPUNIT_ASSERT_DOUBLES_EQUAL(5.0, rc.eigenvalue, 1e-2);
    }

    void test_bad_settings_rejected() {
        GradientFn grad = [](const float* x, float* g) { g[0] = x[0]; };
        std::vector<float> w{1}, v;
        PowerIterConfig bad;
        bad.max_iters = 0;
        CPPUNIT_ASSERT_THROW(top_hessian_eigenvalue(grad, w.data(), 1, v, bad), std::invalid_argument);
        bad = PowerIterConfig();
        bad.eps_rel = 0;
        CPPUNIT_ASSERT_THROW(top_hessian_eigenvalue(grad, w.data(), 1, v, bad), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(top_hessian_eigenvalue(grad, w.data(), 0, v), std::invalid_argument);
        CPPUNIT_ASSERT_THROW(HessianProbe({}, PowerIterConfig(), 1), std::invalid_argument);
    }

    // fmnist-cnn has batch norm: after a measurement its parameters, gradients and running
    // statistics are bit-identical to before, and the eigenvalue is finite and positive
    // (a freshly initialized network with cross-entropy loss has positive curvature along
    // its top direction).
    void test_probe_restores_model() {
        const SyntheticSpec spec = parse_synthetic("synthetic:1x12x12:4");
        const Dataset d = make_synthetic(spec, 32, 7);
        auto m = build_model("fmnist-cnn", spec.shape, spec.classes);
        m->init(5);
        Rng rng(1);
        for (size_t i = 0; i < m->num_params(); ++i) m->grads()[i] = static_cast<float>(rng.normal());
        for (size_t i = 0; i < m->state_size(); ++i) m->state()[i] += 0.25f;
        const std::vector<float> w(m->params(), m->params() + m->num_params());
        const std::vector<float> g(m->grads(), m->grads() + m->num_params());
        const std::vector<float> s(m->state(), m->state() + m->state_size());
        CPPUNIT_ASSERT(!s.empty());
        std::vector<int> probe(16);
        for (int i = 0; i < 16; ++i) probe[i] = i;
        PowerIterConfig cfg;
        cfg.max_iters = 8;
        HessianProbe hp(probe, cfg, 3);
        Comm serial;
        const PowerIterResult r = hp.measure(*m, d, serial);
        CPPUNIT_ASSERT(std::isfinite(r.eigenvalue));
        CPPUNIT_ASSERT(r.eigenvalue > 0);
        CPPUNIT_ASSERT_EQUAL(r.eigenvalue, hp.last());
        CPPUNIT_ASSERT(w == std::vector<float>(m->params(), m->params() + m->num_params()));
        CPPUNIT_ASSERT(g == std::vector<float>(m->grads(), m->grads() + m->num_params()));
        CPPUNIT_ASSERT(s == std::vector<float>(m->state(), m->state() + m->state_size()));
    }
};

CPPUNIT_TEST_SUITE_REGISTRATION(TrainerHessianTest);
