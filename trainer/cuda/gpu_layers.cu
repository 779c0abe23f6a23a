// tula-train CUDA backend: device memory, context, the GPU layers (cuDNN / cuBLAS), the
// loss, the model with fused device buffers and SGD. See gpu.hpp.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "check.hpp"
#include "gpu.hpp"

namespace tula {
namespace train {
namespace cuda {

int device_count(std::string* why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) *why = cudaGetErrorString(e);
        cudaGetLastError();  // clear the sticky error
        return 0;
    }
    if (n == 0 && why) *why = "cudaGetDeviceCount reports 0 devices";
    return n;
}

// ---- memory ------------------------------------------------------------------------------

DevMem::~DevMem() {
    if (p_) cudaFree(p_);
}

void* DevMem::reserve(size_t bytes) {
    if (bytes <= cap_) return p_;
    if (p_) CUDA_CHECK(cudaFree(p_));
    p_ = nullptr;
    cap_ = 0;
    CUDA_CHECK(cudaMalloc(&p_, bytes));
    cap_ = bytes;
    return p_;
}

void DevTensor::resize(int n_, int c_, int h_, int w_) {
    if (n_ < 0 || c_ < 0 || h_ < 0 || w_ < 0) throw std::invalid_argument("negative tensor dimension");
    n = n_; c = c_; h = h_; w = w_;
    if (size() > 0) mem.reserve(size() * sizeof(float));
}

std::string DevTensor::str() const {
    return "(" + std::to_string(n) + ", " + std::to_string(c) + ", " + std::to_string(h) + ", " + std::to_string(w) +
           ")";
}

void DevTensor::upload(const Tensor& t) {
    resize(t.n, t.c, t.h, t.w);
    if (t.size()) CUDA_CHECK(cudaMemcpy(ptr(), t.ptr(), t.size() * sizeof(float), cudaMemcpyHostToDevice));
    // a pageable host-to-device cudaMemcpy may return before the DMA ends; the layers run
    // on a non-blocking stream, so wait here
    CUDA_CHECK(cudaDeviceSynchronize());
}

void DevTensor::download(Tensor& t) const {
    t.resize(n, c, h, w);
    CUDA_CHECK(cudaDeviceSynchronize());
    if (size()) CUDA_CHECK(cudaMemcpy(t.ptr(), ptr(), size() * sizeof(float), cudaMemcpyDeviceToHost));
}

// ---- context -----------------------------------------------------------------------------

const char* precision_name(Precision p) { return p == Precision::Bf16 ? "bf16" : "fp32"; }

Precision parse_precision(const std::string& s) {
    if (s == "fp32") return Precision::Fp32;
    if (s == "bf16") return Precision::Bf16;
    throw std::invalid_argument("unknown precision '" + s + "'; valid: fp32, bf16");
}

GpuContext::GpuContext(int device, bool tf32, Precision precision)
    : device_(device), tf32_(tf32), precision_(precision) {
    const char* lt = std::getenv("TULA_GPU_LAYER_TIMES");
    report_plans_ = lt && *lt && std::string(lt) != "0";
    const char* only = std::getenv("TULA_BF16_ONLY");
    if (only && *only && std::string(only) != "0") conv_bf16_mask_ = 7;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDNN_CHECK(cudnnCreate(&dnn_));
    CUDNN_CHECK(cudnnSetStream(dnn_, stream_));
    CUBLAS_CHECK(cublasCreate(&blas_));
    CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    // fp32 GEMMs stay fp32 (no TF32): the CPU oracle comparison assumes full precision.
    CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
}

GpuContext::~GpuContext() {
    if (blas_) cublasDestroy(blas_);
    if (dnn_) cudnnDestroy(dnn_);
    if (stream_) cudaStreamDestroy(stream_);
}

void GpuContext::sync() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

namespace {

void check_input(const DevTensor& x, const Shape& in, const char* who) {
    if (x.shape() != in)
        throw std::invalid_argument(std::string(who) + ": input " + x.str() + " does not match the configured " +
                                    "example shape " + in.str());
}

// RAII wrappers of the cuDNN descriptors.
struct TensorDesc {
    cudnnTensorDescriptor_t d = nullptr;
    TensorDesc() { CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
    ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
    void set(int n, int c, int h, int w, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, n, c, h, w));
    }
};

const float kOne = 1.0f, kZero = 0.0f;

// ---- convolution ---------------------------------------------------------------------

class Conv2dGpu final : public GpuLayer {
public:
    Conv2dGpu(GpuContext& ctx, int cin, int cout, int k, int s, int p, bool bias, int groups)
        : ctx_(ctx), cin_(cin), cout_(cout), k_(k), s_(s), p_(p), groups_(groups), bias_(bias), bf16_(ctx.bf16()) {
        if (cin <= 0 || cout <= 0 || k <= 0 || s <= 0 || p < 0 || groups <= 0)
            throw std::invalid_argument("conv2d: channels, kernel, stride and groups must be positive, padding >= 0");
        if (cin % groups != 0 || cout % groups != 0)
            throw std::invalid_argument("conv2d: groups " + std::to_string(groups) + " must divide the input (" +
                                        std::to_string(cin) + ") and output (" + std::to_string(cout) + ") channels");
        n_params_ = weight_size() + (bias ? cout : 0);
        // Strict fp32 (FMA only) unless the context allows TF32 tensor cores, which is
        // PyTorch's default for cuDNN convolutions (torch.backends.cudnn.allow_tf32). On a
        // Bf16 context the float32 descriptors are the TF32 alternative of each direction.
        f_.init(*this, CUDNN_DATA_FLOAT, bf16_ || ctx.tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
        // bf16 tensors and filter, float32 compute type (cuDNN's PSEUDO_BFLOAT16_CONFIG)
        if (bf16_) h_.init(*this, CUDNN_DATA_BFLOAT16, CUDNN_TENSOR_OP_MATH);
        bdesc_.set(1, cout, 1, 1);
    }
    std::string describe() const override {
        std::string d = "conv" + std::to_string(k_) + "x" + std::to_string(k_) + "(" + std::to_string(cin_) + "->" +
                        std::to_string(cout_);
        if (s_ != 1) d += ", stride " + std::to_string(s_);
        if (p_ != 0) d += ", pad " + std::to_string(p_);
        if (groups_ != 1) d += (groups_ == cin_ ? ", depthwise" : ", groups " + std::to_string(groups_));
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
        std::vector<ParamInfo> v{{"weight", weight_size(), true}};
        if (bias_) v.push_back({"bias", static_cast<size_t>(cout_), false});
        return v;
    }
    void bind(float* params, float* grads, float*) override {
        params_ = params;
        grads_ = grads;
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
        if (bias_) CUDNN_CHECK(cudnnAddTensor(ctx_.dnn(), &kOne, bdesc_.d, bias_ptr(params_), &kOne, f_.y.d, y_.ptr()));
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
        if (bias_)
            CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx_.dnn(), &kOne, f_.y.d, dy.ptr(), &kOne, bdesc_.d,
                                                     bias_ptr(grads_)));
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
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
            CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, l.cout_, l.cin_ / l.groups_, l.k_, l.k_));
            CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c));
            CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c, l.p_, l.p_, l.s_, l.s_, 1, 1, CUDNN_CROSS_CORRELATION,
                                                        CUDNN_DATA_FLOAT));
            if (l.groups_ > 1) CUDNN_CHECK(cudnnSetConvolutionGroupCount(c, l.groups_));
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

    size_t weight_size() const { return static_cast<size_t>(cin_ / groups_) * k_ * k_ * cout_; }
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
    int cin_, cout_, k_, s_, p_, groups_;
    bool bias_, bf16_;
    Shape in_, out_;
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

