// tula-train: CPU convolution (im2col + GEMM; grouped and depthwise by groups). See core/layers.hpp for the maths and the shapes.
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

// ---- convolution ---------------------------------------------------------------------

// col (K = C*k*k rows, P = Ho*Wo columns, row stride ld) <- patches of x (C, H, W).
void im2col(const float* x, int C, int H, int W, int k, int s, int p, int Ho, int Wo, float* col, size_t ld) {
    for (int c = 0; c < C; ++c)
        for (int ki = 0; ki < k; ++ki)
            for (int kj = 0; kj < k; ++kj) {
                float* row = col + static_cast<size_t>((c * k + ki) * k + kj) * ld;
                // valid output columns for stride 1: iw = ow - p + kj in [0, W)
                const int lo = std::min(Wo, std::max(0, p - kj));
                const int hi = std::max(lo, std::min(Wo, W + p - kj));
                for (int oh = 0; oh < Ho; ++oh) {
                    float* dst = row + static_cast<size_t>(oh) * Wo;
                    const int ih = oh * s - p + ki;
                    if (ih < 0 || ih >= H) {
                        zero_f(dst, Wo);
                        continue;
                    }
                    const float* src = x + (static_cast<size_t>(c) * H + ih) * W;
                    if (s == 1) {
                        for (int i = 0; i < lo; ++i) dst[i] = 0.0f;
                        copy_f(dst + lo, src + lo - p + kj, hi - lo);
                        for (int i = hi; i < Wo; ++i) dst[i] = 0.0f;
                    } else {
                        for (int ow = 0; ow < Wo; ++ow) {
                            const int iw = ow * s - p + kj;
                            dst[ow] = (iw >= 0 && iw < W) ? src[iw] : 0.0f;
                        }
                    }
                }
            }
}

// dx (C, H, W) += scatter of col (K, P, row stride ld); the adjoint of im2col.
void col2im_add(const float* col, int C, int H, int W, int k, int s, int p, int Ho, int Wo, size_t ld, float* dx) {
    for (int c = 0; c < C; ++c)
        for (int ki = 0; ki < k; ++ki)
            for (int kj = 0; kj < k; ++kj) {
                const float* row = col + static_cast<size_t>((c * k + ki) * k + kj) * ld;
                const int lo = std::min(Wo, std::max(0, p - kj));
                const int hi = std::max(lo, std::min(Wo, W + p - kj));
                for (int oh = 0; oh < Ho; ++oh) {
                    const int ih = oh * s - p + ki;
                    if (ih < 0 || ih >= H) continue;
                    const float* src = row + static_cast<size_t>(oh) * Wo;
                    float* dst = dx + (static_cast<size_t>(c) * H + ih) * W;
                    if (s == 1) {
                        add_f(dst - p + kj + lo, src + lo, hi - lo);
                    } else {
                        for (int ow = 0; ow < Wo; ++ow) {
                            const int iw = ow * s - p + kj;
                            if (iw >= 0 && iw < W) dst[iw] += src[ow];
                        }
                    }
                }
            }
}

