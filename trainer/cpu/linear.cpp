// tula-train: CPU fully connected layer (GEMM). See core/layers.hpp for the maths and the shapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/gemm/gemm.hpp"
#include "core/layer_specs.hpp"
#include "cpu/common.hpp"

namespace tula {
namespace train {
namespace {

using namespace cpu;

// ---- fully connected -------------------------------------------------------------------

class LinearCpu final : public Layer {
public:
    LinearCpu(int in, int out) : in_f_(in), out_f_(out) {
        spec::check_linear(in, out);
        n_params_ = static_cast<size_t>(in) * out + out;
    }
    std::string describe() const override { return spec::linear_name(in_f_, out_f_); }
    Shape configure(const Shape& in) override {
        const Shape out = spec::linear_output(in_f_, out_f_, in);
        in_ = in;
        return out;
    }
    std::vector<ParamInfo> param_info() const override { return spec::linear_params(in_f_, out_f_); }
    void bind(float* params, float* grads, float*) override {
        params_ = params;
        grads_ = grads;
    }
    void init(Rng& rng) override {
        const double bound = 1.0 / std::sqrt(static_cast<double>(in_f_));
        for (size_t i = 0; i < n_params_; ++i) params_[i] = static_cast<float>(rng.uniform(-bound, bound));
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "linear");
        x_ = &x;
        y_.resize(x.n, out_f_, 1, 1);
        gemm(false, true, x.n, out_f_, in_f_, x.ptr(), params_, y_.ptr(), false);  // Y = X W^T
        MapRM Y(y_.ptr(), x.n, out_f_);
        Y.rowwise() += CMapVec(params_ + static_cast<size_t>(in_f_) * out_f_, out_f_).transpose();
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.sample_size() != static_cast<size_t>(out_f_))
            throw std::invalid_argument("linear backward: dy " + dy.str());
        CMapRM G(dy.ptr(), dy.n, out_f_);
        gemm(true, false, out_f_, in_f_, x.n, dy.ptr(), x.ptr(), grads_, true);  // dW += G^T X
        MapVec(grads_ + static_cast<size_t>(in_f_) * out_f_, out_f_) += G.colwise().sum().transpose();
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(x);
        gemm(false, false, x.n, in_f_, out_f_, dy.ptr(), params_, dx_.ptr(), false);  // dX = G W
        return dx_;
    }

private:
    int in_f_, out_f_;
    Shape in_;
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
};

}  // namespace

std::unique_ptr<Layer> make_linear(int in_features, int out_features) {
    return std::make_unique<LinearCpu>(in_features, out_features);
}

}  // namespace train
}  // namespace tula
