// tula-train CUDA backend: batch normalization (cuDNN).
// See gpu.hpp for the maths and the shapes.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"
#include "core/layer_specs.hpp"

namespace tula {
namespace train {
namespace cuda {
namespace {

class BatchNorm2dGpu final : public LeafLayer<GpuLayer, spec::BatchNorm> {
public:
    BatchNorm2dGpu(GpuContext& ctx, int c, float momentum, float eps)
        : LeafLayer(spec::BatchNorm(c)), ctx_(ctx), momentum_(momentum), eps_(eps) {
        if (eps < CUDNN_BN_MIN_EPSILON)
            throw std::invalid_argument("batchnorm2d: eps " + std::to_string(eps) + " is below cuDNN's minimum " +
                                        std::to_string(CUDNN_BN_MIN_EPSILON));
        pdesc_.set(1, c, 1, 1);
        saved_.reserve(2 * sizeof(float) * c);
    }
    const DevTensor& forward(const DevTensor& x, bool train) override {
        check_input(x, in_, "batchnorm2d");
        x_ = &x;
        train_ = train;
        if (x.n != n_) {
            xdesc_.set(x.n, in_.c, in_.h, in_.w);
            n_ = x.n;
        }
        y_.resize_like(x);
        float* mean = saved();
        float* inv_var = saved() + spec_.c;
        if (train)
            CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
                ctx_.dnn(), train_mode(), &kOne, &kZero, xdesc_.d, x.ptr(), xdesc_.d, y_.ptr(), pdesc_.d,
                params_, params_ + spec_.c, momentum_, state_, state_ + spec_.c, eps_, mean, inv_var));
        else
            CUDNN_CHECK(cudnnBatchNormalizationForwardInference(ctx_.dnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero,
                                                                xdesc_.d, x.ptr(), xdesc_.d, y_.ptr(), pdesc_.d,
                                                                params_, params_ + spec_.c, state_, state_ + spec_.c, eps_));
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.shape() != in_) throw std::invalid_argument("batchnorm2d backward: dy " + dy.str());
        if (!train_)
            throw std::logic_error("tula-train: batchnorm2d on the GPU: backward after an evaluation-mode forward is "
                                   "not supported (train with forward(x, true))");
        dx_.resize_like(dy);  // cuDNN always writes dx
        // dgamma, dbeta accumulate (beta_param = 1); dx overwritten (beta_data = 0).
        CUDNN_CHECK(cudnnBatchNormalizationBackward(ctx_.dnn(), train_mode(), &kOne, &kZero, &kOne, &kOne,
                                                    xdesc_.d, x.ptr(), xdesc_.d, dy.ptr(), xdesc_.d, dx_.ptr(),
                                                    pdesc_.d, params_, grads_, grads_ + spec_.c, eps_, saved(),
                                                    saved() + spec_.c));
        if (!need_input_grad_) empty_.resize(0, 0, 0, 0);
        return need_input_grad_ ? dx_ : empty_;
    }

private:
    float* saved() const { return static_cast<float*>(saved_.get()); }
    // Training uses cuDNN's persistent spatial kernels (CUDNN_BATCHNORM_SPATIAL_PERSISTENT):
    // on an H100, resnet18 at batch 256 took 13.0 ms per step with them and 15.1 ms with
    // CUDNN_BATCHNORM_SPATIAL (bench/bench-gpu). cuDNN warns that they may overflow on inputs
    // of a very large range; TULA_BN_PERSISTENT=0 in the environment selects the plain mode.
    static cudnnBatchNormMode_t train_mode() {
        static const bool p = [] {
            const char* e = std::getenv("TULA_BN_PERSISTENT");
            return !(e && *e == '0');
        }();
        return p ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT : CUDNN_BATCHNORM_SPATIAL;
    }

    GpuContext& ctx_;
    double momentum_, eps_;
    bool train_ = true;
    int n_ = -1;
    TensorDesc xdesc_, pdesc_;
    DevMem saved_;  // batch mean and inverse std of the last training forward, (2C,)
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_, empty_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_batchnorm2d(GpuContext& ctx, int channels, float momentum, float eps) {
    return std::make_unique<BatchNorm2dGpu>(ctx, channels, momentum, eps);
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
