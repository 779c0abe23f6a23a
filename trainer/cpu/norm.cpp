// tula-train: CPU batch normalization (Ioffe & Szegedy 2015). See core/layers.hpp for the maths and the shapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/layer_specs.hpp"
#include "cpu/common.hpp"

namespace tula {
namespace train {
namespace {

using namespace cpu;

// ---- batch normalization ---------------------------------------------------------------

class BatchNorm2dCpu final : public LeafLayer<Layer, spec::BatchNorm> {
public:
    BatchNorm2dCpu(int c, float momentum, float eps) : LeafLayer(spec::BatchNorm(c)), momentum_(momentum), eps_(eps) {
        mean_.resize(c);
        inv_std_.resize(c);
    }
    void init(Rng& rng) override { spec_.init(params_, state_, rng); }
    // The per-plane loops use Eigen arrays (vectorized at -O2); sums over planes are
    // accumulated in double.
    const Tensor& forward(const Tensor& x, bool train) override {
        check_input(x, in_, "batchnorm2d");
        x_ = &x;
        const size_t hw = static_cast<size_t>(in_.h) * in_.w;
        const double m = static_cast<double>(hw) * x.n;
        y_.resize_like(x);
        train_ = train;
        const float* gamma = params_;
        const float* beta = params_ + spec_.c;
        for (int c = 0; c < spec_.c; ++c) {
            float mean, inv_std;
            if (train) {
                double s = 0;
                for (int n = 0; n < x.n; ++n) s += CMapArr(x.sample(n) + c * hw, hw).sum();
                mean = static_cast<float>(s / m);
                double v = 0;
                for (int n = 0; n < x.n; ++n) v += (CMapArr(x.sample(n) + c * hw, hw) - mean).square().sum();
                const double var = v / m;  // biased, for normalizing
                inv_std = static_cast<float>(1.0 / std::sqrt(var + eps_));
                const double unbiased = m > 1 ? v / (m - 1) : var;  // for the running estimate
                state_[c] = static_cast<float>((1 - momentum_) * state_[c] + momentum_ * mean);
                state_[spec_.c + c] = static_cast<float>((1 - momentum_) * state_[spec_.c + c] + momentum_ * unbiased);
            } else {
                mean = state_[c];
                inv_std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(state_[spec_.c + c]) + eps_));
            }
            mean_[c] = mean;
            inv_std_[c] = inv_std;
            // y = gamma * (x - mean) * inv_std + beta = x * scale + shift
            const float scale = gamma[c] * inv_std, shift = beta[c] - mean * scale;
            for (int n = 0; n < x.n; ++n)
                MapArr(y_.sample(n) + c * hw, hw) = CMapArr(x.sample(n) + c * hw, hw) * scale + shift;
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.shape() != in_) throw std::invalid_argument("batchnorm2d backward: dy " + dy.str());
        const size_t hw = static_cast<size_t>(in_.h) * in_.w;
        const double m = static_cast<double>(hw) * dy.n;
        if (need_input_grad_) dx_.resize_like(dy);
        else dx_.resize(0, 0, 0, 0);
        for (int c = 0; c < spec_.c; ++c) {
            const float mean = mean_[c], inv_std = inv_std_[c];
            // sums of dy and of dy * xhat, xhat = (x - mean) * inv_std
            double sdy = 0, sdyxc = 0;
            for (int n = 0; n < dy.n; ++n) {
                const auto g = CMapArr(dy.sample(n) + c * hw, hw);
                sdy += g.sum();
                sdyxc += (g * (CMapArr(x.sample(n) + c * hw, hw) - mean)).sum();
            }
            const double sdyx = sdyxc * inv_std;
            grads_[c] += static_cast<float>(sdyx);      // dgamma
            grads_[spec_.c + c] += static_cast<float>(sdy);  // dbeta
            if (!need_input_grad_) continue;
            // training: dx = gamma*inv_std * (dy - mean(dy) - xhat * mean(dy*xhat))
            // (Ioffe & Szegedy 2015, backward of Algorithm 1); evaluation: dx = gamma*inv_std*dy.
            // Written as dx = k*dy + b*x + d for one vectorized pass.
            const double k = static_cast<double>(params_[c]) * inv_std;
            const double mdy = train_ ? sdy / m : 0.0, mdyx = train_ ? sdyx / m : 0.0;
            const float kf = static_cast<float>(k);
            const float bf = static_cast<float>(-k * mdyx * inv_std);
            const float df = static_cast<float>(-k * mdy + k * mdyx * inv_std * mean);
            for (int n = 0; n < dy.n; ++n)
                MapArr(dx_.sample(n) + c * hw, hw) =
                    CMapArr(dy.sample(n) + c * hw, hw) * kf + CMapArr(x.sample(n) + c * hw, hw) * bf + df;
        }
        return dx_;
    }

private:
    float momentum_, eps_;
    bool train_ = true;
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
    std::vector<float> mean_, inv_std_;  // (C,) of the last forward
};

}  // namespace

std::unique_ptr<Layer> make_batchnorm2d(int channels, float momentum, float eps) {
    return std::make_unique<BatchNorm2dCpu>(channels, momentum, eps);
}

}  // namespace train
}  // namespace tula
