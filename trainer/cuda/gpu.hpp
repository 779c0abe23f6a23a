// tula-train CUDA backend: device memory, the GPU layer family, the model with fused
// device buffers, the loss, SGD and the per-tensor squared norms.
//
// Why a second layer family: tula::train::Layer (trainer/core/layers.hpp) passes host
// Tensors (std::vector<float>). A GPU layer must take and return DEVICE memory or every
// layer would copy its activations across PCIe twice per step. GpuLayer mirrors Layer
// one to one (configure, param_info, state_size, bind, init-free, forward, backward,
// need_input_grad) with DevTensor in place of Tensor. As in the CPU path the parameters,
// gradients and BN running statistics are not owned by the layers: GpuModel allocates ONE
// device buffer for all parameters, ONE for all gradients (one allreduce per step) and ONE
// for the state, in exactly the CPU Model's layout (layer order, param_info() order), so
// params can be copied between a CPU Model and a GpuModel with one memcpy and the CPU path
// serves as the oracle in tests/gpu.
//
// Libraries: cuDNN for convolution (forward, backward data, backward filter; algorithms
// chosen once per batch size with cudnnFind*, falling back to cudnnGet*_v7), batch norm
// and max pooling; cuBLAS for the fully connected layer; kernels written here for ReLU,
// bias add / bias gradient, softmax cross-entropy, the SGD update and per-tensor squared
// norms. One file per op family, each with its own kernels (conv.cu, norm.cu,
// activation.cu, pool.cu, linear.cu, loss.cu, blocks.cu; runtime.cu: device, context,
// model, SGD and tensor arithmetic; common.cuh: what they share). All work is queued on the
// context's one stream.
// Precision: float32 by default. A context created with Precision::Bf16 (tula-train
// --precision bf16) runs the convolutions and fully connected layers in bfloat16 with
// float32 accumulation (mixed precision, Micikevicius et al. 2018, "Mixed Precision
// Training", ICLR; bf16: Kalamkar et al. 2019, arXiv:1905.12322): activations between
// layers, master weights, gradients, the optimizer, batch norm (statistics included), the
// loss and softmax stay float32; see make_gpu_conv2d and make_gpu_linear. No loss scaling:
// bf16 has float32's 8-bit exponent (smallest normal 1.2e-38), so gradients that fit in
// float32 do not underflow in bf16 as they can in fp16 (smallest normal 6.1e-5).
//
// Errors: every CUDA / cuDNN / cuBLAS failure throws std::runtime_error ("tula-train: "
// prefix, file, line, the library's error string; see check.hpp); shape mismatches throw
// std::invalid_argument, as the CPU layers do.
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/layers.hpp"
#include "core/model.hpp"
#include "core/tensor.hpp"

namespace tula {
namespace train {
namespace cuda {

/// Number of usable CUDA devices; 0 when the runtime reports none or fails (no driver,
/// no device), in which case *why (if non-null) receives the runtime's error string.
/// Never throws.
int device_count(std::string* why);

/// An owning, grow-only block of device memory (cudaMalloc). reserve(bytes) reallocates
/// only when more is needed (old contents are NOT kept), so buffers resized every step
/// do not allocate in the steady state. Errors: std::runtime_error from cudaMalloc.
class DevMem {
public:
    DevMem() = default;
    ~DevMem();
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
    DevMem(DevMem&& o) noexcept : p_(o.p_), cap_(o.cap_) { o.p_ = nullptr; o.cap_ = 0; }
    /// Ensures at least `bytes` bytes; returns the pointer.
    void* reserve(size_t bytes);
    void* get() const { return p_; }
    size_t capacity() const { return cap_; }

private:
    void* p_ = nullptr;
    size_t cap_ = 0;
};

/// A float32 tensor (N, C, H, W), NCHW, in device memory. resize() keeps the allocation
/// when the tensor shrinks (values are not meaningful after a shape change).
struct DevTensor {
    int n = 0, c = 0, h = 0, w = 0;
    DevMem mem;

