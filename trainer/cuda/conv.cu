// tula-train CUDA backend: convolution (cuDNN; grouped and depthwise by groups).
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

class Conv2dGpu final : public LeafLayer<GpuLayer, spec::Conv> {
public:
    Conv2dGpu(GpuContext& ctx, int cin, int cout, int k, int s, int p, bool bias, int groups)
        : LeafLayer(spec::Conv(cin, cout, k, s, p, groups, bias)), ctx_(ctx), bf16_(ctx.bf16()) {
        // Strict fp32 (FMA only) unless the context allows TF32 tensor cores, which is
        // PyTorch's default for cuDNN convolutions (torch.backends.cudnn.allow_tf32). On a
        // Bf16 context the float32 descriptors are the TF32 alternative of each direction.
        f_.init(*this, CUDNN_DATA_FLOAT, bf16_ || ctx.tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
        // bf16 tensors and filter, float32 compute type (cuDNN's PSEUDO_BFLOAT16_CONFIG)
        if (bf16_) h_.init(*this, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
        bdesc_.set(1, cout, 1, 1);
    }
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "conv2d");
        x_ = &x;
        plan(x.n);
        y_.resize(x.n, out_);
        void* ws = ctx_.workspace(ws_bytes_);
        const cudaStream_t st = ctx_.stream();
        // bf16 copies: x when forward or dW runs in bf16 (kept for backward), W when forward or
        // dx does (the weights are rounded once per step, here)
        if (half_[kFwd] || half_[kFilter]) float_to_bf16(st, x.ptr(), half(xh_, x.size()), x.size());
        if (half_[kFwd] || half_[kData]) float_to_bf16(st, params_, half(wh_, weight_size()), weight_size());
        if (half_[kFwd]) {  // convolve in bf16, widen y
            CUDNN_CHECK(cudnnConvolutionForward(ctx_.dnn(), &kOne, h_.x.d, xh_.get(), h_.w, wh_.get(), h_.c, fwd_, ws,
                                                ws_bytes_, &kZero, h_.y.d, half(yh_, y_.size())));
            bf16_to_float(st, half(yh_, y_.size()), y_.ptr(), y_.size(), false);
        } else {
            CUDNN_CHECK(cudnnConvolutionForward(ctx_.dnn(), &kOne, f_.x.d, x.ptr(), f_.w, params_, f_.c, fwd_, ws,
                                                ws_bytes_, &kZero, f_.y.d, y_.ptr()));
        }
        if (spec_.bias) CUDNN_CHECK(cudnnAddTensor(ctx_.dnn(), &kOne, bdesc_.d, bias_ptr(params_), &kOne, f_.y.d, y_.ptr()));
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.shape() != out_) throw std::invalid_argument("conv2d backward: dy " + dy.str());
        void* ws = ctx_.workspace(ws_bytes_);
        const cudaStream_t st = ctx_.stream();
        if (half_[kFilter] || (half_[kData] && need_input_grad_))  // dy rounded once
            float_to_bf16(st, dy.ptr(), half(dyh_, dy.size()), dy.size());
        if (half_[kFilter]) {  // dW in bf16 (float32 accumulation inside cuDNN), added to the gradient
            CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx_.dnn(), &kOne, h_.x.d, xh_.get(), h_.y.d, dyh_.get(), h_.c,
                                                       bwd_filter_, ws, ws_bytes_, &kZero, h_.w,
                                                       half(dwh_, weight_size())));
            bf16_to_float(st, half(dwh_, weight_size()), grads_, weight_size(), true);
        } else {  // dW += conv_bwd_filter(x, dy) (beta = 1 accumulates)
            CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx_.dnn(), &kOne, f_.x.d, x.ptr(), f_.y.d, dy.ptr(), f_.c,
                                                       bwd_filter_, ws, ws_bytes_, &kOne, f_.w, grads_));
        }
        if (spec_.bias)
            CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx_.dnn(), &kOne, f_.y.d, dy.ptr(), &kOne, bdesc_.d,
                                                     bias_ptr(grads_)));
        if (!need_input_grad_) return no_grad(dx_);
        dx_.resize_like(x);
        if (half_[kData]) {
            CUDNN_CHECK(cudnnConvolutionBackwardData(ctx_.dnn(), &kOne, h_.w, wh_.get(), h_.y.d, dyh_.get(), h_.c,
                                                     bwd_data_, ws, ws_bytes_, &kZero, h_.x.d,
                                                     half(dxh_, dx_.size())));
            bf16_to_float(st, half(dxh_, dx_.size()), dx_.ptr(), dx_.size(), false);
        } else {
            CUDNN_CHECK(cudnnConvolutionBackwardData(ctx_.dnn(), &kOne, f_.w, params_, f_.y.d, dy.ptr(), f_.c,
                                                     bwd_data_, ws, ws_bytes_, &kZero, f_.x.d, dx_.ptr()));
        }
        return dx_;
    }

