// tula-train: CPU implementations of the layers (Eigen GEMM, plain loops elsewhere).
// See layers.hpp for the maths and the shapes.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "gemm.hpp"
#include "layers.hpp"

namespace tula {
namespace train {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<RowMat>;
using CMapRM = Eigen::Map<const RowMat>;
using MapVec = Eigen::Map<Eigen::VectorXf>;
using CMapVec = Eigen::Map<const Eigen::VectorXf>;
using MapArr = Eigen::Map<Eigen::ArrayXf>;
using CMapArr = Eigen::Map<const Eigen::ArrayXf>;

void check_input(const Tensor& x, const Shape& in, const char* who) {
    if (x.shape() != in)
        throw std::invalid_argument(std::string(who) + ": input " + x.str() + " does not match the configured " +
                                    "example shape " + in.str());
}

// ---- short vector loops -----------------------------------------------------------------
// At -O2 GCC vectorizes only loops whose trip count is a known multiple of the vector width,
// so the short row loops of im2col / col2im are written 4 lanes at a time with GCC's generic
// vector extension (lowered for every target; unaligned access through memcpy).
typedef float V4f __attribute__((vector_size(16)));
typedef int32_t V4i __attribute__((vector_size(16)));

inline V4f load4(const float* p) {
    V4f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
inline void store4(float* p, V4f v) { std::memcpy(p, &v, sizeof v); }

// d[0..n) = s[0..n) + b
inline void copy_add(float* d, const float* s, float b, size_t n) {
    const V4f bv = {b, b, b, b};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, load4(s + i) + bv);
    for (; i < n; ++i) d[i] = s[i] + b;
}
// d[0..n) = s[0..n)
inline void copy_f(float* d, const float* s, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, load4(s + i));
    for (; i < n; ++i) d[i] = s[i];
}
// d[0..n) += s[0..n)
inline void add_f(float* d, const float* s, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, load4(d + i) + load4(s + i));
    for (; i < n; ++i) d[i] += s[i];
}
inline void zero_f(float* d, size_t n) {
    const V4f z = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) store4(d + i, z);
    for (; i < n; ++i) d[i] = 0.0f;
}

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

