// tula-gpu-tests: whole training steps of lenet5, fmnist-cnn and resnet18, evaluation-mode
// logits of mobilenetv3-small and vgg11, GpuTrainer against the CPU Trainer, and the bf16
// (mixed precision) layers and training steps, against the CPU path.
#include "gpu_check.hpp"

using namespace tula::train;
using namespace tula::train::cuda;

namespace gpu_check {

std::vector<Test> model_tests() {
    std::vector<Test> t;
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
    t.push_back({"gpu_trainer_fresh_data_steps", true, [](GpuContext* c) {
                     // the first step of a new trainer on a new data set, at the set's last images:
                     // it must read only the set just copied and values it wrote itself, never what
                     // a reused device buffer held before (each set has other images, 4096 x 28 x 28
                     // bytes, so stale images or stale bits, NaN included, change the loss or |g|^2)
                     for (uint64_t seed = 11; seed < 19; ++seed)
                         trainer_steps(*c, "lenet5", OptimKind::Sgd, 1, {}, 4096, seed);
                 }});
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

}  // namespace gpu_check
