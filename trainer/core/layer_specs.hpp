// tula-train: the configuration and parameter layout of the leaf layers whose CPU
// (trainer/cpu/) and GPU (trainer/cuda/) implementations must agree, written once. A layer's
// parameters are laid out in the Model's fused buffers in param_info() order (core/layers.hpp),
// and CPU and GPU models exchange those buffers with one copy, so both families take their
// names, shapes, output shapes and parameter lists from here.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/layers.hpp"

namespace tula {
namespace train {
namespace spec {

/// Fully connected layer, in_f -> out_f features. Errors: std::invalid_argument unless both
/// are positive.
inline void check_linear(int in_f, int out_f) {
    if (in_f <= 0 || out_f <= 0) throw std::invalid_argument("linear: features must be positive");
}
/// "fc(IN->OUT)".
inline std::string linear_name(int in_f, int out_f) {
    return "fc(" + std::to_string(in_f) + "->" + std::to_string(out_f) + ")";
}
/// The output shape (out_f, 1, 1) for an example of shape `in` (C, H, W) with C*H*W = in_f.
/// Errors: std::invalid_argument naming the layer otherwise.
inline Shape linear_output(int in_f, int out_f, const Shape& in) {
    if (in.size() != static_cast<size_t>(in_f))
        throw std::invalid_argument(linear_name(in_f, out_f) + ": input " + in.str() + " has " +
                                    std::to_string(in.size()) + " features");
    return Shape{out_f, 1, 1};
}
/// weight (out_f, in_f) with weight decay, bias (out_f,) without (PyTorch's layout).
inline std::vector<ParamInfo> linear_params(int in_f, int out_f) {
    return {{"weight", static_cast<size_t>(in_f) * out_f, true}, {"bias", static_cast<size_t>(out_f), false}};
}

/// Batch normalization over `c` channels. Errors: std::invalid_argument unless c > 0.
inline void check_batchnorm(int c) {
    if (c <= 0) throw std::invalid_argument("batchnorm2d: channels must be positive");
}
/// "batchnorm(C)".
inline std::string batchnorm_name(int c) { return "batchnorm(" + std::to_string(c) + ")"; }
/// The output shape (= `in`). Errors: std::invalid_argument when in.c != c.
inline Shape batchnorm_output(int c, const Shape& in) {
    if (in.c != c) throw std::invalid_argument(batchnorm_name(c) + ": input has " + std::to_string(in.c) + " channels");
    return in;
}
/// gamma (c,) and beta (c,), neither decayed.
inline std::vector<ParamInfo> batchnorm_params(int c) {
    return {{"gamma", static_cast<size_t>(c), false}, {"beta", static_cast<size_t>(c), false}};
}
/// The running mean (c,) then the running variance (c,): 2c floats of state.
inline size_t batchnorm_state_size(int c) { return 2 * static_cast<size_t>(c); }

/// Convolution cin -> cout, k x k kernel, stride s, padding p, `groups` groups (groups = cin =
/// cout: depthwise), with or without bias. Errors: std::invalid_argument unless the sizes
/// are positive (padding >= 0) and groups divides cin and cout.
inline void check_conv(int cin, int cout, int k, int s, int p, int groups) {
    if (cin <= 0 || cout <= 0 || k <= 0 || s <= 0 || p < 0 || groups <= 0)
        throw std::invalid_argument("conv2d: channels, kernel, stride and groups must be positive, padding >= 0");
    if (cin % groups != 0 || cout % groups != 0)
        throw std::invalid_argument("conv2d: groups (" + std::to_string(groups) + ") must divide the input (" +
                                    std::to_string(cin) + ") and output (" + std::to_string(cout) + ") channels");
}
/// "convKxK(CIN->COUT[, stride S][, pad P][, depthwise | , groups G][, no bias])".
inline std::string conv_name(int cin, int cout, int k, int s, int p, int groups, bool bias) {
    std::string d = "conv" + std::to_string(k) + "x" + std::to_string(k) + "(" + std::to_string(cin) + "->" +
                    std::to_string(cout);
    if (s != 1) d += ", stride " + std::to_string(s);
    if (p != 0) d += ", pad " + std::to_string(p);
    if (groups != 1) d += (groups == cin ? ", depthwise" : ", groups " + std::to_string(groups));
    if (!bias) d += ", no bias";
    return d + ")";
}
/// The output shape (cout, (H + 2p - k)/s + 1, (W + 2p - k)/s + 1) for an example of shape
/// `in` (C, H, W). Errors: std::invalid_argument naming the layer when in.c != cin or the
/// padded input is smaller than the kernel.
inline Shape conv_output(int cin, int cout, int k, int s, int p, int groups, bool bias, const Shape& in) {
    if (in.c != cin)
        throw std::invalid_argument(conv_name(cin, cout, k, s, p, groups, bias) + ": input has " + std::to_string(in.c) +
                                    " channels");
    if (in.h + 2 * p < k || in.w + 2 * p < k)
        throw std::invalid_argument(conv_name(cin, cout, k, s, p, groups, bias) + ": input " + in.str() +
                                    " is smaller than the kernel");
    return Shape{cout, (in.h + 2 * p - k) / s + 1, (in.w + 2 * p - k) / s + 1};
}
/// weight (cout, cin/groups, k, k) with weight decay, then bias (cout,) without when `bias`.
inline std::vector<ParamInfo> conv_params(int cin, int cout, int k, int groups, bool bias) {
    std::vector<ParamInfo> v{{"weight", static_cast<size_t>(cin / groups) * k * k * cout, true}};
    if (bias) v.push_back({"bias", static_cast<size_t>(cout), false});
    return v;
}

/// Squeeze-and-excitation over `c` channels squeezed to `sq` (Hu et al. 2018): its children
/// are global average pooling, fc c -> sq, ReLU, fc sq -> c, hard sigmoid, in that order
/// (their parameters in that order are its layout). "se(C->SQ)".
inline std::string se_name(int c, int sq) { return "se(" + std::to_string(c) + "->" + std::to_string(sq) + ")"; }
/// Errors: std::invalid_argument naming the layer when the input's channels are not `c`.
inline void se_check_channels(int c, int sq, const Shape& in) {
    if (in.c != c) throw std::invalid_argument(se_name(c, sq) + ": input has " + std::to_string(in.c) + " channels");
}

}  // namespace spec
}  // namespace train
}  // namespace tula
