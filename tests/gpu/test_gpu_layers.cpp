// tula-gpu-tests: every GPU layer, the loss and the squared norms against the CPU layers on
// the same random inputs and weights (see main.cpp for the program).
#include "gpu_check.hpp"

using namespace tula::train;
using namespace tula::train::cuda;

namespace gpu_check {

std::vector<Test> layer_tests() {
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
    return t;
}

}  // namespace gpu_check