// ---- batch normalization ---------------------------------------------------------------

class BatchNorm2dGpu final : public GpuLayer {
public:
    BatchNorm2dGpu(GpuContext& ctx, int c, float momentum, float eps) : ctx_(ctx), c_(c), momentum_(momentum), eps_(eps) {
        if (c <= 0) throw std::invalid_argument("batchnorm2d: channels must be positive");
        if (eps < CUDNN_BN_MIN_EPSILON)
            throw std::invalid_argument("batchnorm2d: eps " + std::to_string(eps) + " is below cuDNN's minimum " +
                                        std::to_string(CUDNN_BN_MIN_EPSILON));
        n_params_ = 2 * static_cast<size_t>(c);
        pdesc_.set(1, c, 1, 1);
        saved_.reserve(2 * sizeof(float) * c);
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
        float* inv_var = saved() + c_;
        if (train)
            CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
                ctx_.dnn(), train_mode(), &kOne, &kZero, xdesc_.d, x.ptr(), xdesc_.d, y_.ptr(), pdesc_.d,
                params_, params_ + c_, momentum_, state_, state_ + c_, eps_, mean, inv_var));
        else
            CUDNN_CHECK(cudnnBatchNormalizationForwardInference(ctx_.dnn(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero,
                                                                xdesc_.d, x.ptr(), xdesc_.d, y_.ptr(), pdesc_.d,
                                                                params_, params_ + c_, state_, state_ + c_, eps_));
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
                                                    pdesc_.d, params_, grads_, grads_ + c_, eps_, saved(),
                                                    saved() + c_));
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
    int c_;
    double momentum_, eps_;
    float* state_ = nullptr;
    bool train_ = true;
    int n_ = -1;
    Shape in_;
    TensorDesc xdesc_, pdesc_;
    DevMem saved_;  // batch mean and inverse std of the last training forward, (2C,)
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_, empty_;
};

