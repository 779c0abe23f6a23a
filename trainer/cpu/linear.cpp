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

class LinearCpu final : public LeafLayer<Layer, spec::Linear> {
public:
    LinearCpu(int in, int out) : LeafLayer(spec::Linear(in, out)) {}
    void init(Rng& rng) override { spec_.init(params_, state_, rng); }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "linear");
        x_ = &x;
        y_.resize(x.n, spec_.out_f, 1, 1);
        gemm(false, true, x.n, spec_.out_f, spec_.in_f, x.ptr(), params_, y_.ptr(), false);  // Y = X W^T
        MapRM Y(y_.ptr(), x.n, spec_.out_f);
        Y.rowwise() += CMapVec(params_ + static_cast<size_t>(spec_.in_f) * spec_.out_f, spec_.out_f).transpose();
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.sample_size() != static_cast<size_t>(spec_.out_f))
            throw std::invalid_argument("linear backward: dy " + dy.str());
        CMapRM G(dy.ptr(), dy.n, spec_.out_f);
        gemm(true, false, spec_.out_f, spec_.in_f, x.n, dy.ptr(), x.ptr(), grads_, true);  // dW += G^T X
        MapVec(grads_ + static_cast<size_t>(spec_.in_f) * spec_.out_f, spec_.out_f) += G.colwise().sum().transpose();
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(x);
        gemm(false, false, x.n, spec_.in_f, spec_.out_f, dy.ptr(), params_, dx_.ptr(), false);  // dX = G W
        return dx_;
    }

private:
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
};

}  // namespace

std::unique_ptr<Layer> make_linear(int in_features, int out_features) {
    return std::make_unique<LinearCpu>(in_features, out_features);
}

}  // namespace train
}  // namespace tula
