// tula-train CUDA backend: the device, memory, the context (stream, cuDNN and cuBLAS
// handles, precision), the model with fused device buffers, SGD, and the tensor arithmetic
// kernels the optimizers and composites use. See gpu.hpp.
#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <cstdlib>

#include "common.cuh"

namespace tula {
namespace train {
namespace cuda {
namespace {

__global__ void k_sgd(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v, size_t n, float lr,
                      float mom, float wd) {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<size_t>(gridDim.x) * blockDim.x) {
        const float d = g[i] + wd * w[i];
        const float vi = mom * v[i] + d;
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

__global__ void k_seg_sq_norms(const float* __restrict__ x, const size_t* __restrict__ off,
                               const size_t* __restrict__ size, double* __restrict__ out) {
    __shared__ double part[kThreads];
    const size_t o = off[blockIdx.x], n = size[blockIdx.x];
    double s = 0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = x[o + i];
        s += v * v;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int step = blockDim.x / 2; step > 0; step /= 2) {
        if (static_cast<int>(threadIdx.x) < step) part[threadIdx.x] += part[threadIdx.x + step];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}

__global__ void k_add(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void k_axpby(const float* __restrict__ x, float a, float* __restrict__ y, float b, size_t n) {
    // b = 0 overwrites y without reading it (the BLAS convention for beta = 0): y may be a
    // fresh buffer whose old bits are NaN, and 0 * NaN is NaN
    if (b == 0.0f) {
        TULA_GRID_STRIDE(i, n) y[i] = a * x[i];
    } else {
        TULA_GRID_STRIDE(i, n) y[i] = a * x[i] + b * y[i];
    }
}

// One block per chunk of one segment (block_seg/begin/end), so a single launch updates
// every segment with its own factor and weight decay.
__global__ void k_scaled_momentum(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ v,
                                  const int* __restrict__ bseg, const size_t* __restrict__ bbeg,
                                  const size_t* __restrict__ bend, const float* __restrict__ scale,
                                  const float* __restrict__ wd, float lr, float mom) {
    const int k = bseg[blockIdx.x];
    const float s = scale[k], d = wd[k];
    for (size_t i = bbeg[blockIdx.x] + threadIdx.x; i < bend[blockIdx.x]; i += blockDim.x) {
        const float vi = mom * v[i] + s * (g[i] + d * w[i]);
        v[i] = vi;
        w[i] -= lr * vi;
    }
}

__global__ void k_mul(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = a[i] * b[i];
}

__global__ void k_to_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, size_t n) {
    TULA_GRID_STRIDE(i, n) y[i] = __float2bfloat16_rn(x[i]);
}

__global__ void k_from_bf16(const __nv_bfloat16* __restrict__ x, float* __restrict__ y, size_t n, bool acc) {
    TULA_GRID_STRIDE(i, n) y[i] = acc ? y[i] + __bfloat162float(x[i]) : __bfloat162float(x[i]);
}

}  // namespace

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

void sgd_momentum_update(cudaStream_t s, float* w, const float* g, float* v, size_t n, float lr, float momentum,
                         float wd) {
    if (n == 0) return;
    k_sgd<<<blocks_for(n), kThreads, 0, s>>>(w, g, v, n, lr, momentum, wd);
    CUDA_CHECK_LAUNCH();
}

void segment_sq_norms(cudaStream_t s, const float* x, const size_t* offsets, const size_t* sizes, int nseg,
                      double* out) {
    if (nseg <= 0) return;
    k_seg_sq_norms<<<nseg, kThreads, 0, s>>>(x, offsets, sizes, out);
    CUDA_CHECK_LAUNCH();
}

void add_tensors(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
    if (n == 0) return;
    k_add<<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n);
    CUDA_CHECK_LAUNCH();
}

void axpby(cudaStream_t s, const float* x, float a, float* y, float b, size_t n) {
    if (n == 0) return;
    k_axpby<<<blocks_for(n), kThreads, 0, s>>>(x, a, y, b, n);
    CUDA_CHECK_LAUNCH();
}

void scaled_momentum_update(cudaStream_t s, float* w, const float* g, float* v, const int* block_seg,
                            const size_t* block_begin, const size_t* block_end, int nblocks, const float* seg_scale,
                            const float* seg_wd, float lr, float momentum) {
    if (nblocks <= 0) return;
    k_scaled_momentum<<<nblocks, kThreads, 0, s>>>(w, g, v, block_seg, block_begin, block_end, seg_scale, seg_wd, lr,
                                                   momentum);
    CUDA_CHECK_LAUNCH();
}

void mul_tensors(cudaStream_t s, const float* a, const float* b, float* y, size_t n) {
    if (n == 0) return;
    k_mul<<<blocks_for(n), kThreads, 0, s>>>(a, b, y, n);
    CUDA_CHECK_LAUNCH();
}

void float_to_bf16(cudaStream_t s, const float* x, __nv_bfloat16* y, size_t n) {
    if (n == 0) return;
    k_to_bf16<<<blocks_for(n), kThreads, 0, s>>>(x, y, n);
    CUDA_CHECK_LAUNCH();
}

void bf16_to_float(cudaStream_t s, const __nv_bfloat16* x, float* y, size_t n, bool accumulate) {
    if (n == 0) return;
    k_from_bf16<<<blocks_for(n), kThreads, 0, s>>>(x, y, n, accumulate);
    CUDA_CHECK_LAUNCH();
}

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