class Conv2dCpu final : public LeafLayer<Layer, spec::Conv> {
public:
    Conv2dCpu(int cin, int cout, int k, int s, int p, bool bias)
        : LeafLayer(spec::Conv(cin, cout, k, s, p, 1, bias)), kdim_(spec_.fan_in()) {}
    void init(Rng& rng) override { spec_.init(params_, state_, rng); }
    // Images are processed in chunks of nb: the chunk's patches form one matrix
    // col (K, nb*P) (image j in columns [j*P, (j+1)*P)), so each GEMM is large enough to
    // run near Eigen's peak while col stays in the L2 cache (kColBudget floats).
    int chunk(int n) const {
        const size_t per = kdim_ * static_cast<size_t>(out_.h) * out_.w;
        return static_cast<int>(std::max<size_t>(1, std::min<size_t>(n, kColBudget / std::max<size_t>(1, per))));
    }
    // Fills the patches of images [n0, n0+nb) into col_ at `offset`.
    void fill_col(const Tensor& x, int n0, int nb, size_t offset) {
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        float* col = col_.data() + offset;
        for (int j = 0; j < nb; ++j)
            im2col(x.sample(n0 + j), in_.c, in_.h, in_.w, spec_.k, spec_.s, spec_.p, out_.h, out_.w, col + j * P, nb * P);
    }
    const Tensor& forward(const Tensor& x, bool train) override {
        check_input(x, in_, "conv2d");
        x_ = &x;
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        y_.resize(x.n, out_);
        const int nb_max = chunk(x.n);
        const size_t chunk_floats = kdim_ * P * nb_max;
        const size_t n_chunks = (x.n + nb_max - 1) / nb_max;
        // Keep every chunk's patches for backward when they fit the budget (saves the
        // second im2col); otherwise backward recomputes them.
        cached_ = train && chunk_floats * n_chunks <= kCacheBudget;
        col_.resize(cached_ ? chunk_floats * n_chunks : chunk_floats);
        if (nb_max > 1) ybuf_.resize(static_cast<size_t>(spec_.cout) * P * nb_max);
        const float* bias = spec_.bias ? params_ + kdim_ * spec_.cout : nullptr;
        for (int n0 = 0; n0 < x.n; n0 += nb_max) {
            const int nb = std::min(nb_max, x.n - n0);
            const size_t cols = P * nb;
            const size_t off = cached_ ? (n0 / nb_max) * chunk_floats : 0;
            fill_col(x, n0, nb, off);
            const float* col = col_.data() + off;
            if (nb == 1) {  // straight into y
                gemm(false, false, spec_.cout, P, kdim_, params_, col, y_.sample(n0), false);
                if (bias) MapRM(y_.sample(n0), spec_.cout, P).colwise() += CMapVec(bias, spec_.cout);
                continue;
            }
            gemm(false, false, spec_.cout, cols, kdim_, params_, col, ybuf_.data(), false);
            // scatter (Cout, nb*P) -> (nb, Cout, P), adding the bias
            for (int j = 0; j < nb; ++j)
                for (int c = 0; c < spec_.cout; ++c) {
                    const float* src = ybuf_.data() + c * cols + j * P;
                    float* dst = y_.sample(n0 + j) + c * P;
                    copy_add(dst, src, bias ? bias[c] : 0.0f, P);
                }
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.shape() != out_) throw std::invalid_argument("conv2d backward: dy " + dy.str());
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        const int nb_max = chunk(x.n);
        const size_t chunk_floats = kdim_ * P * nb_max;
        if (need_input_grad_) {
            zero_input_grad(dx_, x.n, in_);
            dcol_.resize(kdim_ * P * nb_max);
        } else {
            dx_.resize(0, 0, 0, 0);
        }
        if (nb_max > 1) ybuf_.resize(static_cast<size_t>(spec_.cout) * P * nb_max);
        for (int n0 = 0; n0 < x.n; n0 += nb_max) {
            const int nb = std::min(nb_max, x.n - n0);
            const size_t cols = P * nb;
            const float* gp = dy.sample(n0);
            if (nb > 1) {
                // gather (nb, Cout, P) -> (Cout, nb*P)
                for (int j = 0; j < nb; ++j)
                    for (int c = 0; c < spec_.cout; ++c)
                        copy_f(ybuf_.data() + c * cols + j * P, dy.sample(n0 + j) + c * P, P);
                gp = ybuf_.data();
            }
            size_t off = 0;
            if (cached_) off = (n0 / nb_max) * chunk_floats;
            else fill_col(x, n0, nb, 0);
            gemm(false, true, spec_.cout, kdim_, cols, gp, col_.data() + off, grads_, true);  // dW += G col^T
            if (spec_.bias) MapVec(grads_ + kdim_ * spec_.cout, spec_.cout) += CMapRM(gp, spec_.cout, cols).rowwise().sum();
            if (need_input_grad_) {
                gemm(true, false, kdim_, cols, spec_.cout, params_, gp, dcol_.data(), false);  // dcol = W^T G
                for (int j = 0; j < nb; ++j)
                    col2im_add(dcol_.data() + j * P, in_.c, in_.h, in_.w, spec_.k, spec_.s, spec_.p, out_.h, out_.w, cols,
                               dx_.sample(n0 + j));
            }
        }
        return dx_;
    }

