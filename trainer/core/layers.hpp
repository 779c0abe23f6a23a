// tula-train: the layer interface and the factories of the CPU layers (trainer/cpu/).
//
// A Layer maps a batch x of shape (N, C, H, W) to y (forward) and, given dL/dy, returns
// dL/dx and ADDS dL/dparams to its gradient buffer (backward). Parameters and gradients
// are not owned by the layer: the Model allocates ONE contiguous parameter buffer and ONE
// gradient buffer for all layers (so that data parallelism needs one allreduce per step)
// and hands each layer its slices through bind(). Layers own their outputs and scratch
// buffers, which are reused from step to step (no allocation in the steady state).
//
// The CPU implementations (trainer/cpu/, one file per op family) use Eigen (Eigen::Map over
// the raw buffers, no copies). The GPU path (trainer/cuda/) has its own layer family with the
// same parameter layout; tests/gpu checks it against these.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "core/tensor.hpp"

namespace tula {
namespace train {

/// One parameter tensor of a layer, as the Model lays it out in the fused buffer.
struct ParamInfo {
    std::string name;   ///< "weight", "bias", "gamma", "beta"
    size_t size = 0;    ///< number of float32 values
    bool decay = true;  ///< whether weight decay applies (false for biases and BN)
};

/// A non-owning view of float32 values.
struct FloatSpan {
    float* data = nullptr;
    size_t size = 0;
};

/// The layer interface of both backends over a tensor type T (Tensor on the CPU, DevTensor
/// on the GPU: trainer/cuda/gpu.hpp's GpuLayer). Not copyable; owned by a Model through
/// unique_ptr.
template <class T>
class LayerOf {
public:
    virtual ~LayerOf() = default;
    LayerOf() = default;
    LayerOf(const LayerOf&) = delete;
    LayerOf& operator=(const LayerOf&) = delete;

    /// Short description, e.g. "conv5x5(1->6, pad 2)".
    virtual std::string describe() const = 0;
    /// Output shape for one example of shape `in`. Also fixes the layer's input shape.
    /// Errors: std::invalid_argument if `in` does not fit the layer.
    virtual Shape configure(const Shape& in) = 0;
    /// The layer's trainable parameter tensors, in the order of its slice of the buffer.
    virtual std::vector<ParamInfo> param_info() const { return {}; }
    /// Number of non-trainable float32 state values (BN running mean and variance).
    virtual size_t state_size() const { return 0; }
    /// Floats of forward outputs one example leaves in the layer for backward: its output
    /// (C*H*W of configure()'s result), plus a composite's inner outputs; 0 before configure().
    virtual size_t activation_floats() const { return 0; }
    /// Gives the layer its slices of the fused buffers (device pointers on the GPU): `params`
    /// and `grads` hold the sum of param_info() sizes, `state` holds state_size() values.
    /// Pointers stay valid for the layer's lifetime.
    virtual void bind(float* params, float* grads, float* state) {}
    /// y = layer(x). x: (N, in.c, in.h, in.w) as configured. `train` selects training
    /// behaviour (BN batch statistics). The reference stays valid until the next forward.
    /// x must stay alive and unchanged until backward() (the layer keeps a pointer).
    virtual const T& forward(const T& x, bool train) = 0;
    /// Given dy = dL/dy (shape of y), adds dL/dparams into the gradient slice and returns
    /// dL/dx (shape of x); when need_input_grad() is false the returned tensor is empty.
    virtual const T& backward(const T& dy) = 0;