// ---- ReLU ------------------------------------------------------------------------------

class ReluGpu final : public GpuLayer {
public:
    explicit ReluGpu(GpuContext& ctx) : ctx_(ctx) {}
    std::string describe() const override { return "relu"; }
    Shape configure(const Shape& in) override {
        in_ = in;
        return in;
    }
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "relu");
        y_.resize_like(x);
        relu_forward(ctx_.stream(), x.ptr(), y_.ptr(), x.size());
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("relu backward: dy " + dy.str());
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(dy);
        relu_backward(ctx_.stream(), y_.ptr(), dy.ptr(), dx_.ptr(), dy.size());
        return dx_;
    }

private:
    GpuContext& ctx_;
    Shape in_;
    DevTensor y_, dx_;
};

// ---- max pooling -----------------------------------------------------------------------

class MaxPool2dGpu final : public GpuLayer {
public:
    MaxPool2dGpu(GpuContext& ctx, int k, int stride) : ctx_(ctx), k_(k), s_(stride > 0 ? stride : k) {
        if (k <= 0) throw std::invalid_argument("maxpool2d: window must be positive");
        CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pdesc_));
        CUDNN_CHECK(cudnnSetPooling2dDescriptor(pdesc_, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, k, k,
                                                0, 0, s_, s_));
    }
    ~MaxPool2dGpu() override { cudnnDestroyPoolingDescriptor(pdesc_); }
    std::string describe() const override {
        return "maxpool" + std::to_string(k_) + (s_ != k_ ? "/" + std::to_string(s_) : "");
    }
    Shape configure(const Shape& in) override {
        if (in.h < k_ || in.w < k_) throw std::invalid_argument(describe() + ": input " + in.str() + " is too small");
        in_ = in;
        out_ = Shape{in.c, (in.h - k_) / s_ + 1, (in.w - k_) / s_ + 1};
        return out_;
    }
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "maxpool2d");
        x_ = &x;
        if (x.n != n_) {
            xdesc_.set(x.n, in_.c, in_.h, in_.w);
            ydesc_.set(x.n, out_.c, out_.h, out_.w);
            n_ = x.n;
        }
        y_.resize(x.n, out_);
        CUDNN_CHECK(cudnnPoolingForward(ctx_.dnn(), pdesc_, &kOne, xdesc_.d, x.ptr(), &kZero, ydesc_.d, y_.ptr()));
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        if (dy.size() != y_.size()) throw std::invalid_argument("maxpool2d backward: dy " + dy.str());
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(*x_);
        CUDNN_CHECK(cudnnPoolingBackward(ctx_.dnn(), pdesc_, &kOne, ydesc_.d, y_.ptr(), ydesc_.d, dy.ptr(), xdesc_.d,
                                         x_->ptr(), &kZero, xdesc_.d, dx_.ptr()));
        return dx_;
    }

private:
    GpuContext& ctx_;
    int k_, s_;
    int n_ = -1;
    Shape in_, out_;
    cudnnPoolingDescriptor_t pdesc_ = nullptr;
    TensorDesc xdesc_, ydesc_;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
};

// ---- fully connected -------------------------------------------------------------------