class Conv2dCpu final : public Layer {
public:
    Conv2dCpu(int cin, int cout, int k, int s, int p, bool bias)
        : cin_(cin), cout_(cout), k_(k), s_(s), p_(p), bias_(bias) {
        if (cin <= 0 || cout <= 0 || k <= 0 || s <= 0 || p < 0)
            throw std::invalid_argument("conv2d: channels, kernel and stride must be positive, padding >= 0");
        kdim_ = static_cast<size_t>(cin) * k * k;
        n_params_ = kdim_ * cout + (bias ? cout : 0);
    }
    std::string describe() const override {
        std::string d = "conv" + std::to_string(k_) + "x" + std::to_string(k_) + "(" + std::to_string(cin_) + "->" +
                        std::to_string(cout_);
        if (s_ != 1) d += ", stride " + std::to_string(s_);
        if (p_ != 0) d += ", pad " + std::to_string(p_);
        if (!bias_) d += ", no bias";
        return d + ")";
    }
    Shape configure(const Shape& in) override {
        if (in.c != cin_) throw std::invalid_argument(describe() + ": input has " + std::to_string(in.c) + " channels");
        const int ho = (in.h + 2 * p_ - k_) / s_ + 1, wo = (in.w + 2 * p_ - k_) / s_ + 1;
        if (in.h + 2 * p_ < k_ || in.w + 2 * p_ < k_ || ho <= 0 || wo <= 0)
            throw std::invalid_argument(describe() + ": input " + in.str() + " is smaller than the kernel");
        in_ = in;
        out_ = Shape{cout_, ho, wo};
        return out_;
    }
    std::vector<ParamInfo> param_info() const override {
        std::vector<ParamInfo> v{{"weight", kdim_ * cout_, true}};
        if (bias_) v.push_back({"bias", static_cast<size_t>(cout_), false});
        return v;
    }
    void bind(float* params, float* grads, float*) override {
        params_ = params;
        grads_ = grads;
    }
    void init(Rng& rng) override {
        const double std_ = std::sqrt(2.0 / static_cast<double>(kdim_));
        for (size_t i = 0; i < kdim_ * cout_; ++i) params_[i] = static_cast<float>(std_ * rng.normal());
        if (bias_) {
            const double bound = 1.0 / std::sqrt(static_cast<double>(kdim_));
            for (int i = 0; i < cout_; ++i) params_[kdim_ * cout_ + i] = static_cast<float>(rng.uniform(-bound, bound));
        }
    }
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
            im2col(x.sample(n0 + j), in_.c, in_.h, in_.w, k_, s_, p_, out_.h, out_.w, col + j * P, nb * P);
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
        if (nb_max > 1) ybuf_.resize(static_cast<size_t>(cout_) * P * nb_max);
        const float* bias = bias_ ? params_ + kdim_ * cout_ : nullptr;
        for (int n0 = 0; n0 < x.n; n0 += nb_max) {
            const int nb = std::min(nb_max, x.n - n0);
            const size_t cols = P * nb;
            const size_t off = cached_ ? (n0 / nb_max) * chunk_floats : 0;
            fill_col(x, n0, nb, off);
            const float* col = col_.data() + off;
            if (nb == 1) {  // straight into y
                gemm(false, false, cout_, P, kdim_, params_, col, y_.sample(n0), false);
                if (bias) MapRM(y_.sample(n0), cout_, P).colwise() += CMapVec(bias, cout_);
                continue;
            }
            gemm(false, false, cout_, cols, kdim_, params_, col, ybuf_.data(), false);
            // scatter (Cout, nb*P) -> (nb, Cout, P), adding the bias
            for (int j = 0; j < nb; ++j)
                for (int c = 0; c < cout_; ++c) {
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
            dx_.resize_like(x);
            std::fill(dx_.data.begin(), dx_.data.end(), 0.0f);
            dcol_.resize(kdim_ * P * nb_max);
        } else {
            dx_.resize(0, 0, 0, 0);
        }
        if (nb_max > 1) ybuf_.resize(static_cast<size_t>(cout_) * P * nb_max);
        for (int n0 = 0; n0 < x.n; n0 += nb_max) {
            const int nb = std::min(nb_max, x.n - n0);
            const size_t cols = P * nb;
            const float* gp = dy.sample(n0);
            if (nb > 1) {
                // gather (nb, Cout, P) -> (Cout, nb*P)
                for (int j = 0; j < nb; ++j)
                    for (int c = 0; c < cout_; ++c)
                        copy_f(ybuf_.data() + c * cols + j * P, dy.sample(n0 + j) + c * P, P);
                gp = ybuf_.data();
            }
            size_t off = 0;
            if (cached_) off = (n0 / nb_max) * chunk_floats;
            else fill_col(x, n0, nb, 0);
            gemm(false, true, cout_, kdim_, cols, gp, col_.data() + off, grads_, true);  // dW += G col^T
            if (bias_) MapVec(grads_ + kdim_ * cout_, cout_) += CMapRM(gp, cout_, cols).rowwise().sum();
            if (need_input_grad_) {
                gemm(true, false, kdim_, cols, cout_, params_, gp, dcol_.data(), false);  // dcol = W^T G
                for (int j = 0; j < nb; ++j)
                    col2im_add(dcol_.data() + j * P, in_.c, in_.h, in_.w, k_, s_, p_, out_.h, out_.w, cols,
                               dx_.sample(n0 + j));
            }
        }
        return dx_;
    }

    static constexpr size_t kColBudget = 256 * 1024;       // floats of col per chunk (1 MiB, ~L2)
    static constexpr size_t kCacheBudget = 16 * 1024 * 1024;  // floats of col kept for backward (64 MiB)

private:
    int cin_, cout_, k_, s_, p_;
    bool bias_;
    size_t kdim_;
    Shape in_, out_;
    const Tensor* x_ = nullptr;
    bool cached_ = false;  // col_ holds the patches of every chunk of the last forward
    Tensor y_, dx_;
    std::vector<float> col_, dcol_, ybuf_;
};