    /// The first layer of a network does not need dL/dx (it is the data); skipping it saves
    /// the col2im of the first convolution.
    void set_need_input_grad(bool v) { need_input_grad_ = v; }
    bool need_input_grad() const { return need_input_grad_; }

protected:
    bool need_input_grad_ = true;
    float* params_ = nullptr;
    float* grads_ = nullptr;
    size_t n_params_ = 0;
};

/// The CPU layer: LayerOf<Tensor> that also initializes its parameters on the host and
/// keeps its own random generators' state for checkpoints.
class Layer : public LayerOf<Tensor> {
public:
    /// Initializes parameters and state from `rng` (see each layer for the rule).
    virtual void init(Rng& rng) {}
    /// Appends the state of the layer's own random generators (dropout; Rng::state()),
    /// children first to last; layers without one append nothing. For checkpoints.
    virtual void save_rng(std::vector<std::string>& out) const {}
    /// Restores what save_rng appended, reading from in[pos] on and advancing pos.
    /// Errors: std::invalid_argument when in runs short or a state does not parse.
    virtual void load_rng(const std::vector<std::string>& in, size_t& pos) {}
    /// Views of the parameter and gradient slices (empty for parameter-free layers).
    FloatSpan params() const { return {params_, n_params_}; }
    FloatSpan grads() const { return {grads_, n_params_}; }
};

/// 2-D convolution, square kernel k, stride s, zero padding p, optional bias.
/// Weight (Cout, Cin, k, k) and bias (Cout,), PyTorch's layout. Output size
/// Ho = (H + 2p - k)/s + 1 (floor), likewise Wo.
/// Forward and backward via im2col + GEMM (Chellapilla et al. 2006):
///   Y_n (Cout, Ho*Wo) = W (Cout, Cin*k*k) * col(x_n) (Cin*k*k, Ho*Wo) + b,
///   dW += dY_n col(x_n)^T,  db += rowsum(dY_n),  dx_n = col2im(W^T dY_n).
/// Init: He (Kaiming) normal, std = sqrt(2 / (Cin*k*k)) (He et al. 2015, eq. 10);
/// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)) as PyTorch's default.
/// groups > 1: grouped convolution (Krizhevsky et al. 2012); groups = cin = cout is the
/// depthwise convolution of MobileNets (Howard et al. 2017). Weight (Cout, Cin/groups, k, k),
/// He init with fan_in (Cin/groups)*k*k. Errors: std::invalid_argument when groups does not
/// divide cin and cout, or a size is not positive.
std::unique_ptr<Layer> make_conv2d(int cin, int cout, int k, int stride, int pad, bool bias,
                                   int groups = 1);

/// Batch normalization over (N, H, W) per channel (Ioffe & Szegedy 2015, Algorithm 1),
/// eps 1e-5. Training: normalizes with the batch mean and biased variance and updates the
/// running statistics r <- (1 - momentum) r + momentum * stat, with the unbiased variance
/// (PyTorch's convention), momentum 0.1. Evaluation: normalizes with the running statistics.
/// Parameters gamma (C,) = 1 and beta (C,) = 0 at init, no weight decay; state: running
/// mean (C,) = 0 and running variance (C,) = 1.
std::unique_ptr<Layer> make_batchnorm2d(int channels, float momentum = 0.1f, float eps = 1e-5f);

/// Rectified linear unit, y = max(x, 0); dx = dy where y > 0.
std::unique_ptr<Layer> make_relu();

/// Max pooling with a k x k window and stride k (k = 2 in the models); output floor(H/k)
/// x floor(W/k). Backward routes dy to the (first) maximal input of each window.
/// stride > 0 and != k: window k, that stride, no padding, output floor((H-k)/stride)+1
/// (PyTorch's MaxPool2d(k, stride)); e.g. AlexNet's 3/2 overlapping pooling.
std::unique_ptr<Layer> make_maxpool2d(int k, int stride = 0);

/// Adaptive average pooling to oh x ow (PyTorch's AdaptiveAvgPool2d): output cell (i, j)
/// averages input rows [floor(i*H/oh), ceil((i+1)*H/oh)) and likewise columns; oh = ow = 1
/// is global average pooling (its output (C, 1, 1) feeds a linear layer). Smaller inputs are
/// replicated (H = 1, oh = 7 copies the value), as PyTorch does.
std::unique_ptr<Layer> make_adaptive_avgpool2d(int oh, int ow);
/// Global average pooling, (C, H, W) -> (C, 1, 1); make_adaptive_avgpool2d(1, 1).
std::unique_ptr<Layer> make_global_avgpool();

/// Dropout (Srivastava et al. 2014), inverted: in training y = x * m / (1 - p) with
/// m ~ Bernoulli(1 - p) per value (the layer's own generator, seeded from init()'s Rng);
/// in evaluation y = x. dx = dy * m / (1 - p). Errors: std::invalid_argument unless 0 <= p < 1.
std::unique_ptr<Layer> make_dropout(double p);

/// Hard sigmoid (Howard et al. 2019, MobileNetV3, eq. 1 ingredients; PyTorch's Hardsigmoid):
/// y = relu6(x + 3) / 6; dy/dx = 1/6 on (-3, 3), else 0.
std::unique_ptr<Layer> make_hardsigmoid();
/// Hard swish (Howard et al. 2019, MobileNetV3): y = x * relu6(x + 3) / 6;
/// dy/dx = 0 for x < -3, (2x + 3)/6 for -3 <= x <= 3, 1 for x > 3 (PyTorch's convention).
std::unique_ptr<Layer> make_hardswish();

/// An ordered chain of layers used as one layer (a block of a model): its parameters and
/// state are its children's, concatenated in order. Errors: std::invalid_argument when
/// empty or when a child does not fit its predecessor's output.
std::unique_ptr<Layer> make_sequential(std::vector<std::unique_ptr<Layer>> layers, std::string name = "seq");

/// Residual connection (He et al. 2016, eq. 1-2): y = body(x) + shortcut(x), with the
/// identity when `shortcut` is null (then body must keep the shape). Both must produce the
/// same shape. dx = dbody/dx^T dy + dshortcut/dx^T dy. No activation after the sum (add a
/// ReLU after the block for ResNet's basic block).
std::unique_ptr<Layer> make_residual(std::unique_ptr<Layer> body, std::unique_ptr<Layer> shortcut);

/// Squeeze-and-excitation (Hu et al. 2018, eq. 2-4) as in torchvision's MobileNetV3:
/// s = hardsigmoid(W2 relu(W1 gap(x) + b1) + b2) (per example, C values), y = x * s
/// (broadcast over H, W). W1 (squeeze, C) + b1 and W2 (C, squeeze) + b2: torchvision's
/// 1x1 convolutions with bias, same parameter count.
std::unique_ptr<Layer> make_squeeze_excitation(int channels, int squeeze);

/// Fully connected layer on the flattened example: x (N, F) with F = C*H*W of the input,
/// y (N, out) = x W^T + b; weight (out, F), bias (out,), PyTorch's layout.
/// Init: PyTorch's default, kaiming_uniform(a = sqrt(5)), which is
/// U(-1/sqrt(F), 1/sqrt(F)) for the weight, and the same bound for the bias.
std::unique_ptr<Layer> make_linear(int in_features, int out_features);

/// Softmax cross-entropy loss with integer labels, mean over the batch:
///   L = -(1/N) sum_i log softmax(z_i)[y_i],  dL/dz_i = (softmax(z_i) - onehot(y_i)) / N.
/// Computed with the max-subtracted log-sum-exp for stability.
class SoftmaxCrossEntropy {
public:
    /// logits (N, K) (any (N, K, 1, 1) tensor), labels (N,) in [0, K). Returns the mean
    /// loss; counts the examples whose arg-max equals the label into *correct (if
    /// non-null); keeps softmax(z) for backward(). Errors: std::invalid_argument on a
    /// label out of range or a size mismatch.
    double forward(const Tensor& logits, const int* labels, int n, int64_t* correct);
    /// dL/dz of the last forward(), shape (N, K, 1, 1).
    const Tensor& backward();
    /// Label smoothing (Szegedy et al. 2016, sec. 7; PyTorch's label_smoothing): the target
    /// becomes q = (1 - eps) onehot(y) + eps/K, L = -(1/N) sum_i sum_j q_ij log p_ij,
    /// dL/dz_i = (p_i - q_i)/N. eps = 0 (the default) is plain cross-entropy.
    /// Errors: std::invalid_argument unless 0 <= eps < 1.
    void set_label_smoothing(float eps) {
        if (!(eps >= 0.0f && eps < 1.0f)) throw std::invalid_argument("label smoothing must be in [0, 1)");
        smoothing_ = eps;
    }
    float label_smoothing() const { return smoothing_; }

private:
    float smoothing_ = 0.0f;
    Tensor prob_, dz_;
    std::vector<int> labels_;
};

}  // namespace train
}  // namespace tula