private:
    enum { kFwd = 0, kData = 1, kFilter = 2 };
    // The cuDNN descriptors of one arithmetic: filter, convolution (compute type float32,
    // with its math type) and the x / y tensors of the planned batch.
    struct Descs {
        cudnnDataType_t type = CUDNN_DATA_FLOAT;
        cudnnFilterDescriptor_t w = nullptr;
        cudnnConvolutionDescriptor_t c = nullptr;
        TensorDesc x, y;
        Descs() = default;
        Descs(const Descs&) = delete;
        Descs& operator=(const Descs&) = delete;
        ~Descs() {
            if (c) cudnnDestroyConvolutionDescriptor(c);
            if (w) cudnnDestroyFilterDescriptor(w);
        }
        void init(const Conv2dGpu& l, cudnnDataType_t t, cudnnMathType_t math) {
            type = t;
            CUDNN_CHECK(cudnnCreateFilterDescriptor(&w));
            CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, l.spec_.cout, l.spec_.cin / l.spec_.groups, l.spec_.k, l.spec_.k));
            CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c));
            CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c, l.spec_.p, l.spec_.p, l.spec_.s, l.spec_.s, 1, 1, CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT));
            if (l.spec_.groups > 1) CUDNN_CHECK(cudnnSetConvolutionGroupCount(c, l.spec_.groups));
            CUDNN_CHECK(cudnnSetConvolutionMathType(c, math));
        }
        void set_batch(int n, const Shape& in, const Shape& out) {
            x.set(n, in.c, in.h, in.w, type);
            y.set(n, out.c, out.h, out.w, type);
        }
    };
    // An algorithm and cudnnFind's milliseconds for it (-1: from the heuristics, not timed);
    // ok = false when the configuration has none.
    template <class Algo>
    struct Pick {
        Algo algo{};
        float ms = -1;
        bool ok = false;
    };

    size_t weight_size() const { return spec_.fan_in() * spec_.cout; }
    float* bias_ptr(float* base) const { return base + weight_size(); }
    // A bf16 buffer of at least n values.
    static __nv_bfloat16* half(DevMem& m, size_t n) {
        return static_cast<__nv_bfloat16*>(m.reserve(sizeof(__nv_bfloat16) * std::max<size_t>(1, n)));
    }
    // The first successful entry of a cudnnFind / cudnnGet result.
    template <class Perf>
    static auto first_ok(const Perf* p, int got) -> Pick<decltype(p[0].algo)> {
        Pick<decltype(p[0].algo)> r;
        for (int i = 0; i < got; ++i)
            if (p[i].status == CUDNN_STATUS_SUCCESS) {
                r.algo = p[i].algo;
                r.ms = p[i].time;
                r.ok = true;
                break;
            }
        return r;
    }
    // `find` (cudnnFind*: runs every algorithm, with its own scratch memory, fastest first),
    // or when it fails `get` (the heuristics of cudnnGet*_v7, untimed); each fills up to 8.
    template <class Perf, class Find, class Get>
    static auto search(Find find, Get get) -> Pick<decltype(Perf{}.algo)> {
        int got = 0;
        Perf p[8];
        if (find(p, &got) != CUDNN_STATUS_SUCCESS || got == 0 || p[0].status != CUDNN_STATUS_SUCCESS) {
            got = 0;
            if (get(p, &got) != CUDNN_STATUS_SUCCESS) got = 0;
            for (int i = 0; i < got; ++i) p[i].time = -1;
        }
        return first_ok(p, got);
    }
    Pick<cudnnConvolutionFwdAlgo_t> find_fwd(const Descs& d) {
        cudnnHandle_t h = ctx_.dnn();
        return search<cudnnConvolutionFwdAlgoPerf_t>(
            [&](auto* p, int* n) { return cudnnFindConvolutionForwardAlgorithm(h, d.x.d, d.w, d.c, d.y.d, 8, n, p); },
            [&](auto* p, int* n) { return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.d, d.w, d.c, d.y.d, 8, n, p); });
    }
    Pick<cudnnConvolutionBwdDataAlgo_t> find_data(const Descs& d) {
        cudnnHandle_t h = ctx_.dnn();
        return search<cudnnConvolutionBwdDataAlgoPerf_t>(
            [&](auto* p, int* n) {
                return cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y.d, d.c, d.x.d, 8, n, p);
            },
            [&](auto* p, int* n) {
                return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y.d, d.c, d.x.d, 8, n, p);
            });
    }
    Pick<cudnnConvolutionBwdFilterAlgo_t> find_filter(const Descs& d) {
        cudnnHandle_t h = ctx_.dnn();
        return search<cudnnConvolutionBwdFilterAlgoPerf_t>(
            [&](auto* p, int* n) {
                return cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x.d, d.y.d, d.c, d.w, 8, n, p);
            },
            [&](auto* p, int* n) {
                return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.d, d.y.d, d.c, d.w, 8, n, p);
            });
    }
    // Direction `dir` in bf16 or float32: bf16 when it has an algorithm and either the context's
    // mask asks for it or, without a mask, it is not slower than the float32 (TF32) one by
    // cudnnFind's times; float32 otherwise. Sets half_[dir] and returns the chosen algorithm.
    // Errors: std::runtime_error when neither arithmetic has an algorithm.
    template <class Algo>
    Algo choose(int n, int dir, const Pick<Algo>& f, const Pick<Algo>& h, const char* what) {
        const int m = ctx_.conv_bf16_mask();
        half_[dir] = h.ok && (!f.ok || (m >= 0 ? ((m >> dir) & 1) != 0 : (h.ms < 0 || f.ms < 0 || h.ms <= f.ms)));
        if (!half_[dir] && !f.ok)
            throw std::runtime_error("tula-train: " + describe() + ": cuDNN offers no " + what +
                                     " algorithm for input " + in_.str());
        if (ctx_.report_plans() && bf16_)
            std::fprintf(stderr, "tula-train: %s at batch %d: %s bf16 %.3f ms, tf32 %.3f ms: %s\n", describe().c_str(),
                         n, what, h.ok ? h.ms : -1.0f, f.ok ? f.ms : -1.0f, half_[dir] ? "bf16" : "tf32");
        return half_[dir] ? h.algo : f.algo;
    }

    // Descriptors and algorithms for batch size n, computed once per n (the shape is
    // otherwise fixed by configure()). The workspace is the largest need of the three.
    void plan(int n) {
        if (n == planned_n_) return;
        planned_n_ = -1;  // until planned
        f_.set_batch(n, in_, out_);
        if (bf16_) h_.set_batch(n, in_, out_);
        using FwdPick = Pick<cudnnConvolutionFwdAlgo_t>;
        using DataPick = Pick<cudnnConvolutionBwdDataAlgo_t>;
        using FilterPick = Pick<cudnnConvolutionBwdFilterAlgo_t>;
        // which arithmetics to search: float32 unless the mask wants bf16 everywhere, bf16 on
        // a Bf16 context unless the mask wants none
        const int m = ctx_.conv_bf16_mask();
        const bool try_f = !bf16_ || m != 7, try_h = bf16_ && m != 0;
        fwd_ = choose(n, kFwd, try_f ? find_fwd(f_) : FwdPick{}, try_h ? find_fwd(h_) : FwdPick{}, "forward");
        bwd_data_ = choose(n, kData, try_f ? find_data(f_) : DataPick{}, try_h ? find_data(h_) : DataPick{},
                           "backward data");
        bwd_filter_ = choose(n, kFilter, try_f ? find_filter(f_) : FilterPick{}, try_h ? find_filter(h_) : FilterPick{},
                             "backward filter");
        const Descs& a = half_[kFwd] ? h_ : f_;
        const Descs& b = half_[kData] ? h_ : f_;
        const Descs& c = half_[kFilter] ? h_ : f_;
        size_t wa = 0, wb = 0, wc = 0;
        CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(ctx_.dnn(), a.x.d, a.w, a.c, a.y.d, fwd_, &wa));
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx_.dnn(), b.w, b.y.d, b.c, b.x.d, bwd_data_, &wb));
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx_.dnn(), c.x.d, c.y.d, c.c, c.w, bwd_filter_, &wc));
        ws_bytes_ = std::max(wa, std::max(wb, wc));
        planned_n_ = n;
    }

    GpuContext& ctx_;
    bool bf16_;
    Descs f_, h_;                          // float32; bf16 (Precision::Bf16 only)
    TensorDesc bdesc_;
    bool half_[3] = {false, false, false};  // forward, backward data, backward filter in bf16
    int planned_n_ = -1;
    cudnnConvolutionFwdAlgo_t fwd_{};
    cudnnConvolutionBwdDataAlgo_t bwd_data_{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
    size_t ws_bytes_ = 0;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
    DevMem xh_, wh_, yh_, dyh_, dxh_, dwh_;  // bf16 copies of x, W, y, dy, dx, dW
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_conv2d(GpuContext& ctx, int cin, int cout, int k, int stride, int pad, bool bias,
                                          int groups) {
    return std::make_unique<Conv2dGpu>(ctx, cin, cout, k, stride, pad, bias, groups);
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