// Grouped convolution (groups > 1, incl. depthwise: groups = Cin). Weight (Cout, Cin/g, k, k)
// as PyTorch's. Per image: col = im2col(x_n) (Cin*k*k, P); the rows of group g are the
// contiguous block [g*Kg, (g+1)*Kg), Kg = (Cin/g)*k*k, and
//   Y_g (Cout/g, P) = W_g (Cout/g, Kg) col_g,  dW_g += dY_g col_g^T,  dcol_g = W_g^T dY_g.
class GroupedConv2dCpu final : public Layer {
public:
    GroupedConv2dCpu(int cin, int cout, int k, int s, int p, bool bias, int groups)
        : cin_(cin), cout_(cout), k_(k), s_(s), p_(p), g_(groups), bias_(bias) {
        if (cin <= 0 || cout <= 0 || k <= 0 || s <= 0 || p < 0 || groups <= 0)
            throw std::invalid_argument("conv2d: channels, kernel, stride and groups must be positive, padding >= 0");
        if (cin % groups != 0 || cout % groups != 0)
            throw std::invalid_argument("conv2d: groups (" + std::to_string(groups) + ") must divide the input (" +
                                        std::to_string(cin) + ") and output (" + std::to_string(cout) + ") channels");
        kg_ = static_cast<size_t>(cin / groups) * k * k;
        n_params_ = kg_ * cout + (bias ? cout : 0);
    }
    std::string describe() const override {
        std::string d = "conv" + std::to_string(k_) + "x" + std::to_string(k_) + "(" + std::to_string(cin_) + "->" +
                        std::to_string(cout_);
        if (s_ != 1) d += ", stride " + std::to_string(s_);
        if (p_ != 0) d += ", pad " + std::to_string(p_);
        d += (g_ == cin_ ? ", depthwise" : ", groups " + std::to_string(g_));
        if (!bias_) d += ", no bias";
        return d + ")";
    }
    Shape configure(const Shape& in) override {
        if (in.c != cin_) throw std::invalid_argument(describe() + ": input has " + std::to_string(in.c) + " channels");
        if (in.h + 2 * p_ < k_ || in.w + 2 * p_ < k_)
            throw std::invalid_argument(describe() + ": input " + in.str() + " is smaller than the kernel");
        in_ = in;
        out_ = Shape{cout_, (in.h + 2 * p_ - k_) / s_ + 1, (in.w + 2 * p_ - k_) / s_ + 1};
        return out_;
    }
    std::vector<ParamInfo> param_info() const override {
        std::vector<ParamInfo> v{{"weight", kg_ * cout_, true}};
        if (bias_) v.push_back({"bias", static_cast<size_t>(cout_), false});
        return v;
    }
    void bind(float* params, float* grads, float*) override {
        params_ = params;
        grads_ = grads;
    }
    // He normal with fan_in = (Cin/g)*k*k (PyTorch's fan_in for grouped weights).
    void init(Rng& rng) override {
        const double std_ = std::sqrt(2.0 / static_cast<double>(kg_));
        for (size_t i = 0; i < kg_ * cout_; ++i) params_[i] = static_cast<float>(std_ * rng.normal());
        if (bias_) {
            const double bound = 1.0 / std::sqrt(static_cast<double>(kg_));
            for (int i = 0; i < cout_; ++i) params_[kg_ * cout_ + i] = static_cast<float>(rng.uniform(-bound, bound));
        }
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "conv2d");
        x_ = &x;
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        const int cog = cout_ / g_;
        y_.resize(x.n, out_);
        col_.resize(kg_ * g_ * P);
        const float* bias = bias_ ? params_ + kg_ * cout_ : nullptr;
        for (int n = 0; n < x.n; ++n) {
            im2col(x.sample(n), cin_, in_.h, in_.w, k_, s_, p_, out_.h, out_.w, col_.data(), P);
            float* y = y_.sample(n);
            for (int g = 0; g < g_; ++g)
                gemm(false, false, cog, P, kg_, params_ + g * cog * kg_, col_.data() + g * kg_ * P, y + g * cog * P,
                     false);
            if (bias) MapRM(y, cout_, P).colwise() += CMapVec(bias, cout_);
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        const Tensor& x = *x_;
        if (dy.n != x.n || dy.shape() != out_) throw std::invalid_argument("conv2d backward: dy " + dy.str());
        const size_t P = static_cast<size_t>(out_.h) * out_.w;
        const int cog = cout_ / g_;
        if (need_input_grad_) {
            dx_.resize_like(x);
            std::fill(dx_.data.begin(), dx_.data.end(), 0.0f);
            dcol_.resize(kg_ * g_ * P);
        } else {
            dx_.resize(0, 0, 0, 0);
        }
        col_.resize(kg_ * g_ * P);
        for (int n = 0; n < x.n; ++n) {
            im2col(x.sample(n), cin_, in_.h, in_.w, k_, s_, p_, out_.h, out_.w, col_.data(), P);
            const float* gp = dy.sample(n);
            for (int g = 0; g < g_; ++g) {
                gemm(false, true, cog, kg_, P, gp + g * cog * P, col_.data() + g * kg_ * P, grads_ + g * cog * kg_,
                     true);
                if (need_input_grad_)
                    gemm(true, false, kg_, P, cog, params_ + g * cog * kg_, gp + g * cog * P,
                         dcol_.data() + g * kg_ * P, false);
            }
            if (bias_) MapVec(grads_ + kg_ * cout_, cout_) += CMapRM(gp, cout_, P).rowwise().sum();
            if (need_input_grad_)
                col2im_add(dcol_.data(), cin_, in_.h, in_.w, k_, s_, p_, out_.h, out_.w, P, dx_.sample(n));
        }
        return dx_;
    }

private:
    int cin_, cout_, k_, s_, p_, g_;
    bool bias_;
    size_t kg_;
    Shape in_, out_;
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
    std::vector<float> col_, dcol_;
};