    static constexpr size_t kColBudget = 256 * 1024;       // floats of col per chunk (1 MiB, ~L2)
    static constexpr size_t kCacheBudget = 16 * 1024 * 1024;  // floats of col kept for backward (64 MiB)

private:
    const size_t kdim_;  // Cin*k*k, the rows of the im2col matrix
    const Tensor* x_ = nullptr;
    bool cached_ = false;  // col_ holds the patches of every chunk of the last forward
    Tensor y_, dx_;
    std::vector<float> col_, dcol_, ybuf_;
};

// Grouped convolution (groups > 1, incl. depthwise: groups = Cin). Weight (Cout, Cin/g, k, k)
// as PyTorch's. Per image: col = im2col(x_n) (Cin*k*k, P); the rows of group g are the
// contiguous block [g*Kg, (g+1)*Kg), Kg = (Cin/g)*k*k, and
//   Y_g (Cout/g, P) = W_g (Cout/g, Kg) col_g,  dW_g += dY_g col_g^T,  dcol_g = W_g^T dY_g.
class GroupedConv2dCpu final : public LeafLayer<Layer, spec::Conv> {
public:
    GroupedConv2dCpu(int cin, int cout, int k, int s, int p, bool bias, int groups)
        : LeafLayer(spec::Conv(cin, cout, k, s, p, groups, bias)), kg_(spec_.fan_in()) {}
    // He normal with fan_in = (Cin/g)*k*k (PyTorch's fan_in for grouped weights).
    void init(Rng& rng) override { spec_.init(params_, state_, rng); }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "conv2d");
        x_ = &x;
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        const int cog = spec_.cout / spec_.groups;
        y_.resize(x.n, out_);
        col_.resize(kg_ * spec_.groups * P);
        const float* bias = spec_.bias ? params_ + kg_ * spec_.cout : nullptr;
        for (int n = 0; n < x.n; ++n) {
            im2col(x.sample(n), spec_.cin, in_.h, in_.w, spec_.k, spec_.s, spec_.p, out_.h, out_.w, col_.data(), P);
            float* y = y_.sample(n);
            for (int g = 0; g < spec_.groups; ++g)
                gemm(false, false, cog, P, kg_, params_ + g * cog * kg_, col_.data() + g * kg_ * P, y + g * cog * P,
                     false);
            if (bias) MapRM(y, spec_.cout, P).colwise() += CMapVec(bias, spec_.cout);
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.shape() != out_) throw std::invalid_argument("conv2d backward: dy " + dy.str());
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        const int cog = spec_.cout / spec_.groups;
        if (need_input_grad_) {
            zero_input_grad(dx_, x.n, in_);
            dcol_.resize(kg_ * spec_.groups * P);
        } else {
            dx_.resize(0, 0, 0, 0);
        }
        col_.resize(kg_ * spec_.groups * P);
        for (int n = 0; n < x.n; ++n) {
            im2col(x.sample(n), spec_.cin, in_.h, in_.w, spec_.k, spec_.s, spec_.p, out_.h, out_.w, col_.data(), P);
            const float* gp = dy.sample(n);
            for (int g = 0; g < spec_.groups; ++g) {
                gemm(false, true, cog, kg_, P, gp + g * cog * P, col_.data() + g * kg_ * P, grads_ + g * cog * kg_,
                     true);
                if (need_input_grad_)
                    gemm(true, false, kg_, P, cog, params_ + g * cog * kg_, gp + g * cog * P,
                         dcol_.data() + g * kg_ * P, false);
            }
            if (spec_.bias) MapVec(grads_ + kg_ * spec_.cout, spec_.cout) += CMapRM(gp, spec_.cout, P).rowwise().sum();
            if (need_input_grad_)
                col2im_add(dcol_.data(), spec_.cin, in_.h, in_.w, spec_.k, spec_.s, spec_.p, out_.h, out_.w, P, dx_.sample(n));
        }
        return dx_;
    }

private:
    const size_t kg_;  // (Cin/g)*k*k, one group's rows of the im2col matrix
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
    std::vector<float> col_, dcol_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(int cin, int cout, int k, int stride, int pad, bool bias, int groups) {
    if (groups != 1) return std::make_unique<GroupedConv2dCpu>(cin, cout, k, stride, pad, bias, groups);
    return std::make_unique<Conv2dCpu>(cin, cout, k, stride, pad, bias);
}

}  // namespace train
}  // namespace tula