    void resize(int n_, int c_, int h_, int w_);
    void resize(int n_, const Shape& s) { resize(n_, s.c, s.h, s.w); }
    void resize_like(const DevTensor& o) { resize(o.n, o.c, o.h, o.w); }
    size_t size() const { return static_cast<size_t>(n) * c * h * w; }
    size_t sample_size() const { return static_cast<size_t>(c) * h * w; }
    Shape shape() const { return Shape{c, h, w}; }
    float* ptr() const { return static_cast<float*>(mem.get()); }
    std::string str() const;
    /// Copies a host tensor in (resizing), synchronously on the default stream.
    void upload(const Tensor& t);
    /// Copies to a host tensor (resizing it); waits for the device.
    void download(Tensor& t) const;
};

/// Arithmetic of the convolutions and fully connected layers created on a GpuContext.
/// Fp32: float32 throughout (TF32 convolutions when the context allows them). Bf16: mixed
/// precision, bfloat16 operands (8 significand bits, unit roundoff u = 2^-8) with float32
/// accumulation; everything else stays float32 (see the file comment).
enum class Precision { Fp32, Bf16 };

/// "fp32" or "bf16" (the spelling of tula-train --precision).
const char* precision_name(Precision p);
/// Parses "fp32" or "bf16". Errors: std::invalid_argument ("unknown precision ...; valid:
/// fp32, bf16") for anything else.
Precision parse_precision(const std::string& s);

/// The per-process GPU state: device, one stream, the cuDNN and cuBLAS handles bound to
/// it, and the ONE workspace shared by every cuDNN call (grown only when a layer needs
/// more, never shrunk). `tf32`: convolutions created on this context may use TF32 tensor
/// cores (cuDNN's CUDNN_DEFAULT_MATH; PyTorch's default, torch.backends.cudnn.allow_tf32 =
/// True); false keeps them strict fp32 (CUDNN_FMA_MATH), as the tests against the CPU
/// oracle need. cuBLAS GEMMs stay strict fp32 either way (PyTorch's default for matmul).
/// `precision`: Bf16 makes the convolutions and fully connected layers created on this
/// context compute in bfloat16 (`tf32` then has no effect on them); each convolution
/// direction (forward, backward data, backward filter) whose cuDNN bf16 algorithm is slower
/// than the TF32 one (cudnnFind's times, at planning) runs in TF32 instead, unless
/// conv_bf16_mask() fixes the choice (environment TULA_BF16_ONLY=1 at construction: all
/// bf16).
/// With TULA_GPU_LAYER_TIMES=1 in the environment each bf16 convolution prints its choice
/// to stderr when it plans a batch size.
/// Errors: std::runtime_error if the device or a handle cannot be created (e.g. no device:
/// call device_count() first).
class GpuContext {
public:
    explicit GpuContext(int device = 0, bool tf32 = false, Precision precision = Precision::Fp32);
    ~GpuContext();
    GpuContext(const GpuContext&) = delete;
    GpuContext& operator=(const GpuContext&) = delete;