// ---- batch normalization ---------------------------------------------------------------

class BatchNorm2dCpu final : public Layer {
public:
    BatchNorm2dCpu(int c, float momentum, float eps) : c_(c), momentum_(momentum), eps_(eps) {
        if (c <= 0) throw std::invalid_argument("batchnorm2d: channels must be positive");
        n_params_ = 2 * static_cast<size_t>(c);
        mean_.resize(c);
        inv_std_.resize(c);
    }
    std::string describe() const override { return "batchnorm(" + std::to_string(c_) + ")"; }
    Shape configure(const Shape& in) override {
        if (in.c != c_) throw std::invalid_argument(describe() + ": input has " + std::to_string(in.c) + " channels");
        in_ = in;
        return in;
    }
    std::vector<ParamInfo> param_info() const override {
        return {{"gamma", static_cast<size_t>(c_), false}, {"beta", static_cast<size_t>(c_), false}};
    }
    size_t state_size() const override { return 2 * static_cast<size_t>(c_); }
    void bind(float* params, float* grads, float* state) override {
        params_ = params;
        grads_ = grads;
        state_ = state;
    }
    void init(Rng&) override {
        for (int i = 0; i < c_; ++i) {
            params_[i] = 1.0f;       // gamma
            params_[c_ + i] = 0.0f;  // beta
            state_[i] = 0.0f;        // running mean
            state_[c_ + i] = 1.0f;   // running variance
        }
    }
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
        const float* beta = params_ + c_;
        for (int c = 0; c < c_; ++c) {
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
                state_[c_ + c] = static_cast<float>((1 - momentum_) * state_[c_ + c] + momentum_ * unbiased);
            } else {
                mean = state_[c];
                inv_std = static_cast<float>(1.0 / std::sqrt(static_cast<double>(state_[c_ + c]) + eps_));
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
        for (int c = 0; c < c_; ++c) {
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
            grads_[c_ + c] += static_cast<float>(sdy);  // dbeta
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
    int c_;
    float momentum_, eps_;
    float* state_ = nullptr;
    bool train_ = true;
    Shape in_;
    const Tensor* x_ = nullptr;
    Tensor y_, dx_;
    std::vector<float> mean_, inv_std_;  // (C,) of the last forward
};

// ---- ReLU ------------------------------------------------------------------------------

// d[i] = y[i] > 0 ? g[i] : 0, branch-free and 4 lanes at a time with GCC's generic vector
// extension (compiled for every target; Eigen has no vectorized select).
void relu_mask(const float* y, const float* g, float* d, size_t n) {
    const V4f zero = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const V4i mask = load4(y + i) > zero;      // all ones where y > 0
        store4(d + i, (V4f)((V4i)load4(g + i) & mask));  // vector casts are bit casts
    }
    for (; i < n; ++i) d[i] = y[i] > 0.0f ? g[i] : 0.0f;
}

class ReluCpu final : public Layer {
public:
    std::string describe() const override { return "relu"; }
    Shape configure(const Shape& in) override {
        in_ = in;
        return in;
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "relu");
        y_.resize_like(x);
        const float* p = x.ptr();
        float* q = y_.ptr();
        const size_t n = x.size();
        // Eigen's vectorized max (a scalar loop compiles to a branch that mispredicts)
        Eigen::Map<Eigen::ArrayXf>(q, n) = Eigen::Map<const Eigen::ArrayXf>(p, n).max(0.0f);
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("relu backward: dy " + dy.str());
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(dy);
        const float* g = dy.ptr();
        const float* y = y_.ptr();
        float* d = dx_.ptr();
        const size_t n = dy.size();
        relu_mask(y, g, d, n);
        return dx_;
    }

private:
    Shape in_;
    Tensor y_, dx_;
};

