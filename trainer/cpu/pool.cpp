// tula-train: CPU pooling: max (non-overlapping and strided) and adaptive average. See core/layers.hpp for the maths and the shapes.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/layer_specs.hpp"
#include "cpu/common.hpp"

namespace tula {
namespace train {
namespace {

using namespace cpu;

// ---- max pooling -----------------------------------------------------------------------

// Window k, stride s (s = k: non-overlapping). The winner of a window is its first maximal
// input; arg_ keeps its index within the plane for backward.
class MaxPool2dCpu final : public LeafLayer<Layer, spec::MaxPool> {
public:
    MaxPool2dCpu(int k, int s) : LeafLayer(spec::MaxPool(k, s)) {}
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "maxpool2d");
        y_.resize(x.n, out_);
        arg_.resize(y_.size());
        const int W = in_.w, Ho = out_.h, Wo = out_.w, k = spec_.k, s = spec_.s;
        const size_t planes = static_cast<size_t>(x.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* src = x.ptr() + pl * hw;
            float* dst = y_.ptr() + pl * ohw;
            int32_t* arg = arg_.data() + pl * ohw;
            if (k == 2 && s == 2) {
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
                    int best = (oh * s) * W + ow * s;
                    for (int i = 0; i < k; ++i)
                        for (int j = 0; j < k; ++j) {
                            const int idx = (oh * s + i) * W + ow * s + j;
                            if (src[idx] > src[best]) best = idx;
                        }
                    dst[oh * Wo + ow] = src[best];
                    arg[oh * Wo + ow] = best;
                }
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("maxpool2d backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        zero_input_grad(dx_, dy.n, in_);
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
    Tensor y_, dx_;
    std::vector<int32_t> arg_;
};

// ---- average pooling (fixed and adaptive) ---------------------------------------------

// Window of output index i for input size n and output size o: [floor(i*n/o), ceil((i+1)*n/o)).
// A fixed k x k, stride-k pool is the window [i*k, i*k + k).
class AvgPoolCpu final : public LeafLayer<Layer, spec::AdaptiveAvgPool> {
public:
    AvgPoolCpu(int oh, int ow) : LeafLayer(spec::AdaptiveAvgPool(oh, ow)) {}
    Shape configure(const Shape& in) override {
        LeafLayer::configure(in);
        rows_.clear();
        cols_.clear();
        for (int i = 0; i < out_.h; ++i) rows_.push_back(window(i, in.h, out_.h));
        for (int j = 0; j < out_.w; ++j) cols_.push_back(window(j, in.w, out_.w));
        return out_;
    }
    const Tensor& forward(const Tensor& x, bool) override {
        check_input(x, in_, "avgpool2d");
        y_.resize(x.n, out_);
        const size_t planes = static_cast<size_t>(x.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* src = x.ptr() + pl * hw;
            float* dst = y_.ptr() + pl * ohw;
            for (int i = 0; i < out_.h; ++i)
                for (int j = 0; j < out_.w; ++j) {
                    double s = 0;
                    for (int r = rows_[i].first; r < rows_[i].second; ++r)
                        for (int c = cols_[j].first; c < cols_[j].second; ++c) s += src[r * in_.w + c];
                    const int cnt = (rows_[i].second - rows_[i].first) * (cols_[j].second - cols_[j].first);
                    dst[i * out_.w + j] = static_cast<float>(s / cnt);
                }
        }
        return y_;
    }
    const Tensor& backward(const Tensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("avgpool2d backward: dy " + dy.str());
        if (!need_input_grad_) return no_grad(dx_);
        zero_input_grad(dx_, dy.n, in_);
        const size_t planes = static_cast<size_t>(dy.n) * in_.c, hw = in_.size() / in_.c, ohw = out_.size() / out_.c;
        for (size_t pl = 0; pl < planes; ++pl) {
            const float* g = dy.ptr() + pl * ohw;
            float* d = dx_.ptr() + pl * hw;
            for (int i = 0; i < out_.h; ++i)
                for (int j = 0; j < out_.w; ++j) {
                    const int cnt = (rows_[i].second - rows_[i].first) * (cols_[j].second - cols_[j].first);
                    const float v = g[i * out_.w + j] / cnt;
                    for (int r = rows_[i].first; r < rows_[i].second; ++r)
                        for (int c = cols_[j].first; c < cols_[j].second; ++c) d[r * in_.w + c] += v;
                }
        }
        return dx_;
    }

private:
    std::pair<int, int> window(int i, int n, int o) const {
        return {static_cast<int>((static_cast<long>(i) * n) / o), static_cast<int>(((static_cast<long>(i) + 1) * n + o - 1) / o)};
    }
    std::vector<std::pair<int, int>> rows_, cols_;
    Tensor y_, dx_;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool2d(int k, int stride) {
    return std::make_unique<MaxPool2dCpu>(k, stride);
}
std::unique_ptr<Layer> make_adaptive_avgpool2d(int oh, int ow) {
    return std::make_unique<AvgPoolCpu>(oh, ow);
}
std::unique_ptr<Layer> make_global_avgpool() { return make_adaptive_avgpool2d(1, 1); }

}  // namespace train
}  // namespace tula
