// tula-gpu-tests: every GPU layer, the loss, SGD, the squared norms, whole training steps
// of lenet5, fmnist-cnn and resnet18, evaluation-mode logits of mobilenetv3-small and
// vgg11, GpuTrainer (tula-train --device cuda) against the CPU Trainer, and the bf16
// (mixed precision) convolution, linear layer and training steps of fmnist-cnn and resnet18,
// checked against the CPU path (trainer/core and trainer/cpu, the oracle) on the same random inputs and
// weights: |gpu - cpu| <= abs_tol + rel_tol * |cpu| for every value, or per tensor
// normwise where stated (deep networks, bf16).
//
//   tula-gpu-tests [NAME...]
//
// Prints one line per test: `PASS name (max err ...)`, `FAIL name: ...`, or, when no CUDA
// device can be used (cudaGetDeviceCount fails or reports 0), `SKIP name: no CUDA device
// (<error string>)`. The comparator's self-test runs on the host and so runs everywhere.
// Last line: `gpu: N passed, M failed, K skipped`; exit status 1 if M > 0.
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

namespace {

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Largest |a - ref| seen by the checks of the current test (reported on PASS).
double g_max_err = 0;

// Checks a[i] against ref[i] within abs_tol + rel_tol*|ref[i]|; throws Failure naming the
// first offending index otherwise (and on a size mismatch).
void expect_close(const std::string& what, const float* a, const float* ref, size_t n, double abs_tol,
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
void expect_close(const std::string& what, const std::vector<float>& a, const std::vector<float>& ref, double abs_tol,
                  double rel_tol) {
    if (a.size() != ref.size())
        throw Failure(what + ": gpu has " + std::to_string(a.size()) + " values, cpu " + std::to_string(ref.size()));
    expect_close(what, a.data(), ref.data(), a.size(), abs_tol, rel_tol);
}
void expect_close(const std::string& what, const Tensor& a, const Tensor& ref, double abs_tol, double rel_tol) {
    if (a.n != ref.n || a.shape() != ref.shape())
        throw Failure(what + ": gpu shape " + a.str() + " vs cpu " + ref.str());
    expect_close(what, a.data, ref.data, abs_tol, rel_tol);
}

// Per-tensor check for deep networks, where single gradient values that are sums of many
// cancelling terms carry large relative rounding errors: for each segment,
// |a - ref|_2 <= rel_tol * |ref|_2 (plus a tiny floor for all-zero tensors).
void expect_close_per_tensor(const std::string& what, const std::vector<float>& a, const std::vector<float>& ref,
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
float round_bf16(float x) {
    if (std::isnan(x)) return x;
    uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    u &= 0xFFFF0000u;
    std::memcpy(&x, &u, sizeof x);
    return x;
}
void round_bf16(float* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = round_bf16(p[i]);
}

// bfloat16's unit roundoff: 8 significand bits (7 stored), so rounding to nearest changes a
// value by at most 2^-8 of its magnitude.
constexpr double kBf16U = 1.0 / 256;

// |a - ref|_2 / |ref|_2 over a whole tensor.
double rel_l2(const float* a, const float* ref, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(a[i]) - ref[i];
        d2 += d * d;
        r2 += static_cast<double>(ref[i]) * ref[i];
    }
    return std::sqrt(d2) / (std::sqrt(r2) + 1e-30);
}
// Normwise check of one tensor: |a - ref|_2 <= rel_tol |ref|_2 (NaN fails).
void expect_close_l2(const std::string& what, const std::vector<float>& a, const std::vector<float>& ref,
                     double rel_tol) {
    if (a.size() != ref.size())
        throw Failure(what + ": gpu has " + std::to_string(a.size()) + " values, cpu " + std::to_string(ref.size()));
    const double rel = rel_l2(a.data(), ref.data(), a.size());
    if (!(rel <= rel_tol))
        throw Failure(what + ": |gpu - cpu|_2 / |cpu|_2 = " + std::to_string(rel) + " > " + std::to_string(rel_tol));
    if (rel > g_max_err) g_max_err = rel;
}

void fill_normal(Rng& r, float* p, size_t n, double scale = 1.0) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(scale * r.normal());
}
Tensor random_tensor(Rng& r, int n, const Shape& s) {
    Tensor t(n, s.c, s.h, s.w);
    fill_normal(r, t.ptr(), t.size());
    return t;
}

std::vector<float> to_host(const float* d, size_t n) {
    std::vector<float> h(n);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (n) CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
void to_device(float* d, const float* h, size_t n) {
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
void check_layer(GpuContext& ctx, Layer& cpu, GpuLayer& gpu, const Shape& in, int n, bool train, bool need_dx,
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
std::unique_ptr<GpuContext> bf16_context(int mask = 7) {
    auto c = std::make_unique<GpuContext>(0, false, Precision::Bf16);
    c->set_conv_bf16_mask(mask);
    return c;
}

struct Test {
    std::string name;
    bool needs_gpu;
    std::function<void(GpuContext*)> run;
};

void conv_case(GpuContext& c, int cin, int cout, int k, int s, int pad, bool bias, Shape in, int n, bool need_dx) {
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
void check_layer_bf16_vs_fp32(Layer& cpu, GpuLayer& gpu, const Shape& in, int n, uint64_t seed) {
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
void model_steps(GpuContext& ctx, const std::string& name, int n, int steps, const Shape& in = Shape{1, 28, 28},
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
void model_eval(GpuContext& ctx, const std::string& name, int n, const Shape& in, int classes, Tol tol) {
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
// model, weights, examples and optimizer; losses and final weights after `steps` steps.
void trainer_steps(GpuContext& ctx, const std::string& name, OptimKind kind, int steps,
                   const std::vector<std::string>& allreduce = {}) {
    const SyntheticSpec spec = parse_synthetic("synthetic:1x28x28:10");
    const Dataset d = make_synthetic(spec, 64, 5);
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
        for (int i = 0; i < n; ++i) idx[i] = (step * n + 3 * i) % d.count;
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

std::vector<Test> tests() {
    std::vector<Test> t;
    t.push_back({"comparator_selftest", false, [](GpuContext*) {
                     // the checker must reject a value outside the tolerance and accept one inside
                     const float ref = 1.0f, near = 1.0f + 1e-4f, far = 1.01f;
                     expect_close("near", &near, &ref, 1, 1e-5, 1e-3);
                     bool caught = false;
                     try {
                         expect_close("far", &far, &ref, 1, 1e-5, 1e-3);
                     } catch (const Failure&) {
                         caught = true;
                     }
                     const float nan = std::nanf("");
                     bool caught_nan = false;
                     try {
                         expect_close("nan", &nan, &ref, 1, 1e-5, 1e-3);
                     } catch (const Failure&) {
                         caught_nan = true;
                     }
                     if (!caught || !caught_nan) throw Failure("expect_close accepted a value outside the tolerance");
                 }});
    t.push_back({"error_macros", false, [](GpuContext*) {
                     // each macro throws with the prefix, this file, the call and the library's
                     // own error string (no device needed: the strings are tables in the libraries)
                     auto expect_msg = [](const std::function<void()>& f, const std::string& lib_string) {
                         try {
                             f();
                         } catch (const std::runtime_error& e) {
                             const std::string m = e.what();
                             if (m.rfind("tula-train: ", 0) != 0 || m.find("test_gpu_layers.cpp:") == std::string::npos ||
                                 m.find(lib_string) == std::string::npos)
                                 throw Failure("unexpected message: " + m);
                             return;
                         }
                         throw Failure("no exception for a failing status (" + lib_string + ")");
                     };
                     expect_msg([] { CUDA_CHECK(cudaErrorInvalidValue); }, cudaGetErrorString(cudaErrorInvalidValue));
                     expect_msg([] { CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); }, cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM));
                     expect_msg([] { CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); },
                                cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE));
                     CUDA_CHECK(cudaSuccess);  // success passes silently
                     CUDNN_CHECK(CUDNN_STATUS_SUCCESS);
                     CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS);
                 }});
    t.push_back({"conv3x3_pad1_bias", true,
                 [](GpuContext* c) { conv_case(*c, 3, 8, 3, 1, 1, true, Shape{3, 12, 12}, 4, true); }});
    t.push_back({"conv5x5_stride2_nobias", true,
                 [](GpuContext* c) { conv_case(*c, 4, 6, 5, 2, 2, false, Shape{4, 11, 9}, 3, true); }});
    t.push_back({"conv_first_layer_no_dx", true,
                 [](GpuContext* c) { conv_case(*c, 1, 6, 5, 1, 2, true, Shape{1, 28, 28}, 5, false); }});
    t.push_back({"batchnorm_train", true, [](GpuContext* c) {
                     auto cpu = make_batchnorm2d(5);
                     auto gpu = make_gpu_batchnorm2d(*c, 5);
                     check_layer(*c, *cpu, *gpu, Shape{5, 6, 7}, 4, true, true, kLayerTol, 21);
                 }});
    t.push_back({"batchnorm_eval", true, [](GpuContext* c) {
                     auto cpu = make_batchnorm2d(5);
                     auto gpu = make_gpu_batchnorm2d(*c, 5);
                     check_layer(*c, *cpu, *gpu, Shape{5, 6, 7}, 4, false, true, kLayerTol, 22);
                 }});
    t.push_back({"relu", true, [](GpuContext* c) {
                     auto cpu = make_relu();
                     auto gpu = make_gpu_relu(*c);
                     check_layer(*c, *cpu, *gpu, Shape{3, 5, 7}, 4, true, true, kLayerTol, 31);
                 }});
    t.push_back({"maxpool2", true, [](GpuContext* c) {
                     auto cpu = make_maxpool2d(2);
                     auto gpu = make_gpu_maxpool2d(*c, 2);
                     check_layer(*c, *cpu, *gpu, Shape{3, 9, 8}, 4, true, true, kLayerTol, 41);
                 }});
    t.push_back({"maxpool3", true, [](GpuContext* c) {
                     auto cpu = make_maxpool2d(3);
                     auto gpu = make_gpu_maxpool2d(*c, 3);
                     check_layer(*c, *cpu, *gpu, Shape{2, 9, 10}, 3, true, true, kLayerTol, 42);
                 }});
    t.push_back({"linear", true, [](GpuContext* c) {
                     auto cpu = make_linear(60, 13);
                     auto gpu = make_gpu_linear(*c, 60, 13);
                     check_layer(*c, *cpu, *gpu, Shape{3, 4, 5}, 7, true, true, kLayerTol, 51);
                 }});
    t.push_back({"softmax_cross_entropy", true, [](GpuContext* c) {
                     Rng rng(61);
                     const int n = 37, k = 10;
                     const Tensor z = random_tensor(rng, n, Shape{k, 1, 1});
                     std::vector<int> labels(n);
                     for (int& l : labels) l = static_cast<int>(rng.below(k));
                     SoftmaxCrossEntropy cpu;
                     GpuSoftmaxCrossEntropy gpu(*c);
                     DevTensor dz;
                     dz.upload(z);
                     int64_t hits = 0, ghits = 0;
                     const float l = static_cast<float>(cpu.forward(z, labels.data(), n, &hits));
                     const float gl = static_cast<float>(gpu.forward(dz, labels.data(), n, &ghits));
                     expect_close("loss", &gl, &l, 1, 1e-6, 1e-5);
                     if (hits != ghits)
                         throw Failure("correct count: gpu " + std::to_string(ghits) + " vs cpu " + std::to_string(hits));
                     Tensor g;
                     gpu.backward().download(g);
                     expect_close("dz", g, cpu.backward(), 1e-7, 1e-5);
                     bool caught = false;
                     labels[3] = k;
                     try {
                         gpu.forward(dz, labels.data(), n, nullptr);
                     } catch (const std::invalid_argument&) {
                         caught = true;
                     }
                     if (!caught) throw Failure("a label out of range was accepted");
                 }});
    t.push_back({"squared_norms", true, [](GpuContext* c) {
                     auto model = build_model("lenet5");
                     model->init(5);
                     DevMem d;
                     float* p = static_cast<float*>(d.reserve(sizeof(float) * model->num_params()));
                     to_device(p, model->params(), model->num_params());
                     const std::vector<double> got = sq_norms(*c, p, model->segments());
                     for (size_t j = 0; j < got.size(); ++j) {
                         const ParamSegment& s = model->segments()[j];
                         double ref = 0;  // naive host sum
                         for (size_t i = 0; i < s.size; ++i) ref += static_cast<double>(model->params()[s.offset + i]) *
                                                                    model->params()[s.offset + i];
                         if (!(std::fabs(got[j] - ref) <= 1e-9 + 1e-9 * ref))
                             throw Failure(s.name + ": gpu " + std::to_string(got[j]) + " vs cpu " + std::to_string(ref));
                     }
                 }});
    t.push_back({"conv_grouped", true, [](GpuContext* c) {
                     auto cpu = make_conv2d(4, 6, 3, 1, 1, true, 2);
                     auto gpu = make_gpu_conv2d(*c, 4, 6, 3, 1, 1, true, 2);
                     check_layer(*c, *cpu, *gpu, Shape{4, 9, 8}, 3, true, true, kLayerTol, 12);
                 }});
    t.push_back({"conv_depthwise_stride2", true, [](GpuContext* c) {
                     auto cpu = make_conv2d(8, 8, 5, 2, 2, false, 8);
                     auto gpu = make_gpu_conv2d(*c, 8, 8, 5, 2, 2, false, 8);
                     check_layer(*c, *cpu, *gpu, Shape{8, 11, 10}, 3, true, true, kLayerTol, 13);
                 }});
    t.push_back({"maxpool3_stride2", true, [](GpuContext* c) {
                     auto cpu = make_maxpool2d(3, 2);
                     auto gpu = make_gpu_maxpool2d(*c, 3, 2);
                     check_layer(*c, *cpu, *gpu, Shape{3, 9, 8}, 3, true, true, kLayerTol, 43);
                 }});
    t.push_back({"hardswish", true, [](GpuContext* c) {
                     auto cpu = make_hardswish();
                     auto gpu = make_gpu_hardswish(*c);
                     check_layer(*c, *cpu, *gpu, Shape{3, 5, 7}, 4, true, true, kLayerTol, 32);
                 }});
    t.push_back({"hardsigmoid", true, [](GpuContext* c) {
                     auto cpu = make_hardsigmoid();
                     auto gpu = make_gpu_hardsigmoid(*c);
                     check_layer(*c, *cpu, *gpu, Shape{3, 5, 7}, 4, true, true, kLayerTol, 33);
                 }});
    t.push_back({"adaptive_avgpool_7x7_from_3x5", true, [](GpuContext* c) {
                     auto cpu = make_adaptive_avgpool2d(7, 7);
                     auto gpu = make_gpu_adaptive_avgpool2d(*c, 7, 7);
                     check_layer(*c, *cpu, *gpu, Shape{4, 3, 5}, 3, true, true, kLayerTol, 44);
                 }});
    t.push_back({"adaptive_avgpool_2x3_from_7x9", true, [](GpuContext* c) {
                     auto cpu = make_adaptive_avgpool2d(2, 3);
                     auto gpu = make_gpu_adaptive_avgpool2d(*c, 2, 3);
                     check_layer(*c, *cpu, *gpu, Shape{4, 7, 9}, 3, true, true, kLayerTol, 45);
                 }});
    t.push_back({"global_avgpool", true, [](GpuContext* c) {
                     auto cpu = make_global_avgpool();
                     auto gpu = make_gpu_adaptive_avgpool2d(*c, 1, 1);
                     check_layer(*c, *cpu, *gpu, Shape{6, 4, 4}, 5, true, true, kLayerTol, 46);
                 }});
    t.push_back({"residual_projection", true, [](GpuContext* c) {
                     // ResNet's downsampling block: body conv-BN-ReLU-conv-BN, shortcut 1x1 conv-BN
                     std::vector<std::unique_ptr<Layer>> cb, cs;
                     cb.push_back(make_conv2d(4, 8, 3, 2, 1, false));
                     cb.push_back(make_batchnorm2d(8));
                     cb.push_back(make_relu());
                     cb.push_back(make_conv2d(8, 8, 3, 1, 1, false));
                     cs.push_back(make_conv2d(4, 8, 1, 2, 0, false));
                     cs.push_back(make_batchnorm2d(8));
                     auto cpu = make_residual(make_sequential(std::move(cb), "body"), make_sequential(std::move(cs), "sc"));
                     std::vector<std::unique_ptr<GpuLayer>> gb, gs;
                     gb.push_back(make_gpu_conv2d(*c, 4, 8, 3, 2, 1, false));
                     gb.push_back(make_gpu_batchnorm2d(*c, 8));
                     gb.push_back(make_gpu_relu(*c));
                     gb.push_back(make_gpu_conv2d(*c, 8, 8, 3, 1, 1, false));
                     gs.push_back(make_gpu_conv2d(*c, 4, 8, 1, 2, 0, false));
                     gs.push_back(make_gpu_batchnorm2d(*c, 8));
                     auto gpu = make_gpu_residual(*c, make_gpu_sequential(std::move(gb), "body"),
                                                  make_gpu_sequential(std::move(gs), "sc"));
                     check_layer(*c, *cpu, *gpu, Shape{4, 8, 7}, 3, true, true, kLayerTol, 71);
                 }});
    t.push_back({"residual_identity", true, [](GpuContext* c) {
                     std::vector<std::unique_ptr<Layer>> cb;
                     cb.push_back(make_conv2d(5, 5, 3, 1, 1, true));
                     cb.push_back(make_hardswish());
                     auto cpu = make_residual(make_sequential(std::move(cb), "body"), nullptr);
                     std::vector<std::unique_ptr<GpuLayer>> gb;
                     gb.push_back(make_gpu_conv2d(*c, 5, 5, 3, 1, 1, true));
                     gb.push_back(make_gpu_hardswish(*c));
                     auto gpu = make_gpu_residual(*c, make_gpu_sequential(std::move(gb), "body"), nullptr);
                     check_layer(*c, *cpu, *gpu, Shape{5, 6, 6}, 3, true, true, kLayerTol, 72);
                 }});
    t.push_back({"squeeze_excitation", true, [](GpuContext* c) {
                     auto cpu = make_squeeze_excitation(16, 8);
                     auto gpu = make_gpu_squeeze_excitation(*c, 16, 8);
                     check_layer(*c, *cpu, *gpu, Shape{16, 5, 4}, 3, true, true, kLayerTol, 73);
                 }});
    t.push_back({"dropout_statistics", true, [](GpuContext* c) {
                     // masks differ from the CPU layer's by design: check the law instead. Kept
                     // values are x/(1-p), the dropped fraction is p (4 sigma), backward applies
                     // the forward's mask, evaluation is the identity, and two calls differ.
                     const double p = 0.3;
                     const int n = 8;
                     const Shape in{16, 32, 32};
                     auto gpu = make_gpu_dropout(*c, p, 99);
                     gpu->configure(in);
                     Rng rng(74);
                     Tensor x = random_tensor(rng, n, in), y, y2, dx, ye;
                     for (size_t i = 0; i < x.size(); ++i) x.data[i] = 1.0f + std::fabs(x.data[i]);  // nonzero
                     DevTensor dxin, ddy;
                     dxin.upload(x);
                     gpu->forward(dxin, true).download(y);
                     ddy.upload(x);  // dy = x: then dx = y
                     gpu->backward(ddy).download(dx);
                     size_t dropped = 0;
                     for (size_t i = 0; i < y.size(); ++i) {
                         const float kept = static_cast<float>(x.data[i] / (1.0 - p));
                         if (y.data[i] == 0.0f) ++dropped;
                         else expect_close("kept value", &y.data[i], &kept, 1, 1e-6, 1e-6);
                         expect_close("dx", &dx.data[i], &y.data[i], 1, 0, 0);
                     }
                     const double total = static_cast<double>(y.size());
                     const double frac = dropped / total, sd = std::sqrt(p * (1 - p) / total);
                     if (std::fabs(frac - p) > 4 * sd)
                         throw Failure("dropped fraction " + std::to_string(frac) + " vs p " + std::to_string(p));
                     gpu->forward(dxin, true).download(y2);
                     size_t same = 0;
                     for (size_t i = 0; i < y.size(); ++i) same += (y.data[i] == 0.0f) == (y2.data[i] == 0.0f);
                     if (same == y.size()) throw Failure("two training calls drew the same mask");
                     gpu->forward(dxin, false).download(ye);
                     expect_close("eval identity", ye, x, 0, 0);
                 }});
    t.push_back({"lenet5_train_steps", true, [](GpuContext* c) { model_steps(*c, "lenet5", 16, 3); }});
    t.push_back({"fmnist_cnn_train_steps", true, [](GpuContext* c) { model_steps(*c, "fmnist-cnn", 8, 3); }});
    t.push_back({"resnet18_train_steps", true,
                 [](GpuContext* c) { model_steps(*c, "resnet18", 16, 3, Shape{3, 32, 32}, 10, Tol{2e-3, 2e-2}, true); }});
    t.push_back({"mobilenetv3_small_eval", true,
                 [](GpuContext* c) { model_eval(*c, "mobilenetv3-small", 3, Shape{3, 32, 32}, 10, Tol{1e-3, 1e-2}); }});
    t.push_back({"vgg11_eval", true,
                 [](GpuContext* c) { model_eval(*c, "vgg11", 2, Shape{3, 32, 32}, 10, Tol{1e-3, 1e-2}); }});
    t.push_back({"gpu_trainer_sgd_steps", true,
                 [](GpuContext* c) { trainer_steps(*c, "fmnist-cnn", OptimKind::Sgd, 3); }});
    t.push_back({"gpu_trainer_ags_steps", true,
                 [](GpuContext* c) { trainer_steps(*c, "lenet5", OptimKind::Ags, 3); }});
    t.push_back({"gpu_trainer_lars_steps", true,
                 [](GpuContext* c) { trainer_steps(*c, "fmnist-cnn", OptimKind::Lars, 3); }});
    t.push_back({"gpu_trainer_mpi_allreduce_steps", true,
                 [](GpuContext* c) { trainer_steps(*c, "lenet5", OptimKind::Sgd, 2, {"mpi"}); }});
#ifdef TULA_HAVE_NCCL
    t.push_back({"gpu_trainer_nccl_allreduce_steps", true,
                 [](GpuContext* c) { trainer_steps(*c, "lenet5", OptimKind::Sgd, 2, {"nccl", "mpi"}); }});
#endif
    t.push_back({"gpu_trainer_lamb_steps", true,
                 [](GpuContext* c) { trainer_steps(*c, "lenet5", OptimKind::Lamb, 3); }});
    // ---- bf16 (Precision::Bf16), each on its own context ----
    // On bf16-representable parameters, x and dy the GPU's own rounding of them is exact and
    // the products are exact in float32, so the only differences from the float32 CPU layer
    // are the rounding of y, dx and dW to bf16 (at most u |value|, u = 2^-8) and float32
    // summation order: tolerance u |cpu| + 2e-3 (the absolute part covers the starting
    // gradient g0 ~ 0.1 N(0,1), since dW is rounded before g0 is added, and the bias, added
    // in float32 after y is rounded). A wrong layout or descriptor, a stale weight copy or a
    // dW that overwrites instead of adding exceed it.
    t.push_back({"bf16_casts", true, [](GpuContext* c) {
                     // the cast kernels against the host's round-to-nearest-even, bit for bit:
                     // normal values over a wide exponent range, exact ties (odd and even), tiny
                     // and huge values, zeros and infinities
                     Rng rng(17);
                     std::vector<float> x;
                     for (int i = 0; i < 4000; ++i) {
                         const int e = static_cast<int>(rng.below(160)) - 80;
                         x.push_back(static_cast<float>(rng.normal() * std::ldexp(1.0, e)));
                     }
                     for (uint32_t m : {0x3F808000u, 0x3F818000u, 0xBF808000u, 0x3F80C000u, 0x00018000u, 0x7F7FFFFFu,
                                        0x00000001u, 0x80000000u, 0x7F800000u, 0xFF800000u}) {
                         float f;
                         std::memcpy(&f, &m, sizeof f);
                         x.push_back(f);
                     }
                     const size_t n = x.size();
                     DevMem dx, dh, dy;
                     float* px = static_cast<float*>(dx.reserve(sizeof(float) * n));
                     auto* ph = static_cast<__nv_bfloat16*>(dh.reserve(sizeof(__nv_bfloat16) * n));
                     float* py = static_cast<float*>(dy.reserve(sizeof(float) * n));
                     to_device(px, x.data(), n);
                     float_to_bf16(c->stream(), px, ph, n);
                     bf16_to_float(c->stream(), ph, py, n, false);
                     c->sync();
                     const std::vector<float> y = to_host(py, n);
                     for (size_t i = 0; i < n; ++i) {
                         const float want = round_bf16(x[i]);
                         if (std::memcmp(&y[i], &want, sizeof want) != 0) {
                             char m[160];
                             std::snprintf(m, sizeof m, "bf16(%a) = %a, round to nearest even gives %a", x[i], y[i],
                                           want);
                             throw Failure(m);
                         }
                     }
                     bf16_to_float(c->stream(), ph, py, n, true);  // y += widen(bf16(x)) = 2 bf16(x), exact
                     c->sync();
                     const std::vector<float> y2 = to_host(py, n);
                     for (size_t i = 0; i < n; ++i)
                         if (!(y2[i] == 2 * y[i]) && !(std::isinf(y[i]) && y2[i] == y[i]))
                             throw Failure("accumulating widen: " + std::to_string(y2[i]) + " != 2 * " +
                                           std::to_string(y[i]));
                 }});
    // Also with some directions in TF32 (exact on bf16-representable operands, whose 8
    // significand bits fit in TF32's 11): the mixed paths share the bf16 copies of x, W, dy.
    t.push_back({"conv_bf16_rounded_inputs", true, [](GpuContext*) {
                     for (int mask : {7, 5, 2}) {
                         auto b = bf16_context(mask);
                         auto cpu = make_conv2d(16, 24, 3, 1, 1, true);
                         auto gpu = make_gpu_conv2d(*b, 16, 24, 3, 1, 1, true);
                         check_layer(*b, *cpu, *gpu, Shape{16, 10, 10}, 4, true, true, Tol{2e-3, kBf16U}, 14, true);
                     }
                 }});
    t.push_back({"conv_bf16_stride2_depthwise_rounded_inputs", true, [](GpuContext*) {
                     auto b = bf16_context();
                     auto cpu = make_conv2d(8, 8, 5, 2, 2, false, 8);
                     auto gpu = make_gpu_conv2d(*b, 8, 8, 5, 2, 2, false, 8);
                     check_layer(*b, *cpu, *gpu, Shape{8, 11, 10}, 3, true, true, Tol{2e-3, kBf16U}, 15, true);
                 }});
    // the bf16 GEMM writes float32, so on bf16-representable operands it is as exact as SGEMM
    t.push_back({"linear_bf16_rounded_inputs", true, [](GpuContext*) {
                     auto b = bf16_context();
                     auto cpu = make_linear(60, 13);
                     auto gpu = make_gpu_linear(*b, 60, 13);
                     check_layer(*b, *cpu, *gpu, Shape{3, 4, 5}, 7, true, true, kLayerTol, 52, true);
                 }});
    t.push_back({"conv_bf16_vs_fp32", true, [](GpuContext*) {
                     auto b = bf16_context();
                     auto cpu = make_conv2d(32, 32, 3, 1, 1, false);
                     auto gpu = make_gpu_conv2d(*b, 32, 32, 3, 1, 1, false);
                     check_layer_bf16_vs_fp32(*cpu, *gpu, Shape{32, 8, 8}, 8, 16);
                 }});
    t.push_back({"linear_bf16_vs_fp32", true, [](GpuContext*) {
                     auto b = bf16_context();
                     auto cpu = make_linear(256, 64);
                     auto gpu = make_gpu_linear(*b, 256, 64);
                     check_layer_bf16_vs_fp32(*cpu, *gpu, Shape{256, 1, 1}, 16, 53);
                 }});
    // Whole bf16 training steps (batch 16, 3 steps, each from the CPU weights) against the
    // float32 CPU model, normwise.
    // Logits, loss, BN state and the updated weights as a whole: in forward each of the L
    // weighted layers rounds x, W and y to bf16, each adding at most about u normwise; batch
    // norm rescales every layer, so the errors add (in quadrature, being independent) rather
    // than compound: sqrt(3 L) u, doubled: fmnist-cnn (L = 6) 8.5u = 0.033, resnet18 (L = 21)
    // 15.9u = 0.062 (measured on the H100: at most 0.0079 and 0.0118; with operands cut to 4
    // significand bits fmnist-cnn's logits were off by 0.048).
    // Gradients: these bounds are empirical. Rounding dy to bf16 before dW = sum x dy breaks
    // the cancellation that makes the float32 sum small: for a convolution followed by batch
    // norm, dW is orthogonal to W and a BN beta gradient is a sum of dy over N*H*W values that
    // nearly cancel, so single tensors carry relative errors far above u (measured, bf16
    // only: whole gradient 0.066 fmnist-cnn and 0.27 resnet18, worst tensor 0.21 and 0.41,
    // a BN beta). Bounds about twice that: whole 0.15 and 0.5, per tensor 0.5 and 0.75; a zero
    // gradient has error 1, one of the wrong sign 2.
    t.push_back({"fmnist_cnn_bf16_train_steps", true, [](GpuContext*) {
                     auto b = bf16_context();
                     model_steps(*b, "fmnist-cnn", 16, 3, Shape{1, 28, 28}, 10,
                                 Tol{0, 8.5 * kBf16U, true, 0.5, 0.15}, true);
                 }});
    t.push_back({"resnet18_bf16_train_steps", true, [](GpuContext*) {
                     auto b = bf16_context();
                     model_steps(*b, "resnet18", 16, 3, Shape{3, 32, 32}, 10, Tol{0, 15.9 * kBf16U, true, 0.75, 0.5},
                                 true);
                 }});
    // what tula-train --precision bf16 runs: each convolution direction in bf16 or TF32, as
    // cuDNN times them; within the bf16-only bounds
    t.push_back({"fmnist_cnn_bf16_auto_train_steps", true, [](GpuContext*) {
                     auto b = bf16_context(-1);
                     model_steps(*b, "fmnist-cnn", 16, 3, Shape{1, 28, 28}, 10,
                                 Tol{0, 8.5 * kBf16U, true, 0.5, 0.15}, true);
                 }});
    t.push_back({"precision_names", false, [](GpuContext*) {
                     if (parse_precision("bf16") != Precision::Bf16 || parse_precision("fp32") != Precision::Fp32 ||
                         std::string(precision_name(Precision::Bf16)) != "bf16")
                         throw Failure("precision names do not round-trip");
                     try {
                         parse_precision("fp16");
                     } catch (const std::invalid_argument& e) {
                         if (std::string(e.what()).find("valid: fp32, bf16") == std::string::npos)
                             throw Failure(std::string("message does not list the valid precisions: ") + e.what());
                         return;
                     }
                     throw Failure("parse_precision accepted fp16");
                 }});
    return t;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> want(argv + 1, argv + argc);
    std::string why;
    const int devices = device_count(&why);
    std::unique_ptr<GpuContext> ctx;
    if (devices > 0) {
        try {
            ctx = std::make_unique<GpuContext>(0);
        } catch (const std::exception& e) {
            std::printf("FAIL gpu_context: %s\n", e.what());
            std::printf("gpu: 0 passed, 1 failed, 0 skipped\n");
            return 1;
        }
    }
    int pass = 0, fail = 0, skip = 0;
    for (const Test& t : tests()) {
        if (!want.empty()) {
            bool sel = false;
            for (const auto& w : want) sel = sel || w == t.name;
            if (!sel) continue;
        }
        if (t.needs_gpu && !ctx) {
            std::printf("SKIP %s: no CUDA device (%s)\n", t.name.c_str(), why.c_str());
            ++skip;
            continue;
        }
        g_max_err = 0;
        try {
            t.run(ctx.get());
            if (t.needs_gpu) std::printf("PASS %s (max |gpu - cpu| %.3g)\n", t.name.c_str(), g_max_err);
            else std::printf("PASS %s\n", t.name.c_str());
            ++pass;
        } catch (const std::exception& e) {
            std::printf("FAIL %s: %s\n", t.name.c_str(), e.what());
            ++fail;
        }
        std::fflush(stdout);
    }
    std::printf("gpu: %d passed, %d failed, %d skipped\n", pass, fail, skip);
    return fail > 0 ? 1 : 0;
}
