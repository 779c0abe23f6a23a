// libtula: the overlap of compute and communication in a step, Pollux's gamma (OverlapModel;
// Qiao et al. 2021, eq. 5; models.hpp).
#include "tula/models.hpp"

#include <gsl/gsl_blas.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit_nlinear.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "fit_util.hpp"
#include "tula/error.hpp"

namespace tula {

using namespace models_detail;

namespace {

double gamma_of(double u) { return 1.0 + 9.0 / (1.0 + std::exp(-u)); }

// (a^g + b^g)^(1/g) computed as M (1 + (m/M)^g)^(1/g) to avoid overflow.
double pnorm(double a, double b, double g) {
    const double M = std::max(a, b), m = std::min(a, b);
    if (!(M > 0)) return 0.0;
    return M * std::pow(1.0 + std::pow(m / M, g), 1.0 / g);
}

struct OverlapData {
    const std::vector<IterationSample>* s;
};

int overlap_f(const gsl_vector* x, void* params, gsl_vector* f) {
    const auto* d = static_cast<const OverlapData*>(params);
    const double g = gamma_of(gsl_vector_get(x, 0));
    for (size_t i = 0; i < d->s->size(); ++i) {
        const IterationSample& q = (*d->s)[i];
        gsl_vector_set(f, i, (pnorm(q.compute_seconds, q.comm_seconds, g) - q.measured_seconds) / q.measured_seconds);
    }
    return GSL_SUCCESS;
}

}  // namespace

OverlapModel OverlapModel::fit(const std::vector<IterationSample>& samples) {
    gsl_set_error_handler_off();
    std::vector<IterationSample> use;
    for (const auto& q : samples) {
        if (!std::isfinite(q.compute_seconds) || !std::isfinite(q.comm_seconds) || !std::isfinite(q.measured_seconds) ||
            q.compute_seconds < 0 || q.comm_seconds < 0 || q.measured_seconds < 0)
            throw Error("iteration sample with a negative or non-finite time; check the run history in the profile database");
        if (q.comm_seconds > 0 && q.compute_seconds > 0 && q.measured_seconds > 0) use.push_back(q);
    }
    OverlapModel m;
    if (use.empty()) return m;
    OverlapData data{&use};
    gsl_multifit_nlinear_fdf fdf;
    fdf.f = overlap_f;
    fdf.df = nullptr;  // finite-difference Jacobian
    fdf.fvv = nullptr;
    fdf.n = use.size();
    fdf.p = 1;
    fdf.params = &data;
    gsl_multifit_nlinear_parameters par = gsl_multifit_nlinear_default_parameters();
    double best_cost = std::numeric_limits<double>::infinity(), best_u = -50;  // gamma = 1
    // The cost is flat where the sigmoid saturates: start from several points, keep the best.
    for (double u0 : {-4.0, -1.5, 0.0, 1.5, 4.0}) {
        gsl_multifit_nlinear_workspace* w =
            gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &par, use.size(), 1);
        if (!w) throw Error("out of memory in the overlap fit");
        gsl_vector* x = gsl_vector_alloc(1);
        gsl_vector_set(x, 0, u0);
        int info = 0;
        int st = gsl_multifit_nlinear_init(x, &fdf, w);
        if (st == GSL_SUCCESS) st = gsl_multifit_nlinear_driver(200, 1e-10, 1e-10, 1e-12, nullptr, nullptr, &info, w);
        if (st == GSL_SUCCESS || st == GSL_EMAXITER) {
            const double u = gsl_vector_get(gsl_multifit_nlinear_position(w), 0);
            gsl_vector* f = gsl_multifit_nlinear_residual(w);
            double cost = 0;
            gsl_blas_ddot(f, f, &cost);
            if (std::isfinite(cost) && std::isfinite(u) && cost < best_cost) {
                best_cost = cost;
                best_u = u;
            }
        }
        gsl_vector_free(x);
        gsl_multifit_nlinear_free(w);
    }
    if (!std::isfinite(best_cost)) throw Error("the overlap (gamma) fit failed to converge; planning with gamma = 1");
    m.gamma = gamma_of(best_u);
    m.samples = static_cast<int>(use.size());
    m.rmse_rel = std::sqrt(best_cost / static_cast<double>(use.size()));
    return m;
}

double OverlapModel::combine(double compute_seconds, double comm_seconds) const {
    if (gamma <= 1.0) return compute_seconds + comm_seconds;
    return pnorm(compute_seconds, comm_seconds, gamma);
}

double OverlapModel::combine(double compute_seconds, double batch_compute_seconds,
                             const GradientAllreduce& comm) const {
    if (!(bucket_bytes > 0)) return combine(compute_seconds, comm.seconds);
    const double w = backward_fraction * std::clamp(batch_compute_seconds, 0.0, compute_seconds);
    return compute_seconds + comm.exposed_seconds(w);
}

}  // namespace tula