// ---- max pooling -----------------------------------------------------------------------

class MaxPool2dCpu final : public Layer {
public:
    explicit MaxPool2dCpu(int k) : k_(k) {
        if (k <= 0) throw std::invalid_argument("maxpool2d: window must be positive");
    }
    std::string describe() const override { return "maxpool" + std::to_string(k_); }
    Shape configure(const Shape& in) override {
        if (in.h < k_ || in.w < k_) throw std::invalid_argument(describe() + ": input " + in.str() + " is too small");
        in_ = in;
        out_ = Shape{in.c, in.h / k_, in.w / k_};
        return out_;
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "maxpool2d");
        y_.resize(x.n, out_);
        arg_.resize(y_.size());
        const int H = in_.h, W = in_.w, Ho = out_.h, Wo = out_.w;
        const size_t planes = static_cast<size_t>(x.n) * in_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* src = x.ptr() + pl * H * W;
            float* dst = y_.ptr() + pl * Ho * Wo;
            int32_t* arg = arg_.data() + pl * Ho * Wo;
            if (k_ == 2) {
                // branch-free 2x2: the winner is chosen with selects (cmov / blend)
                for (int oh = 0; oh < Ho; ++oh) {
                    const float* r0 = src + (2 * oh) * W;
                    const float* r1 = r0 + W;
                    for (int ow = 0; ow < Wo; ++ow) {
                        const int i0 = 2 * ow;
                        const float a = r0[i0], b = r0[i0 + 1], c = r1[i0], d = r1[i0 + 1];
                        const bool ab = b > a, cd = d > c;
                        const float m1 = ab ? b : a, m2 = cd ? d : c;
                        const int j1 = (2 * oh) * W + i0 + ab, j2 = (2 * oh + 1) * W + i0 + cd;
                        const bool second = m2 > m1;
                        dst[oh * Wo + ow] = second ? m2 : m1;
                        arg[oh * Wo + ow] = second ? j2 : j1;
                    }
                }
                continue;
            }
            for (int oh = 0; oh < Ho; ++oh)
                for (int ow = 0; ow < Wo; ++ow) {
                    int best = (oh * k_) * W + ow * k_;
                    float bv = src[best];
                    for (int i = 0; i < k_; ++i)
                        for (int j = 0; j < k_; ++j) {
                            const int idx = (oh * k_ + i) * W + ow * k_ + j;
                            if (src[idx] > bv) {
                                bv = src[idx];
                                best = idx;
                            }
                        }
                    dst[oh * Wo + ow] = bv;
                    arg[oh * Wo + ow] = best;
                }
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("maxpool2d backward: dy " + dy.str());
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize(dy.n, in_);
        std::fill(dx_.data.begin(), dx_.data.end(), 0.0f);
        const size_t hw = static_cast<size_t>(in_.h) * in_.w, ohw = static_cast<size_t>(out_.h) * out_.w;
        const size_t planes = static_cast<size_t>(dy.n) * in_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* g = dy.ptr() + pl * ohw;
            const int32_t* arg = arg_.data() + pl * ohw;
            float* d = dx_.ptr() + pl * hw;
            for (size_t i = 0; i < ohw; ++i) d[arg[i]] += g[i];
        }
        return dx_;
    }

private:
    int k_;
    Shape in_, out_;
    Tensor y_, dx_;
    std::vector<int32_t> arg_;
};

// ---- fully connected -------------------------------------------------------------------

