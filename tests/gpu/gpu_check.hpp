// Helpers of tula-gpu-tests (tests/gpu/*.cpp): the tolerance checker, bf16 rounding, random
// tensors, host/device copies, and the CPU-against-GPU checks of layers and models. The
// CPU path (trainer/core and trainer/cpu) is the oracle.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "gpu.hpp"
#include "gpu_train.hpp"
#include "data/data.hpp"
#include "train/train.hpp"
#include "core/layers.hpp"
#include "core/model.hpp"
#include "optim/optim.hpp"
#include "core/rng.hpp"

using namespace tula::train;
using namespace tula::train::cuda;

namespace gpu_check {


struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Largest |a - ref| seen by the checks of the current test (reported on PASS).
inline double g_max_err = 0;

// Checks a[i] against ref[i] within abs_tol + rel_tol*|ref[i]|; throws Failure naming the
// first offending index otherwise (and on a size mismatch).
inline void expect_close(const std::string& what, const float* a, const float* ref, size_t n, double abs_tol,
                  double rel_tol) {
    for (size_t i = 0; i < n; ++i) {
        const double err = std::fabs(static_cast<double>(a[i]) - ref[i]);
        if (!(err <= abs_tol + rel_tol * std::fabs(ref[i])))  // also catches NaN
            throw Failure(what + "[" + std::to_string(i) + "]: gpu " + std::to_string(a[i]) + " vs cpu " +
                          std::to_string(ref[i]) + " (|diff| " + std::to_string(err) + " > " +
                          std::to_string(abs_tol) + " + " + std::to_string(rel_tol) + "*|cpu|)");
        if (err > g_max_err) g_max_err = err;
    }
}
inline void expect_close(const std::string& what, const std::vector<float>& a, const std::vector<float>& ref, double abs_tol,
                  double rel_tol) {
    if (a.size() != ref.size())
        throw Failure(what + ": gpu has " + std::to_string(a.size()) + " values, cpu " + std::to_string(ref.size()));
    expect_close(what, a.data(), ref.data(), a.size(), abs_tol, rel_tol);
}
inline void expect_close(const std::string& what, const Tensor& a, const Tensor& ref, double abs_tol, double rel_tol) {
    if (a.n != ref.n || a.shape() != ref.shape())
        throw Failure(what + ": gpu shape " + a.str() + " vs cpu " + ref.str());
    expect_close(what, a.data, ref.data, abs_tol, rel_tol);
}

// Per-tensor check for deep networks, where single gradient values that are sums of many
// cancelling terms carry large relative rounding errors: for each segment,
// |a - ref|_2 <= rel_tol * |ref|_2 (plus a tiny floor for all-zero tensors).
inline void expect_close_per_tensor(const std::string& what, const std::vector<float>& a, const std::vector<float>& ref,
                             const std::vector<ParamSegment>& segs, double rel_tol) {
    if (a.size() != ref.size())
        throw Failure(what + ": gpu has " + std::to_string(a.size()) + " values, cpu " + std::to_string(ref.size()));
    for (const ParamSegment& s : segs) {
        double d2 = 0, r2 = 0;
        for (size_t i = s.offset; i < s.offset + s.size; ++i) {
            const double d = static_cast<double>(a[i]) - ref[i];
            d2 += d * d;
            r2 += static_cast<double>(ref[i]) * ref[i];
        }
        const double err = std::sqrt(d2), bound = rel_tol * std::sqrt(r2) + 1e-12;
        if (!(err <= bound))  // also catches NaN
            throw Failure(what + " " + s.name + ": |gpu - cpu|_2 " + std::to_string(err) + " > " +
                          std::to_string(rel_tol) + " * |cpu|_2 = " + std::to_string(bound));
        const double rel = err / (std::sqrt(r2) + 1e-30);
        if (rel > g_max_err) g_max_err = rel;
    }
}

// x rounded to bfloat16 (round to nearest even on the float32 bits, as __float2bfloat16_rn;
// NaN kept), returned as a float: the host reference of the GPU's cast.
inline float round_bf16(float x) {
    if (std::isnan(x)) return x;
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    std::memcpy(&x, &u, sizeof x);
    return x;
}
inline void round_bf16(float* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = round_bf16(p[i]);
}

// bfloat16's unit roundoff: 8 significand bits (7 stored), so rounding to nearest changes a
// value by at most 2^-8 of its magnitude.
constexpr double kBf16U = 1.0 / 256;

// |a - ref|_2 / |ref|_2 over a whole tensor.
inline double rel_l2(const float* a, const float* ref, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(a[i]) - ref[i];
        d2 += d * d;
        r2 += static_cast<double>(ref[i]) * ref[i];
    }
    return std::sqrt(d2) / (std::sqrt(r2) + 1e-30);
}
// Normwise check of one tensor: |a - ref|_2 <= rel_tol |ref|_2 (NaN fails).
inline void expect_close_l2(const std::string& what, const std::vector<float>& a, const std::vector<float>& ref,
                     double rel_tol) {
    if (a.size() != ref.size())
        throw Failure(what + ": gpu has " + std::to_string(a.size()) + " values, cpu " + std::to_string(ref.size()));
    const double rel = rel_l2(a.data(), ref.data(), a.size());
    if (!(rel <= rel_tol))
        throw Failure(what + ": |gpu - cpu|_2 / |cpu|_2 = " + std::to_string(rel) + " > " + std::to_string(rel_tol));
    if (rel > g_max_err) g_max_err = rel;
}

