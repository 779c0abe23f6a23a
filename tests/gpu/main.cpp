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
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gpu_check.hpp"

using namespace tula::train::cuda;
using namespace gpu_check;

namespace {

std::vector<Test> tests() {
    std::vector<Test> t = layer_tests();
    for (auto& x : model_tests()) t.push_back(std::move(x));
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