class LinearCpu final : public Layer {
public:
    LinearCpu(int in, int out) : in_f_(in), out_f_(out) {
        if (in <= 0 || out <= 0) throw std::invalid_argument("linear: features must be positive");
        n_params_ = static_cast<size_t>(in) * out + out;
    }
    std::string describe() const override {
        return "fc(" + std::to_string(in_f_) + "->" + std::to_string(out_f_) + ")";
    }
    Shape configure(const Shape& in) override {
        if (in.size() != static_cast<size_t>(in_f_))
            throw std::invalid_argument(describe() + ": input " + in.str() + " has " + std::to_string(in.size()) +
                                        " features");
        in_ = in;
        return Shape{out_f_, 1, 1};
    }
    std::vector<ParamInfo> param_info() const override {
        return {{"weight", static_cast<size_t>(in_f_) * out_f_, true}, {"bias", static_cast<size_t>(out_f_), false}};
    }
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

// ---- factories (the backend seam) -----------------------------------------------------

std::unique_ptr<Layer> make_conv2d(Backend, int cin, int cout, int k, int stride, int pad, bool bias, int groups) {
    if (groups != 1) return std::make_unique<GroupedConv2dCpu>(cin, cout, k, stride, pad, bias, groups);
    return std::make_unique<Conv2dCpu>(cin, cout, k, stride, pad, bias);
}
std::unique_ptr<Layer> make_batchnorm2d(Backend, int channels, float momentum, float eps) {
    return std::make_unique<BatchNorm2dCpu>(channels, momentum, eps);
}
std::unique_ptr<Layer> make_relu(Backend) { return std::make_unique<ReluCpu>(); }
std::unique_ptr<Layer> make_maxpool2d(Backend b, int k, int stride) {
    if (stride > 0 && stride != k) return make_maxpool2d_strided(b, k, stride);
    return std::make_unique<MaxPool2dCpu>(k);
}
std::unique_ptr<Layer> make_linear(Backend, int in_features, int out_features) {
    return std::make_unique<LinearCpu>(in_features, out_features);
}

// ---- loss ------------------------------------------------------------------------------

double SoftmaxCrossEntropy::forward(const Tensor& logits, const int* labels, int n, int64_t* correct) {
    if (logits.n != n) throw std::invalid_argument("softmax cross-entropy: " + std::to_string(n) + " labels for logits " +
                                                   logits.str());
    const int k = static_cast<int>(logits.sample_size());
    prob_.resize(n, k, 1, 1);
    labels_.assign(labels, labels + n);
    double loss = 0;
    int64_t right = 0;
    for (int i = 0; i < n; ++i) {
        const int y = labels[i];
        if (y < 0 || y >= k)
            throw std::invalid_argument("softmax cross-entropy: label " + std::to_string(y) + " outside [0, " +
                                        std::to_string(k) + ")");
        const float* z = logits.sample(i);
        float* p = prob_.sample(i);
        int arg = 0;
        for (int j = 1; j < k; ++j)
            if (z[j] > z[arg]) arg = j;
        const float zmax = z[arg];
        double s = 0;
        for (int j = 0; j < k; ++j) {
            p[j] = std::exp(z[j] - zmax);
            s += p[j];
        }
        const float inv = static_cast<float>(1.0 / s);
        for (int j = 0; j < k; ++j) p[j] *= inv;
        const double lse = std::log(s);
        double nll = lse - (z[y] - zmax);  // -log softmax(z)[y]
        if (smoothing_ > 0) {               // -sum_j q_j log p_j with q = (1-eps) onehot + eps/K
            double all = 0;
            for (int j = 0; j < k; ++j) all += lse - (z[j] - zmax);
            nll = (1.0 - smoothing_) * nll + smoothing_ / k * all;
        }
        loss += nll;
        if (arg == y) ++right;
    }
    if (correct) *correct += right;
    return n > 0 ? loss / n : 0.0;
}

const Tensor& SoftmaxCrossEntropy::backward() {
    dz_.resize_like(prob_);
    const int n = prob_.n, k = prob_.c;
    const float inv_n = n > 0 ? 1.0f / n : 0.0f;
    for (int i = 0; i < n; ++i) {
        const float* p = prob_.sample(i);
        float* d = dz_.sample(i);
        const float u = smoothing_ / k;  // dL/dz = (p - q) / N
        for (int j = 0; j < k; ++j) d[j] = (p[j] - u) * inv_n;
        d[labels_[i]] -= (1.0f - smoothing_) * inv_n;
    }
    return dz_;
}

}  // namespace train
}  // namespace tula