class LinearGpu final : public GpuLayer {
public:
    LinearGpu(GpuContext& ctx, int in, int out) : ctx_(ctx), in_f_(in), out_f_(out) {
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
    // Row-major X (N, F), W (out, F), Y (N, out) are the column-major X^T (F, N), W^T (F, out),
    // Y^T (out, N): Y^T = (W^T)^T X^T.
    const DevTensor& forward(const DevTensor& x, bool) override {
        check_input(x, in_, "linear");
        x_ = &x;
        y_.resize(x.n, out_f_, 1, 1);
        gemm(CUBLAS_OP_T, CUBLAS_OP_N, out_f_, x.n, in_f_, params_, in_f_, x.ptr(), in_f_, kZero, y_.ptr(), out_f_);
        add_row_bias(ctx_.stream(), y_.ptr(), bias(params_), x.n, out_f_);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.sample_size() != static_cast<size_t>(out_f_))
            throw std::invalid_argument("linear backward: dy " + dy.str());
        // dW (out, F) += G^T X  <=>  dW^T (F, out) += X^T (F, N) * G (N, out) [G^T col-major (out, N)]
        gemm(CUBLAS_OP_N, CUBLAS_OP_T, in_f_, out_f_, x.n, x.ptr(), in_f_, dy.ptr(), out_f_, kOne, grads_, in_f_);
        add_col_sums(ctx_.stream(), dy.ptr(), bias(grads_), x.n, out_f_);
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(x);
        // dX (N, F) = G W  <=>  dX^T (F, N) = W^T (F, out) * G^T (out, N)
        gemm(CUBLAS_OP_N, CUBLAS_OP_N, in_f_, x.n, out_f_, params_, in_f_, dy.ptr(), out_f_, kZero, dx_.ptr(), in_f_);
        return dx_;
    }

private:
    float* bias(float* base) const { return base + static_cast<size_t>(in_f_) * out_f_; }
    // C = op(A) op(B) + beta C, column-major, float32 operands: SGEMM, or on a Bf16 context
    // GemmEx with bf16 tensor-core compute and float32 accumulation.
    void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a, int lda, const float* b,
              int ldb, const float& beta, float* c, int ldc) {
        if (ctx_.bf16())
            CUBLAS_CHECK(cublasGemmEx(ctx_.blas(), ta, tb, m, n, k, &kOne, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                                      &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
        else
            CUBLAS_CHECK(cublasSgemm(ctx_.blas(), ta, tb, m, n, k, &kOne, a, lda, b, ldb, &beta, c, ldc));
    }

    GpuContext& ctx_;
    int in_f_, out_f_;
    Shape in_;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
};

}  // namespace

// ---- factories -----------------------------------------------------------------------

std::unique_ptr<GpuLayer> make_gpu_conv2d(GpuContext& ctx, int cin, int cout, int k, int stride, int pad, bool bias,
                                          int groups) {
    return std::make_unique<Conv2dGpu>(ctx, cin, cout, k, stride, pad, bias, groups);
}
std::unique_ptr<GpuLayer> make_gpu_batchnorm2d(GpuContext& ctx, int channels, float momentum, float eps) {
    return std::make_unique<BatchNorm2dGpu>(ctx, channels, momentum, eps);
}
std::unique_ptr<GpuLayer> make_gpu_relu(GpuContext& ctx) { return std::make_unique<ReluGpu>(ctx); }
std::unique_ptr<GpuLayer> make_gpu_maxpool2d(GpuContext& ctx, int k, int stride) {
    return std::make_unique<MaxPool2dGpu>(ctx, k, stride);
}
std::unique_ptr<GpuLayer> make_gpu_linear(GpuContext& ctx, int in_features, int out_features) {
    return std::make_unique<LinearGpu>(ctx, in_features, out_features);
}

// ---- loss ------------------------------------------------------------------------------