    cudnnHandle_t dnn() const { return dnn_; }
    cublasHandle_t blas() const { return blas_; }
    cudaStream_t stream() const { return stream_; }
    /// The shared workspace, at least `bytes` bytes (pointer valid until the next call).
    void* workspace(size_t bytes) { return ws_.reserve(bytes > 0 ? bytes : 1); }
    /// Waits for all queued work.
    void sync() const;
    /// Whether convolutions may use TF32 tensor cores (see the class comment).
    bool tf32() const { return tf32_; }
    Precision precision() const { return precision_; }
    bool bf16() const { return precision_ == Precision::Bf16; }
    /// Bf16: -1 (default) lets each convolution pick bf16 or TF32 per direction by speed;
    /// otherwise bit 0 (forward), 1 (backward data), 2 (backward filter) set runs that
    /// direction in bf16 (if cuDNN has a bf16 algorithm), clear in TF32; 7 is bf16 only.
    /// Affects layers that plan a batch size after the call.
    int conv_bf16_mask() const { return conv_bf16_mask_; }
    void set_conv_bf16_mask(int m) { conv_bf16_mask_ = m; }
    /// Whether convolutions print their bf16 / TF32 choices (TULA_GPU_LAYER_TIMES).
    bool report_plans() const { return report_plans_; }

private:
    int device_;
    bool tf32_;
    Precision precision_;
    int conv_bf16_mask_ = -1;
    bool report_plans_ = false;
    cudnnHandle_t dnn_ = nullptr;
    cublasHandle_t blas_ = nullptr;
    cudaStream_t stream_ = nullptr;
    DevMem ws_;
};

/// The GPU layer interface: LayerOf (core/layers.hpp) with device tensors. Parameters and
/// gradients are device pointers into GpuModel's fused buffers; backward() ADDS into the
/// gradient slice. Initialization is done on the host by the CPU layers (same Rng
/// sequence) and copied in (GpuModel::upload_params), so both backends start from the
/// same weights for a seed.
using GpuLayer = LayerOf<DevTensor>;

/// Convolution, as make_conv2d (layers.hpp): weight (Cout, Cin/groups, k, k), bias (Cout,);
/// groups > 1 through cudnnSetConvolutionGroupCount (depthwise when groups = Cin = Cout).
/// cuDNN cross-correlation (CUDNN_CROSS_CORRELATION, which is what PyTorch and the CPU
/// path compute); algorithms for forward, backward data and backward filter are found once
/// per batch size (cudnnFind*Algorithm, fastest successful one; cudnnGet*_v7 if Find fails)
/// and their workspace comes from the context's shared workspace.
/// On a Bf16 context (cuDNN's PSEUDO_BFLOAT16_CONFIG: bf16 tensors, float32 compute type,
/// tensor-core math): forward rounds x and the weights to bf16 copies (round to nearest
/// even; the copy of x is kept for backward), convolves, and widens y to float32 before the
/// bias is added in float32; backward rounds dy, computes dW and dx in bf16 (float32
/// accumulation inside cuDNN, result rounded to bf16) and widens them: dW is added to the
/// float32 gradient, dx returned in float32; the bias gradient is summed from the float32
/// dy. A direction whose bf16 algorithm is slower than TF32 runs in TF32 on the float32
/// tensors instead (see GpuContext). Extra device memory: the bf16 copies (x, y, dy, dx, W,
/// dW) of each layer.
std::unique_ptr<GpuLayer> make_gpu_conv2d(GpuContext& ctx, int cin, int cout, int k, int stride, int pad, bool bias,
                                          int groups = 1);
/// Batch norm, as make_batchnorm2d: cudnnBatchNormalization* in CUDNN_BATCHNORM_SPATIAL
/// mode (training: CUDNN_BATCHNORM_SPATIAL_PERSISTENT unless the environment has
/// TULA_BN_PERSISTENT=0), which keeps the unbiased variance in the running estimate as
/// PyTorch does. eps
/// must be >= CUDNN_BN_MIN_EPSILON (1e-5). backward() after an evaluation-mode forward
/// throws std::logic_error (cuDNN's backward is the training-mode one).
std::unique_ptr<GpuLayer> make_gpu_batchnorm2d(GpuContext& ctx, int channels, float momentum = 0.1f,
                                               float eps = 1e-5f);
/// ReLU (hand-written kernels): y = max(x, 0), dx = dy where y > 0.
std::unique_ptr<GpuLayer> make_gpu_relu(GpuContext& ctx);
/// Max pooling k x k, stride `stride` (0: k), no padding (cuDNN,
/// CUDNN_POOLING_MAX_DETERMINISTIC); output floor((H - k)/stride) + 1, likewise W.
std::unique_ptr<GpuLayer> make_gpu_maxpool2d(GpuContext& ctx, int k, int stride = 0);
/// Hard swish / hard sigmoid (hand-written kernels), as make_hardswish / make_hardsigmoid.
std::unique_ptr<GpuLayer> make_gpu_hardswish(GpuContext& ctx);
std::unique_ptr<GpuLayer> make_gpu_hardsigmoid(GpuContext& ctx);
/// Inverted dropout, as make_dropout: in training y = x * m / (1 - p), m ~ Bernoulli(1 - p)
/// drawn by a counter-based hash of (seed, step, index) (SplitMix64 finalizer, Steele et
/// al. 2014), so masks differ from the CPU layer's; identity in evaluation.
/// Errors: std::invalid_argument unless 0 <= p < 1.
std::unique_ptr<GpuLayer> make_gpu_dropout(GpuContext& ctx, double p, uint64_t seed);
/// Adaptive average pooling to oh x ow with PyTorch's windows, as make_adaptive_avgpool2d
/// (hand-written kernels; backward gathers per input value, so it is deterministic).
std::unique_ptr<GpuLayer> make_gpu_adaptive_avgpool2d(GpuContext& ctx, int oh, int ow);
/// A chain of GPU layers used as one layer, as make_sequential (parameters and state are
/// the children's, concatenated in order). Errors: std::invalid_argument when empty.
std::unique_ptr<GpuLayer> make_gpu_sequential(std::vector<std::unique_ptr<GpuLayer>> layers, std::string name);
/// y = body(x) + shortcut(x) (identity when shortcut is null), as make_residual (He et al.
/// 2016, eq. 1-2). Errors: std::invalid_argument when the shapes differ.
std::unique_ptr<GpuLayer> make_gpu_residual(GpuContext& ctx, std::unique_ptr<GpuLayer> body,
                                            std::unique_ptr<GpuLayer> shortcut);
/// Squeeze-and-excitation, as make_squeeze_excitation (Hu et al. 2018, eq. 2-4):
/// s = hardsigmoid(W2 relu(W1 gap(x) + b1) + b2), y = x * s per channel.
std::unique_ptr<GpuLayer> make_gpu_squeeze_excitation(GpuContext& ctx, int channels, int squeeze);
/// Fully connected, as make_linear: weight (out, F), bias (out,), row-major; cuBLAS SGEMM
/// on the column-major views (Y^T = W X^T, dW^T += X^T G, dX^T = W^T G^T). On a Bf16
/// context the three GEMMs are cublasGemmEx on the same float32 operands with
/// CUBLAS_COMPUTE_32F_FAST_16BF (cuBLAS rounds the operands to bf16, multiplies on tensor
/// cores and accumulates and writes float32).
std::unique_ptr<GpuLayer> make_gpu_linear(GpuContext& ctx, int in_features, int out_features);

/// Softmax cross-entropy, mean over the batch, as SoftmaxCrossEntropy (layers.hpp); one
/// thread per example, max-subtracted log-sum-exp.
class GpuSoftmaxCrossEntropy {
public:
    explicit GpuSoftmaxCrossEntropy(GpuContext& ctx) : ctx_(ctx) {}
    /// logits (N, K) on the device, labels (N,) on the HOST in [0, K). Returns the mean
    /// loss (waits for the device); adds the count of arg-max hits to *correct if non-null.
    /// Errors: std::invalid_argument for a label out of range or a size mismatch.
    double forward(const DevTensor& logits, const int* labels, int n, int64_t* correct);
    /// dL/dz = (softmax(z) - onehot(y)) / N of the last forward, (N, K, 1, 1).
    const DevTensor& backward();

private:
    GpuContext& ctx_;
    DevTensor prob_, dz_;
    DevMem labels_, loss_, hits_;
    std::vector<double> loss_host_;
    std::vector<int> hits_host_;
};

/// A chain of GpuLayers with fused device buffers laid out exactly as Model's (see
/// model.hpp). Errors: std::invalid_argument if the layers do not fit the input shape.
class GpuModel {
public:
    GpuModel(GpuContext& ctx, std::string name, const Shape& input, std::vector<std::unique_ptr<GpuLayer>> layers);
    ~GpuModel();
    GpuModel(const GpuModel&) = delete;
    GpuModel& operator=(const GpuModel&) = delete;

