// tula-train CUDA backend: device memory, context, the GPU layers (cuDNN / cuBLAS), the
// loss, the model with fused device buffers and SGD. See gpu.hpp.
#include <algorithm>
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

GpuContext::GpuContext(int device, bool tf32) : device_(device), tf32_(tf32) {
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
    void set(int n, int c, int h, int w) {
        CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    }
};

const float kOne = 1.0f, kZero = 0.0f;

// ---- convolution ---------------------------------------------------------------------

class Conv2dGpu final : public GpuLayer {
public:
    Conv2dGpu(GpuContext& ctx, int cin, int cout, int k, int s, int p, bool bias, int groups)
        : ctx_(ctx), cin_(cin), cout_(cout), k_(k), s_(s), p_(p), groups_(groups), bias_(bias) {
        if (cin <= 0 || cout <= 0 || k <= 0 || s <= 0 || p < 0 || groups <= 0)
            throw std::invalid_argument("conv2d: channels, kernel, stride and groups must be positive, padding >= 0");
        if (cin % groups != 0 || cout % groups != 0)
            throw std::invalid_argument("conv2d: groups " + std::to_string(groups) + " must divide the input (" +
                                        std::to_string(cin) + ") and output (" + std::to_string(cout) + ") channels");
        n_params_ = weight_size() + (bias ? cout : 0);
        CUDNN_CHECK(cudnnCreateFilterDescriptor(&wdesc_));
        CUDNN_CHECK(cudnnSetFilter4dDescriptor(wdesc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, cout, cin / groups, k, k));
        CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cdesc_));
        CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cdesc_, p, p, s, s, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
        if (groups > 1) CUDNN_CHECK(cudnnSetConvolutionGroupCount(cdesc_, groups));
        // Strict fp32 (FMA only) unless the context allows TF32 tensor cores, which is
        // PyTorch's default for cuDNN convolutions (torch.backends.cudnn.allow_tf32).
        CUDNN_CHECK(cudnnSetConvolutionMathType(cdesc_, ctx.tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
        bdesc_.set(1, cout, 1, 1);
    }
    ~Conv2dGpu() override {
        cudnnDestroyConvolutionDescriptor(cdesc_);
        cudnnDestroyFilterDescriptor(wdesc_);
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
        CUDNN_CHECK(cudnnConvolutionForward(ctx_.dnn(), &kOne, xdesc_.d, x.ptr(), wdesc_, params_, cdesc_, fwd_, ws,
                                            ws_bytes_, &kZero, ydesc_.d, y_.ptr()));
        if (bias_) CUDNN_CHECK(cudnnAddTensor(ctx_.dnn(), &kOne, bdesc_.d, bias_ptr(params_), &kOne, ydesc_.d, y_.ptr()));
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.shape() != out_) throw std::invalid_argument("conv2d backward: dy " + dy.str());
        void* ws = ctx_.workspace(ws_bytes_);
        // dW += conv_bwd_filter(x, dy) (beta = 1 accumulates)
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx_.dnn(), &kOne, xdesc_.d, x.ptr(), ydesc_.d, dy.ptr(), cdesc_,
                                                   bwd_filter_, ws, ws_bytes_, &kOne, wdesc_, grads_));
        if (bias_)
            CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx_.dnn(), &kOne, ydesc_.d, dy.ptr(), &kOne, bdesc_.d,
                                                     bias_ptr(grads_)));
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(x);
        CUDNN_CHECK(cudnnConvolutionBackwardData(ctx_.dnn(), &kOne, wdesc_, params_, ydesc_.d, dy.ptr(), cdesc_,
                                                 bwd_data_, ws, ws_bytes_, &kZero, xdesc_.d, dx_.ptr()));
        return dx_;
    }

