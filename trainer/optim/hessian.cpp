// tula-train: top Hessian eigenvalue by power iteration. See hessian.hpp.
#include "optim/hessian.hpp"

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/rng.hpp"

namespace tula {
namespace train {

namespace {
using VecF = Eigen::Map<Eigen::VectorXf>;
using CVecF = Eigen::Map<const Eigen::VectorXf>;
}  // namespace

PowerIterResult top_hessian_eigenvalue(const GradientFn& grad, const float* w, size_t n, std::vector<float>& v,
                                       const PowerIterConfig& cfg, uint64_t seed) {
    if (n == 0) throw std::invalid_argument("top_hessian_eigenvalue: no parameters");
    if (cfg.max_iters < 1) throw std::invalid_argument("top_hessian_eigenvalue: max_iters must be >= 1");
    if (!(cfg.tol >= 0)) throw std::invalid_argument("top_hessian_eigenvalue: tol must be >= 0");
    if (!(cfg.eps_rel > 0) || !std::isfinite(cfg.eps_rel))
        throw std::invalid_argument("top_hessian_eigenvalue: eps_rel must be > 0");
    const Eigen::Index N = static_cast<Eigen::Index>(n);
    if (v.size() != n || !(VecF(v.data(), N).squaredNorm() > 0)) {
        Rng rng(seed);
        v.resize(n);
        for (float& x : v) x = static_cast<float>(rng.normal());
    }
    VecF vv(v.data(), N);
    vv.normalize();
    CVecF wv(w, N);
    const double eps = cfg.eps_rel * std::max(1.0, static_cast<double>(wv.norm()));
    std::vector<float> wp(n), gp(n), gm(n);
    VecF wpv(wp.data(), N), gpv(gp.data(), N), gmv(gm.data(), N);
    PowerIterResult r;
    double prev = 0;
    for (int k = 1; k <= cfg.max_iters; ++k) {
        wpv = wv + static_cast<float>(eps) * vv;
        grad(wp.data(), gp.data());
        wpv = wv - static_cast<float>(eps) * vv;
        grad(wp.data(), gm.data());
        // u = H v, kept in gp
        gpv = (gpv - gmv) / static_cast<float>(2.0 * eps);
        const double lambda = static_cast<double>(vv.dot(gpv));
        const double un = static_cast<double>(gpv.norm());
        r.eigenvalue = lambda;
        r.iterations = k;
        if (!std::isfinite(un) || !(un > 0)) break;  // H v = 0 (or non-finite): nothing to iterate on
        vv = gpv / static_cast<float>(un);
        if (k > 1 && std::fabs(lambda - prev) <= cfg.tol * std::fabs(lambda)) {
            r.converged = true;
            break;
        }
        prev = lambda;
    }
    return r;
}

HessianProbe::HessianProbe(std::vector<int> probe, const PowerIterConfig& cfg, uint64_t seed)
    : probe_(std::move(probe)), cfg_(cfg), seed_(seed) {
    if (probe_.empty()) throw std::invalid_argument("the Hessian probe batch is empty");
}

PowerIterResult HessianProbe::measure(Model& model, const Dataset& d, Comm& comm) {
    const int K = comm.size(), r = comm.rank();
    const int P = static_cast<int>(probe_.size());
    if (P < K)
        throw std::invalid_argument("the Hessian probe batch (" + std::to_string(P) + " examples) is smaller than the " +
                                    std::to_string(K) + " ranks");
    const int lo = static_cast<int>(static_cast<int64_t>(r) * P / K);
    const int hi = static_cast<int>(static_cast<int64_t>(r + 1) * P / K);
    const size_t np = model.num_params();
    // save what a measurement overwrites
    w0_.assign(model.params(), model.params() + np);
    g0_.assign(model.grads(), model.grads() + np);
    s0_.assign(model.state(), model.state() + model.state_size());
    const float share = static_cast<float>(hi - lo) / static_cast<float>(P);
    GradientFn grad = [&](const float* w, float* g) {
        std::copy(w, w + np, model.params());
        model.zero_grad();
        labels_.resize(hi - lo);
        gather_batch(d, probe_.data() + lo, hi - lo, x_, labels_.data());
        ce_.forward(model.forward(x_, true), labels_.data(), hi - lo, nullptr);
        model.backward(ce_.backward());
        const float* gm = model.grads();
        // mean over the whole probe batch = sum over ranks of (share of rank) * (rank's mean)
        for (size_t i = 0; i < np; ++i) g[i] = share * gm[i];
        if (K > 1) comm.allreduce_sum(g, np);
    };
    PowerIterResult res;
    try {
        res = top_hessian_eigenvalue(grad, w0_.data(), np, v_, cfg_, seed_);
    } catch (...) {
        std::copy(w0_.begin(), w0_.end(), model.params());
        std::copy(g0_.begin(), g0_.end(), model.grads());
        std::copy(s0_.begin(), s0_.end(), model.state());
        throw;
    }
    std::copy(w0_.begin(), w0_.end(), model.params());
    std::copy(g0_.begin(), g0_.end(), model.grads());
    std::copy(s0_.begin(), s0_.end(), model.state());
    last_ = res.eigenvalue;
    return res;
}

}  // namespace train
}  // namespace tula