inline void fill_normal(Rng& r, float* p, size_t n, double scale = 1.0) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(scale * r.normal());
}
inline Tensor random_tensor(Rng& r, int n, const Shape& s) {
    Tensor t(n, s.c, s.h, s.w);
    fill_normal(r, t.ptr(), t.size());
    return t;
}

inline std::vector<float> to_host(const float* d, size_t n) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
inline void to_device(float* d, const float* h, size_t n) {
    if (n) CUDA_CHECK(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
}

struct Tol {
    double abs_tol, rel_tol;
    bool normwise = false;  // model_steps: every tensor checked as |gpu - cpu|_2 <= rel_tol |cpu|_2
    // model_steps with normwise: the gradient as one vector within grad_tol, and each
    // gradient and updated weight tensor within tensor_tol (the weights as one vector, the
    // logits, loss and BN state within rel_tol)
    double tensor_tol = 0, grad_tol = 0;
};

// One layer on both backends: the same parameters (CPU init, copied to the device), the
// same state, input x (n examples of shape `in`) and upstream gradient dy; compares y,
// dx (when need_dx), the accumulated parameter gradients (starting from the same nonzero
// values, which checks that backward ADDS) and the state. Two forward/backward rounds
// (the second reuses the layers' buffers and cached algorithms).
// bf16_inputs: parameters, x and dy are first rounded to bf16 on the host (for a layer on a
// Bf16 context, whose own rounding of them is then exact), and one round is run (from a
// nonzero gradient the second round's bf16-rounded dW would be compared with a sum whose
// terms may cancel).
inline void check_layer(GpuContext& ctx, Layer& cpu, GpuLayer& gpu, const Shape& in, int n, bool train, bool need_dx,
                 Tol tol, uint64_t seed, bool bf16_inputs = false) {
    const Shape out = cpu.configure(in);
    if (gpu.configure(in) != out) throw Failure("output shapes differ: gpu " + gpu.configure(in).str() + " vs cpu " +
                                                out.str());
    cpu.set_need_input_grad(need_dx);
    gpu.set_need_input_grad(need_dx);
    size_t np = 0;
    for (const ParamInfo& p : cpu.param_info()) np += p.size;
    size_t gnp = 0;
    for (const ParamInfo& p : gpu.param_info()) gnp += p.size;
    if (np != gnp) throw Failure("parameter counts differ: gpu " + std::to_string(gnp) + " vs cpu " + std::to_string(np));
    const size_t ns = cpu.state_size();
    if (gpu.state_size() != ns) throw Failure("state sizes differ");
    std::vector<float> p(np), g(np), st(ns);
    Rng rng(seed);
    cpu.bind(p.data(), g.data(), st.data());
    cpu.init(rng);
    fill_normal(rng, g.data(), np, 0.1);  // nonzero start: backward must add
    for (size_t i = 0; i < np; ++i) p[i] += static_cast<float>(0.1 * rng.normal());  // BN gamma/beta not trivial
    for (size_t i = 0; i < ns; ++i) st[i] = static_cast<float>(i < ns / 2 ? 0.1 * rng.normal() : 0.5 + rng.uniform());
    if (bf16_inputs) round_bf16(p.data(), np);
    DevMem dp, dg, dst;
    dp.reserve(sizeof(float) * (np + 1));
    dg.reserve(sizeof(float) * (np + 1));
    dst.reserve(sizeof(float) * (ns + 1));
    float* pp = static_cast<float*>(dp.get());
    float* gp = static_cast<float*>(dg.get());
    float* sp = static_cast<float*>(dst.get());
    to_device(pp, p.data(), np);
    to_device(gp, g.data(), np);
    to_device(sp, st.data(), ns);
    gpu.bind(pp, gp, sp);
    for (int round = 0; round < (bf16_inputs ? 1 : 2); ++round) {
        const std::string r = " (round " + std::to_string(round + 1) + ")";
        Tensor x = random_tensor(rng, n, in);
        Tensor dy = random_tensor(rng, n, out);
        if (bf16_inputs) {
            round_bf16(x.ptr(), x.size());
            round_bf16(dy.ptr(), dy.size());
        }
        DevTensor dx_dev, ddy;
        dx_dev.upload(x);
        ddy.upload(dy);
        const Tensor& y = cpu.forward(x, train);
        Tensor y_gpu;
        gpu.forward(dx_dev, train).download(y_gpu);
        expect_close("y" + r, y_gpu, y, tol.abs_tol, tol.rel_tol);
        if (ns) expect_close("state" + r, to_host(sp, ns), st, tol.abs_tol, tol.rel_tol);
        if (!train) continue;
        const Tensor& dx = cpu.backward(dy);
        Tensor dx_gpu;
        gpu.backward(ddy).download(dx_gpu);
        if (need_dx) expect_close("dx" + r, dx_gpu, dx, tol.abs_tol, tol.rel_tol);
        else if (dx_gpu.size() != 0) throw Failure("dx should be empty when the input gradient is not needed");
        if (np) expect_close("dparams" + r, to_host(gp, np), g, tol.abs_tol, tol.rel_tol);
    }
}

const Tol kLayerTol{2e-4, 2e-3};

// A Bf16 context whose convolutions run the directions of `mask` in bf16 and the others in
// TF32 (GpuContext::conv_bf16_mask; 7: bf16 only, so that the bf16 kernels are tested, not
// whichever arithmetic cuDNN times faster).
inline std::unique_ptr<GpuContext> bf16_context(int mask = 7) {
    auto c = std::make_unique<GpuContext>(0, false, Precision::Bf16);
    c->set_conv_bf16_mask(mask);
    return c;
}

struct Test {
    std::string name;
    bool needs_gpu;
    std::function<void(GpuContext*)> run;
};

inline void conv_case(GpuContext& c, int cin, int cout, int k, int s, int pad, bool bias, Shape in, int n, bool need_dx) {
    auto cpu = make_conv2d(cin, cout, k, s, pad, bias);
    auto gpu = make_gpu_conv2d(c, cin, cout, k, s, pad, bias);
    check_layer(c, *cpu, *gpu, in, n, true, need_dx, kLayerTol, 11);
}

// A layer on a Bf16 context against the CPU layer in float32 on the same unrounded random
// inputs (forward and backward from zero gradients). For y, dx and the gradient of the
// first parameter (the weight), |gpu - cpu|_2 / |cpu|_2 must lie in (u/32, 4u], u = 2^-8.
// Upper bound: bf16 rounding of the two operands perturbs each product by at most about 2u
// relatively and the result's rounding adds at most u; these errors are independent across
// products, so the normwise error is about u (Higham 2002, "Accuracy and Stability of
// Numerical Algorithms", 2nd ed., sec. 3.1 and 2.8 on statistical error estimates) and 4u
// leaves room; a wrong kernel (layout, scaling, missing accumulation) gives errors of order 1.
// Lower bound: the same layer computed in float32 (a bf16 path that silently fell back to
// fp32) is within about 1e-7, far below u/32 = 1.2e-4.
inline void check_layer_bf16_vs_fp32(Layer& cpu, GpuLayer& gpu, const Shape& in, int n, uint64_t seed) {
    const Shape out = cpu.configure(in);
    if (gpu.configure(in) != out) throw Failure("output shapes differ");
    size_t np = 0;
    for (const ParamInfo& p : cpu.param_info()) np += p.size;
    const size_t nw = cpu.param_info().front().size;
    std::vector<float> p(np), g(np, 0.0f);
    Rng rng(seed);
    cpu.bind(p.data(), g.data(), nullptr);
    cpu.init(rng);
    DevMem dp, dg;
    float* pp = static_cast<float*>(dp.reserve(sizeof(float) * np));
    float* gp = static_cast<float*>(dg.reserve(sizeof(float) * np));
    to_device(pp, p.data(), np);
    to_device(gp, g.data(), np);
    gpu.bind(pp, gp, nullptr);
    const Tensor x = random_tensor(rng, n, in), dy = random_tensor(rng, n, out);
    DevTensor dxin, ddy;
    dxin.upload(x);
    ddy.upload(dy);
    Tensor y_gpu, dx_gpu;
    gpu.forward(dxin, true).download(y_gpu);
    const Tensor& y = cpu.forward(x, true);
    gpu.backward(ddy).download(dx_gpu);
    const Tensor& dx = cpu.backward(dy);
    const std::vector<float> dw_gpu = to_host(gp, nw);
    auto bounds = [](const std::string& what, const float* a, const float* ref, size_t m) {
        const double rel = rel_l2(a, ref, m);
        if (!(rel <= 4 * kBf16U))
            throw Failure(what + ": |gpu - cpu|_2 / |cpu|_2 = " + std::to_string(rel) + " > 4u = " +
                          std::to_string(4 * kBf16U));
        if (rel <= kBf16U / 32)
            throw Failure(what + ": |gpu - cpu|_2 / |cpu|_2 = " + std::to_string(rel) + " <= u/32: not bf16 arithmetic");
        if (rel > g_max_err) g_max_err = rel;
    };
    if (y_gpu.size() != y.size() || dx_gpu.size() != dx.size()) throw Failure("output sizes differ");
    bounds("y", y_gpu.ptr(), y.ptr(), y.size());
    bounds("dx", dx_gpu.ptr(), dx.ptr(), dx.size());
    bounds("dweight", dw_gpu.data(), g.data(), nw);
}

// A full training step (forward, loss, backward, SGD) of a model on both backends from
// the same initial weights; compares logits, loss, gradients, BN state and the updated
// weights, for `steps` steps.
// resync: every step starts the GPU model from the CPU model's weights and BN state, so
// each step is compared on its own (for deep networks, where small-batch BN amplifies the
// fp32 rounding differences of earlier steps).
inline void model_steps(GpuContext& ctx, const std::string& name, int n, int steps, const Shape& in = Shape{1, 28, 28},
                 int classes = 10, Tol tol = Tol{1e-3, 1e-2}, bool resync = false) {
    auto cpu = build_model(name, in, classes);
    auto gpu = build_gpu_model(ctx, name, in, classes);
    if (cpu->num_params() != gpu->num_params() || cpu->state_size() != gpu->state_size())
        throw Failure("buffer sizes differ between the CPU and GPU models");
    for (size_t i = 0; i < cpu->segments().size(); ++i)
        if (cpu->segments()[i].name != gpu->segments()[i].name || cpu->segments()[i].offset != gpu->segments()[i].offset)
            throw Failure("segment " + std::to_string(i) + " differs: " + gpu->segments()[i].name + " vs " +
                          cpu->segments()[i].name);
    cpu->init(7);
    gpu->upload(cpu->params(), cpu->num_params(), cpu->state(), cpu->state_size());
    OptimConfig oc;  // SGD, momentum 0.9, weight decay 5e-4: GpuSgd's rule
    oc.kind = OptimKind::Sgd;
    oc.momentum = 0.9;
    oc.weight_decay = 5e-4;
    Optimizer sgd(cpu->segments(), cpu->num_params(), oc);
    GpuSgd gsgd(*gpu, 0.9, 5e-4);
    SoftmaxCrossEntropy loss;
    GpuSoftmaxCrossEntropy gloss(ctx);
    Rng rng(3);
    for (int step = 0; step < steps; ++step) {
        const std::string r = " (step " + std::to_string(step + 1) + ")";
        const Tensor x = random_tensor(rng, n, cpu->input_shape());
        std::vector<int> labels(n);
        for (int& l : labels) l = static_cast<int>(rng.below(classes));
        DevTensor dx;
        dx.upload(x);
        if (resync && step > 0) gpu->upload(cpu->params(), cpu->num_params(), cpu->state(), cpu->state_size());
        cpu->zero_grad();
        gpu->zero_grad();
        const Tensor& z = cpu->forward(x, true);
        const DevTensor& gz = gpu->forward(dx, true);
        Tensor z_gpu;
        gz.download(z_gpu);
        if (tol.normwise) expect_close_l2("logits" + r, z_gpu.data, z.data, tol.rel_tol);
        else expect_close("logits" + r, z_gpu, z, tol.abs_tol, tol.rel_tol);
        int64_t hits = 0, ghits = 0;
        const double l = loss.forward(z, labels.data(), n, &hits);
        const double gl = gloss.forward(gz, labels.data(), n, &ghits);
        const float lf = static_cast<float>(l), glf = static_cast<float>(gl);
        expect_close("loss" + r, &glf, &lf, 1, tol.abs_tol, tol.rel_tol);
        cpu->backward(loss.backward());
        gpu->backward(gloss.backward());
        std::vector<float> gp, gg, gs;
        gpu->download(nullptr, &gg, &gs);
        // a parameter-shaped vector: as a whole and per tensor (normwise), per tensor
        // (resync) or per value
        auto compare = [&](const std::string& what, const std::vector<float>& a, const std::vector<float>& ref,
                           double whole_tol) {
            if (tol.normwise) {
                expect_close_l2(what, a, ref, whole_tol);
                expect_close_per_tensor(what, a, ref, cpu->segments(), tol.tensor_tol);
            } else if (resync) {
                expect_close_per_tensor(what, a, ref, cpu->segments(), tol.rel_tol);
            } else {
                expect_close(what, a, ref, tol.abs_tol, tol.rel_tol);
            }
        };
        compare("grads" + r, gg, std::vector<float>(cpu->grads(), cpu->grads() + cpu->num_params()), tol.grad_tol);
        const std::vector<float> cs(cpu->state(), cpu->state() + cpu->state_size());
        if (tol.normwise) expect_close_l2("bn state" + r, gs, cs, tol.rel_tol);
        else expect_close("bn state" + r, gs, cs, tol.abs_tol, tol.rel_tol);
        sgd.step(cpu->params(), cpu->grads(), 0.05);
        gsgd.step(0.05);
        gpu->download(&gp, nullptr, nullptr);
        compare("params" + r, gp, std::vector<float>(cpu->params(), cpu->params() + cpu->num_params()), tol.rel_tol);
    }
}

// Evaluation-mode logits of a model on both backends from the same weights (for the models
// whose training step has dropout, whose masks differ between the backends by design).
inline void model_eval(GpuContext& ctx, const std::string& name, int n, const Shape& in, int classes, Tol tol) {
    auto cpu = build_model(name, in, classes);
    auto gpu = build_gpu_model(ctx, name, in, classes);
    if (cpu->num_params() != gpu->num_params() || cpu->state_size() != gpu->state_size())
        throw Failure("buffer sizes differ between the CPU and GPU models");
    cpu->init(9);
    gpu->upload(cpu->params(), cpu->num_params(), cpu->state(), cpu->state_size());
    Rng rng(4);
    const Tensor x = random_tensor(rng, n, in);
    DevTensor dx;
    dx.upload(x);
    Tensor z_gpu;
    gpu->forward(dx, false).download(z_gpu);
    expect_close("logits", z_gpu, cpu->forward(x, false), tol.abs_tol, tol.rel_tol);
}

// GpuTrainer (the StepEngine of tula-train --device cuda) against the CPU Trainer: same
// model, weights, examples and optimizer; losses and final weights after `steps` steps of 16
// examples, taken from the end of a synthetic set of `examples` (N, 1, 28, 28) images drawn
// with `data_seed`.
inline void trainer_steps(GpuContext& ctx, const std::string& name, OptimKind kind, int steps,
                   const std::vector<std::string>& allreduce = {}, int examples = 64, uint64_t data_seed = 5) {
    const SyntheticSpec spec = parse_synthetic("synthetic:1x28x28:10");
    const Dataset d = make_synthetic(spec, examples, data_seed);
    auto cpu = build_model(name);
    auto host = build_model(name);
    cpu->init(3);
    host->init(3);
    OptimConfig oc;
    oc.kind = kind;
    oc.eta_trust = 0.2;
    Comm serial;
    Trainer ct(*cpu, serial, oc);
    // with a method list: allreduce over the one rank anyway (the mean of one rank is itself)
    GpuTrainer gt(ctx, *host, serial, oc, 1, allreduce.empty() ? std::vector<std::string>{"nccl", "mpi"} : allreduce,
                  !allreduce.empty());
    if (!allreduce.empty() && gt.allreduce_method() != allreduce.front())
        throw Failure("allreduce method " + gt.allreduce_method() + " instead of " + allreduce.front() + ": " +
                      gt.allreduce_fallback_reason());
    gt.begin();
    const int n = 16;
    for (int step = 0; step < steps; ++step) {
        std::vector<int> idx(n);
        // from the set's end backwards: (step n + 3 i) mod count, mirrored
        for (int i = 0; i < n; ++i) idx[i] = d.count - 1 - (step * n + 3 * i) % d.count;
        StepStats cs, gs;
        const bool noise = step % 2 == 0;  // the micro-batch noise-scale observation on even steps
        const float l = static_cast<float>(ct.step(d, idx.data(), n, 0.05, true, nullptr, &cs, noise));
        const float gl = static_cast<float>(gt.step(d, idx.data(), n, 0.05, true, nullptr, &gs, noise));
        const std::string r = " (step " + std::to_string(step + 1) + ")";
        expect_close("loss" + r, &gl, &l, 1, 1e-4, 1e-3);
        const float g2 = static_cast<float>(cs.grad_norm2), gg2 = static_cast<float>(gs.grad_norm2);
        expect_close("|g|^2" + r, &gg2, &g2, 1, 1e-5, 1e-3);
        if (cs.noise != gs.noise || cs.b_small != gs.b_small || cs.b_big != gs.b_big)
            throw Failure("noise observation" + r + ": gpu B_small " + std::to_string(gs.b_small) + ", cpu " +
                          std::to_string(cs.b_small));
        const float s2 = static_cast<float>(cs.g2_small), gs2 = static_cast<float>(gs.g2_small);
        expect_close("micro-batch |g|^2" + r, &gs2, &s2, 1, 1e-5, 1e-3);
    }
    gt.end();
    expect_close("params", std::vector<float>(host->params(), host->params() + host->num_params()),
                 std::vector<float>(cpu->params(), cpu->params() + cpu->num_params()), 1e-4, 1e-3);
    const EvalResult ce = ct.evaluate(d, 20), ge = gt.evaluate(d, 20);
    const float a = static_cast<float>(ce.loss), b = static_cast<float>(ge.loss);
    expect_close("eval loss", &b, &a, 1, 1e-4, 1e-3);
}


/// The layer tests (test_gpu_layers.cpp) and the model, trainer and bf16 tests (test_gpu_model.cpp).
std::vector<Test> layer_tests();
std::vector<Test> model_tests();

}  // namespace gpu_check
