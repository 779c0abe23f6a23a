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

}  // namespace spec
}  // namespace train
}  // namespace tula
