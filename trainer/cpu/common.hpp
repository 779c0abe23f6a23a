// tula-train: what the CPU layers (trainer/cpu/*.cpp) share: Eigen maps over raw float
// buffers, the input-shape check, the empty gradient of a layer that needs none, and short
// vector loops. Internal to trainer/cpu/.
#pragma once
#include <algorithm>
#include <Eigen/Core>

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/layers.hpp"

namespace tula {
namespace train {
namespace cpu {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapRM = Eigen::Map<RowMat>;
using CMapRM = Eigen::Map<const RowMat>;
using MapVec = Eigen::Map<Eigen::VectorXf>;
using CMapVec = Eigen::Map<const Eigen::VectorXf>;
using MapArr = Eigen::Map<Eigen::ArrayXf>;
using CMapArr = Eigen::Map<const Eigen::ArrayXf>;

/// Throws std::invalid_argument naming `who` when x's example shape (C, H, W) is not `in`.
inline void check_input(const Tensor& x, const Shape& in, const char* who) {
    if (x.shape() != in)
        throw std::invalid_argument(std::string(who) + ": input " + x.str() + " does not match the configured " +
                                    "example shape " + in.str());
}

/// dx resized to (n, in.c, in.h, in.w) and set to zero, for a backward that accumulates into it.
inline Tensor& zero_input_grad(Tensor& dx, int n, const Shape& in) {
    dx.resize(n, in);
    std::fill(dx.data.begin(), dx.data.end(), 0.0f);
    return dx;
}

/// dx emptied (shape (0, 0, 0, 0)): what backward() returns when no input gradient is needed.
inline Tensor& no_grad(Tensor& dx) {
    dx.resize(0, 0, 0, 0);
    return dx;
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

}  // namespace cpu
}  // namespace train
}  // namespace tula