    const std::string& name() const { return name_; }
    GpuContext& context() const { return ctx_; }
    const std::vector<ParamSegment>& segments() const { return segments_; }
    size_t num_params() const { return n_params_; }
    size_t state_size() const { return n_state_; }
    float* params() const { return static_cast<float*>(params_.get()); }  ///< device
    float* grads() const { return static_cast<float*>(grads_.get()); }    ///< device
    float* state() const { return static_cast<float*>(state_.get()); }    ///< device
    const std::vector<std::unique_ptr<GpuLayer>>& layers() const { return layers_; }

    /// Copies num_params() parameter and state_size() state values from the host (e.g. a
    /// CPU Model after init(seed)). Errors: std::invalid_argument on a size mismatch.
    void upload(const float* params, size_t n_params, const float* state, size_t n_state);
    /// Copies parameters, gradients and state to host vectors (resized); waits.
    void download(std::vector<float>* params, std::vector<float>* grads, std::vector<float>* state) const;
    void zero_grad();
    const DevTensor& forward(const DevTensor& x, bool train);
    void backward(const DevTensor& dlogits);
    /// Per-layer timing (for finding slow layers): when on, forward() and backward() record
    /// CUDA events around every top-level layer and add the elapsed milliseconds to
    /// layer_ms() (forward, backward) after waiting for them. Off by default (no events).
    void set_layer_timing(bool on);
    /// Accumulated (forward ms, backward ms) per top-level layer since timing was turned on.
    const std::vector<std::pair<double, double>>& layer_ms() const { return layer_ms_; }

private:
    void time_layers(bool backward);
    bool timing_ = false;
    std::vector<cudaEvent_t> events_;
    std::vector<std::pair<double, double>> layer_ms_;
    GpuContext& ctx_;
    std::string name_;
    std::vector<std::unique_ptr<GpuLayer>> layers_;
    std::vector<ParamSegment> segments_;
    size_t n_params_ = 0, n_state_ = 0;
    DevMem params_, grads_, state_;
};

/// The GPU twin of build_model() (model.hpp): model `name` of the zoo for examples of shape
/// `input` (C, H, W) and `classes` outputs, built from the same description (model_zoo.hpp),
/// so its fused buffers have the CPU Model's layout. `seed` seeds the dropout masks.
/// Errors: std::invalid_argument as build_model().
std::unique_ptr<GpuModel> build_gpu_model(GpuContext& ctx, const std::string& name, const Shape& input, int classes,
                                          uint64_t seed = 1);
/// build_gpu_model for Fashion-MNIST examples (1, 28, 28) and 10 classes.
std::unique_ptr<GpuModel> build_gpu_model(GpuContext& ctx, const std::string& name);

/// SGD with momentum and weight decay over a GpuModel, the same rule as Optimizer with OptimKind::Sgd (optim.hpp,
/// PyTorch's torch.optim.SGD): g' = g + wd*w (segments with decay), v = m*v + g',
/// w -= lr*v; one fused kernel launch per parameter segment.
class GpuSgd {
public:
    GpuSgd(GpuModel& model, double momentum, double weight_decay);
    void step(double lr);
    /// The momentum buffer copied to the host, (num_params,).
    std::vector<float> velocity() const;

private:
    GpuModel& m_;
    float momentum_, wd_;
    DevMem v_;
};

// ---- kernels (in the op family's .cu); pointers are device pointers, launches on `s` -

/// y[i] = max(x[i], 0), i < n.
void relu_forward(cudaStream_t s, const float* x, float* y, size_t n);
/// dx[i] = y[i] > 0 ? dy[i] : 0.
void relu_backward(cudaStream_t s, const float* y, const float* dy, float* dx, size_t n);
/// y (rows, cols) row-major: y[r][c] += b[c].
void add_row_bias(cudaStream_t s, float* y, const float* b, int rows, int cols);
/// db[c] += sum_r g[r][c], g (rows, cols) row-major (sums in double).
void add_col_sums(cudaStream_t s, const float* g, float* db, int rows, int cols);
/// For each row i of z (n, k): prob = softmax(z_i), loss[i] = -log prob[label_i] (double),
/// hit[i] = (arg-max == label_i); labels must be in [0, k).
void softmax_xent_forward(cudaStream_t s, const float* z, const int* labels, float* prob, double* loss, int* hit,
                          int n, int k);
/// dz = (prob - onehot(label)) / n.
void softmax_xent_backward(cudaStream_t s, const float* prob, const int* labels, float* dz, int n, int k);
/// v = m*v + (g + wd*w); w -= lr*v, over n values.
void sgd_momentum_update(cudaStream_t s, float* w, const float* g, float* v, size_t n, float lr, float momentum,
                         float wd);
/// out[j] = sum of x[offset_j .. offset_j + size_j)^2 in double, for each segment j (the
/// per-tensor squared norms for LARS / AGS trust ratios and the gradient noise scale,
/// McCandlish et al. 2018). offsets/sizes/out are device arrays of nseg entries; one block
/// per segment.
void segment_sq_norms(cudaStream_t s, const float* x, const size_t* offsets, const size_t* sizes, int nseg,
                      double* out);
/// y[i] = a[i] + b[i], i < n (residual sums and their gradients).
void add_tensors(cudaStream_t s, const float* a, const float* b, float* y, size_t n);
/// Hard swish (swish = true) or hard sigmoid forward, y = x relu6(x + 3)/6 or relu6(x + 3)/6.
void hard_act_forward(cudaStream_t s, const float* x, float* y, size_t n, bool swish);
/// Their backward from the input x: dx = dy * (swish ? 0 | (2x + 3)/6 | 1 : 1/6 on (-3, 3)).
void hard_act_backward(cudaStream_t s, const float* x, const float* dy, float* dx, size_t n, bool swish);
/// Adaptive average pooling of planes (N*C planes of H x W) to oh x ow, PyTorch's windows
/// [floor(i H/oh), ceil((i+1) H/oh)); backward gathers dy/|window| over the windows holding
/// each input value.
void adaptive_avgpool_forward(cudaStream_t s, const float* x, float* y, int planes, int h, int w, int oh, int ow);
void adaptive_avgpool_backward(cudaStream_t s, const float* dy, float* dx, int planes, int h, int w, int oh, int ow);
/// Dropout: mask[i] = (hash(seed, i) >= p ? 1/(1-p) : 0), y = x * mask; backward dx = dy * mask.
void dropout_forward(cudaStream_t s, const float* x, float* y, float* mask, size_t n, float p, uint64_t seed);
void mul_tensors(cudaStream_t s, const float* a, const float* b, float* y, size_t n);
/// The trust-ratio momentum update of AGS and LARS (optim.hpp), all segments in ONE launch:
/// for element i of segment k, v = momentum v + seg_scale[k] (g + seg_wd[k] w), w -= lr v.
/// Block j updates [block_begin[j], block_end[j]) of segment block_seg[j]; all arrays are
/// device arrays (nblocks entries; seg_scale and seg_wd one per segment).
void scaled_momentum_update(cudaStream_t s, float* w, const float* g, float* v, const int* block_seg,
                            const size_t* block_begin, const size_t* block_end, int nblocks, const float* seg_scale,
                            const float* seg_wd, float lr, float momentum);
/// y[i] = a * x[i] + b * y[i], i < n (combining micro-batch gradients); with b = 0, y[i] = a * x[i]
/// and y's old values are not read (they may be uninitialised, NaN included).
void axpby(cudaStream_t s, const float* x, float a, float* y, float b, size_t n);
/// Per-channel scaling: y[p][i] = x[p][i] * scale[p] over `planes` planes of `hw` values.
void channel_scale_forward(cudaStream_t s, const float* x, const float* scale, float* y, int planes, int hw);
/// out[p] = sum_i dy[p][i] * x[p][i] (one warp per plane, float accumulation in a fixed order).
void channel_dot(cudaStream_t s, const float* dy, const float* x, float* out, int planes, int hw);
/// dx[p][i] = dy[p][i] * scale[p] + g[p][i].
void channel_scale_backward(cudaStream_t s, const float* dy, const float* scale, const float* g, float* dx,
                            int planes, int hw);
/// y[i] = x[i] rounded to bfloat16 (round to nearest even, __float2bfloat16_rn), i < n.
void float_to_bf16(cudaStream_t s, const float* x, __nv_bfloat16* y, size_t n);
/// y[i] = float(x[i]) (exact), or y[i] += float(x[i]) when `accumulate`, i < n.
void bf16_to_float(cudaStream_t s, const __nv_bfloat16* x, float* y, size_t n, bool accumulate);
/// Host wrapper: squared norm of each ParamSegment of the device buffer x; waits.
std::vector<double> sq_norms(GpuContext& ctx, const float* x, const std::vector<ParamSegment>& segs);

}  // namespace cuda
}  // namespace train
}  // namespace tula
