// tula-train: the dense tensor the layers pass to each other (CPU backend).
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace tula {
namespace train {

/// Shape of one example: (C, H, W). A flat feature vector of F values is (F, 1, 1).
struct Shape {
    int c = 0, h = 0, w = 0;
    /// Values per example, C*H*W.
    size_t size() const { return static_cast<size_t>(c) * h * w; }
    bool operator==(const Shape& o) const { return c == o.c && h == o.h && w == o.w; }
    bool operator!=(const Shape& o) const { return !(*this == o); }
    /// "CxHxW", for messages.
    std::string str() const {
        return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
    }
};

/// A contiguous float32 tensor of shape (N, C, H, W), row-major (W fastest), as in
/// PyTorch's NCHW layout. A matrix (N, F) is stored as (N, F, 1, 1).
/// resize() keeps the allocation when it shrinks or stays the same, so buffers that are
/// resized every step do not allocate in the steady state.
struct Tensor {
    int n = 0, c = 0, h = 0, w = 0;
    std::vector<float> data;

    Tensor() = default;
    Tensor(int n_, int c_, int h_, int w_) { resize(n_, c_, h_, w_); }

    /// Sets the shape; new elements are zero, existing values are kept (not meaningful
    /// after a shape change). Errors: std::invalid_argument on a negative dimension.
    void resize(int n_, int c_, int h_, int w_) {
        if (n_ < 0 || c_ < 0 || h_ < 0 || w_ < 0) throw std::invalid_argument("negative tensor dimension");
        n = n_; c = c_; h = h_; w = w_;
        data.resize(size());
    }
    void resize(int n_, const Shape& s) { resize(n_, s.c, s.h, s.w); }
    /// Same shape as `o`.
    void resize_like(const Tensor& o) { resize(o.n, o.c, o.h, o.w); }

    /// Total number of values, N*C*H*W.
    size_t size() const { return static_cast<size_t>(n) * c * h * w; }
    /// Values per example, C*H*W (the F of an (N, F) view).
    size_t sample_size() const { return static_cast<size_t>(c) * h * w; }
    Shape shape() const { return Shape{c, h, w}; }
    float* ptr() { return data.data(); }
    const float* ptr() const { return data.data(); }
    /// Pointer to example i, i in [0, N).
    float* sample(int i) { return data.data() + static_cast<size_t>(i) * sample_size(); }
    const float* sample(int i) const { return data.data() + static_cast<size_t>(i) * sample_size(); }
    /// "(N, C, H, W)", for messages.
    std::string str() const {
        return "(" + std::to_string(n) + ", " + std::to_string(c) + ", " + std::to_string(h) + ", " +
               std::to_string(w) + ")";
    }
};

}  // namespace train
}  // namespace tula