private:
    size_t weight_size() const { return static_cast<size_t>(cin_ / groups_) * k_ * k_ * cout_; }
    float* bias_ptr(float* base) const { return base + weight_size(); }

    // Descriptors and algorithms for batch size n, computed once per n (the shape is
    // otherwise fixed by configure()). The workspace is the largest need of the three.
    void plan(int n) {
        if (n == planned_n_) return;
        xdesc_.set(n, in_.c, in_.h, in_.w);
        ydesc_.set(n, out_.c, out_.h, out_.w);
        // cudnnFind* runs every algorithm (it allocates its own scratch memory); keep the
        // fastest one that succeeded. Fall back to the heuristics of Get*_v7.
        int got = 0;
        cudnnConvolutionFwdAlgoPerf_t f[8];
        if (cudnnFindConvolutionForwardAlgorithm(ctx_.dnn(), xdesc_.d, wdesc_, cdesc_, ydesc_.d, 8, &got, f) !=
                CUDNN_STATUS_SUCCESS || got == 0 || f[0].status != CUDNN_STATUS_SUCCESS)
            CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx_.dnn(), xdesc_.d, wdesc_, cdesc_, ydesc_.d, 8, &got, f));
        fwd_ = first_ok(f, got, "forward");
        cudnnConvolutionBwdDataAlgoPerf_t d[8];
        if (cudnnFindConvolutionBackwardDataAlgorithm(ctx_.dnn(), wdesc_, ydesc_.d, cdesc_, xdesc_.d, 8, &got, d) !=
                CUDNN_STATUS_SUCCESS || got == 0 || d[0].status != CUDNN_STATUS_SUCCESS)
            CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx_.dnn(), wdesc_, ydesc_.d, cdesc_, xdesc_.d, 8,
                                                                    &got, d));
        bwd_data_ = first_ok(d, got, "backward data");
        cudnnConvolutionBwdFilterAlgoPerf_t w[8];
        if (cudnnFindConvolutionBackwardFilterAlgorithm(ctx_.dnn(), xdesc_.d, ydesc_.d, cdesc_, wdesc_, 8, &got, w) !=
                CUDNN_STATUS_SUCCESS || got == 0 || w[0].status != CUDNN_STATUS_SUCCESS)
            CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx_.dnn(), xdesc_.d, ydesc_.d, cdesc_, wdesc_, 8,
                                                                      &got, w));
        bwd_filter_ = first_ok(w, got, "backward filter");
        size_t a = 0, b = 0, c = 0;
        CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(ctx_.dnn(), xdesc_.d, wdesc_, cdesc_, ydesc_.d, fwd_, &a));
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx_.dnn(), wdesc_, ydesc_.d, cdesc_, xdesc_.d,
                                                                 bwd_data_, &b));
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx_.dnn(), xdesc_.d, ydesc_.d, cdesc_, wdesc_,
                                                                   bwd_filter_, &c));
        ws_bytes_ = std::max(a, std::max(b, c));
        planned_n_ = n;
    }
    template <class Perf>
    auto first_ok(const Perf* p, int got, const char* what) -> decltype(p[0].algo) {
        for (int i = 0; i < got; ++i)
            if (p[i].status == CUDNN_STATUS_SUCCESS) return p[i].algo;
        throw std::runtime_error("tula-train: " + describe() + ": cuDNN offers no " + what + " algorithm for input " +
                                 in_.str());
    }

    GpuContext& ctx_;
    int cin_, cout_, k_, s_, p_, groups_;
    bool bias_;
    Shape in_, out_;
    cudnnFilterDescriptor_t wdesc_ = nullptr;
    cudnnConvolutionDescriptor_t cdesc_ = nullptr;
    TensorDesc xdesc_, ydesc_, bdesc_;
    int planned_n_ = -1;
    cudnnConvolutionFwdAlgo_t fwd_{};
    cudnnConvolutionBwdDataAlgo_t bwd_data_{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter_{};
    size_t ws_bytes_ = 0;
    const DevTensor* x_ = nullptr;
    DevTensor y_, dx_;
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
        CUBLAS_CHECK(cublasSgemm(ctx_.blas(), CUBLAS_OP_T, CUBLAS_OP_N, out_f_, x.n, in_f_, &kOne, params_, in_f_,
                                 x.ptr(), in_f_, &kZero, y_.ptr(), out_f_));
        add_row_bias(ctx_.stream(), y_.ptr(), bias(params_), x.n, out_f_);
        return y_;
    }
    const DevTensor& backward(const DevTensor& dy) override {
        const DevTensor& x = *x_;
        if (dy.n != x.n || dy.sample_size() != static_cast<size_t>(out_f_))
            throw std::invalid_argument("linear backward: dy " + dy.str());
        // dW (out, F) += G^T X  <=>  dW^T (F, out) += X^T (F, N) * G (N, out) [G^T col-major (out, N)]
        CUBLAS_CHECK(cublasSgemm(ctx_.blas(), CUBLAS_OP_N, CUBLAS_OP_T, in_f_, out_f_, x.n, &kOne, x.ptr(), in_f_,
                                 dy.ptr(), out_f_, &kOne, grads_, in_f_));
        add_col_sums(ctx_.stream(), dy.ptr(), bias(grads_), x.n, out_f_);
        if (!need_input_grad_) {
            dx_.resize(0, 0, 0, 0);
            return dx_;
        }
        dx_.resize_like(x);
        // dX (N, F) = G W  <=>  dX^T (F, N) = W^T (F, out) * G^T (out, N)
        CUBLAS_CHECK(cublasSgemm(ctx_.blas(), CUBLAS_OP_N, CUBLAS_OP_N, in_f_, x.n, out_f_, &kOne, params_, in_f_,
                                 dy.ptr(), out_f_, &kZero, dx_.ptr(), in_f_));
        return dx_;
    }

private:
    float* bias(float* base) const { return base + static_cast<size_t>(in_f_) * out_f_; }

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