double GpuSoftmaxCrossEntropy::forward(const DevTensor& logits, const int* labels, int n, int64_t* correct) {
    if (logits.n != n)
        throw std::invalid_argument("softmax cross-entropy: " + std::to_string(n) + " labels for logits " + logits.str());
    const int k = static_cast<int>(logits.sample_size());
    for (int i = 0; i < n; ++i)
        if (labels[i] < 0 || labels[i] >= k)
            throw std::invalid_argument("softmax cross-entropy: label " + std::to_string(labels[i]) + " outside [0, " +
                                        std::to_string(k) + ")");
    prob_.resize(n, k, 1, 1);
    if (n == 0) return 0.0;
    int* dlab = static_cast<int*>(labels_.reserve(sizeof(int) * n));
    double* dloss = static_cast<double*>(loss_.reserve(sizeof(double) * n));
    int* dhit = static_cast<int*>(hits_.reserve(sizeof(int) * n));
    CUDA_CHECK(cudaMemcpyAsync(dlab, labels, sizeof(int) * n, cudaMemcpyHostToDevice, ctx_.stream()));
    softmax_xent_forward(ctx_.stream(), logits.ptr(), dlab, prob_.ptr(), dloss, dhit, n, k);
    loss_host_.resize(n);
    hits_host_.resize(n);
    CUDA_CHECK(cudaMemcpyAsync(loss_host_.data(), dloss, sizeof(double) * n, cudaMemcpyDeviceToHost, ctx_.stream()));
    CUDA_CHECK(cudaMemcpyAsync(hits_host_.data(), dhit, sizeof(int) * n, cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.sync();
    double loss = 0;
    int64_t right = 0;
    for (int i = 0; i < n; ++i) {
        loss += loss_host_[i];
        right += hits_host_[i];
    }
    if (correct) *correct += right;
    return loss / n;
}

const DevTensor& GpuSoftmaxCrossEntropy::backward() {
    dz_.resize_like(prob_);
    softmax_xent_backward(ctx_.stream(), prob_.ptr(), static_cast<const int*>(labels_.get()), dz_.ptr(), prob_.n,
                          prob_.c);
    return dz_;
}

// ---- model -----------------------------------------------------------------------------

GpuModel::GpuModel(GpuContext& ctx, std::string name, const Shape& input, std::vector<std::unique_ptr<GpuLayer>> layers)
    : ctx_(ctx), name_(std::move(name)), layers_(std::move(layers)) {
    if (layers_.empty()) throw std::invalid_argument("model " + name_ + " has no layers");
    Shape s = input;
    for (size_t i = 0; i < layers_.size(); ++i) {
        s = layers_[i]->configure(s);
        const std::string prefix = std::to_string(i) + "." + layers_[i]->describe() + ".";
        for (const ParamInfo& p : layers_[i]->param_info()) {
            segments_.push_back(ParamSegment{prefix + p.name, n_params_, p.size, p.decay});
            n_params_ += p.size;
        }
        n_state_ += layers_[i]->state_size();
    }
    params_.reserve(sizeof(float) * std::max<size_t>(1, n_params_));
    grads_.reserve(sizeof(float) * std::max<size_t>(1, n_params_));
    state_.reserve(sizeof(float) * std::max<size_t>(1, n_state_));
    CUDA_CHECK(cudaMemset(params_.get(), 0, sizeof(float) * n_params_));
    CUDA_CHECK(cudaMemset(grads_.get(), 0, sizeof(float) * n_params_));
    CUDA_CHECK(cudaMemset(state_.get(), 0, sizeof(float) * n_state_));
    CUDA_CHECK(cudaDeviceSynchronize());  // legacy-stream memsets vs the non-blocking stream
    size_t po = 0, so = 0;
    for (auto& l : layers_) {
        size_t lp = 0;
        for (const ParamInfo& p : l->param_info()) lp += p.size;
        l->bind(params() + po, grads() + po, state() + so);
        po += lp;
        so += l->state_size();
    }
    layers_.front()->set_need_input_grad(false);
}

void GpuModel::upload(const float* p, size_t np, const float* st, size_t ns) {
    if (np != n_params_ || ns != n_state_)
        throw std::invalid_argument("gpu model " + name_ + ": upload of " + std::to_string(np) + " parameters and " +
                                    std::to_string(ns) + " state values, expected " + std::to_string(n_params_) +
                                    " and " + std::to_string(n_state_));
    ctx_.sync();
    if (np) CUDA_CHECK(cudaMemcpy(params(), p, sizeof(float) * np, cudaMemcpyHostToDevice));
    if (ns) CUDA_CHECK(cudaMemcpy(state(), st, sizeof(float) * ns, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
}

void GpuModel::download(std::vector<float>* p, std::vector<float>* g, std::vector<float>* st) const {
    ctx_.sync();
    if (p) {
        p->resize(n_params_);
        CUDA_CHECK(cudaMemcpy(p->data(), params(), sizeof(float) * n_params_, cudaMemcpyDeviceToHost));
    }
    if (g) {
        g->resize(n_params_);
        CUDA_CHECK(cudaMemcpy(g->data(), grads(), sizeof(float) * n_params_, cudaMemcpyDeviceToHost));
    }
    if (st) {
        st->resize(n_state_);
        CUDA_CHECK(cudaMemcpy(st->data(), state(), sizeof(float) * n_state_, cudaMemcpyDeviceToHost));
    }
}

void GpuModel::zero_grad() {
    CUDA_CHECK(cudaMemsetAsync(grads(), 0, sizeof(float) * n_params_, ctx_.stream()));
}

const DevTensor& GpuModel::forward(const DevTensor& x, bool train) {
    const DevTensor* t = &x;
    for (size_t i = 0; i < layers_.size(); ++i) {
        if (timing_) CUDA_CHECK(cudaEventRecord(events_[i], ctx_.stream()));
        t = &layers_[i]->forward(*t, train);
    }
    if (timing_) time_layers(false);
    return *t;
}

void GpuModel::backward(const DevTensor& dlogits) {
    const DevTensor* g = &dlogits;
    for (size_t i = layers_.size(); i-- > 0;) {
        if (timing_) CUDA_CHECK(cudaEventRecord(events_[i + 1], ctx_.stream()));
        g = &layers_[i]->backward(*g);
    }
    if (timing_) time_layers(true);
}

GpuModel::~GpuModel() {
    for (auto& e : events_) cudaEventDestroy(e);
}

void GpuModel::set_layer_timing(bool on) {
    if (on && events_.empty()) {
        events_.resize(layers_.size() + 1);
        for (auto& e : events_) CUDA_CHECK(cudaEventCreate(&e));
    }
    timing_ = on;
    layer_ms_.assign(layers_.size(), {0.0, 0.0});
}

// Forward: event i is recorded before layer i; backward: event i + 1 before layer i's
// backward (layers run last to first). The closing event goes into the free slot.
void GpuModel::time_layers(bool backward) {
    const size_t n = layers_.size();
    CUDA_CHECK(cudaEventRecord(backward ? events_[0] : events_[n], ctx_.stream()));
    CUDA_CHECK(cudaEventSynchronize(backward ? events_[0] : events_[n]));
    for (size_t i = 0; i < n; ++i) {
        float ms = 0;
        if (backward) {
            CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i + 1], events_[i]));
            layer_ms_[i].second += ms;
        } else {
            CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
            layer_ms_[i].first += ms;
        }
    }
}

// ---- SGD and norms -----------------------------------------------------------------------

GpuSgd::GpuSgd(GpuModel& model, double momentum, double weight_decay)
    : m_(model), momentum_(static_cast<float>(momentum)), wd_(static_cast<float>(weight_decay)) {
    v_.reserve(sizeof(float) * std::max<size_t>(1, model.num_params()));
    CUDA_CHECK(cudaMemset(v_.get(), 0, sizeof(float) * model.num_params()));
    CUDA_CHECK(cudaDeviceSynchronize());
}

void GpuSgd::step(double lr) {
    float* v = static_cast<float*>(v_.get());
    // the model's layers queue on the context stream; so does the update
    for (const ParamSegment& s : m_.segments())
        sgd_momentum_update(m_.context().stream(), m_.params() + s.offset, m_.grads() + s.offset, v + s.offset, s.size,
                            static_cast<float>(lr), momentum_, s.decay ? wd_ : 0.0f);
}

std::vector<float> GpuSgd::velocity() const {
    std::vector<float> out(m_.num_params());
    CUDA_CHECK(cudaDeviceSynchronize());
    if (!out.empty())
        CUDA_CHECK(cudaMemcpy(out.data(), v_.get(), sizeof(float) * out.size(), cudaMemcpyDeviceToHost));
    return out;
}

std::vector<double> sq_norms(GpuContext& ctx, const float* x, const std::vector<ParamSegment>& segs) {
    const int n = static_cast<int>(segs.size());
    std::vector<double> out(n);
    if (n == 0) return out;
    std::vector<size_t> meta(2 * n);
    for (int i = 0; i < n; ++i) {
        meta[i] = segs[i].offset;
        meta[n + i] = segs[i].size;
    }
    DevMem dmeta, dout;
    size_t* m = static_cast<size_t*>(dmeta.reserve(sizeof(size_t) * 2 * n));
    double* o = static_cast<double*>(dout.reserve(sizeof(double) * n));
    CUDA_CHECK(cudaMemcpyAsync(m, meta.data(), sizeof(size_t) * 2 * n, cudaMemcpyHostToDevice, ctx.stream()));
    segment_sq_norms(ctx.stream(), x, m, m + n, n, o);
    CUDA_CHECK(cudaMemcpyAsync(out.data(), o, sizeof(double) * n, cudaMemcpyDeviceToHost, ctx.stream()));
    ctx.sync();
    return out;
}

}  // namespace cuda
}  // namespace train
}  // namespace tula
