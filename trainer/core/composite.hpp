// tula-train: composite layers shared by the backends. A composite owns child layers and
// presents their parameters, gradients and state as its own, concatenated in child order,
// so that it occupies one contiguous slice of the model's fused buffers (model.hpp) with the
// same layout on the CPU (Base = Layer, T = Tensor) and on the GPU (Base = cuda::GpuLayer,
// T = cuda::DevTensor).
#pragma once
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/layer_specs.hpp"
#include "core/layers.hpp"

namespace tula {
namespace train {

/// Parameter and state bookkeeping of a composite: param_info() lists the children's
/// parameters as "<child index>.<child description>.<name>", state_size() sums theirs, and
/// bind() hands each child its consecutive slices. Errors: none.
template <class Base>
class CompositeOf : public Base {
public:
    std::vector<ParamInfo> param_info() const override {
        std::vector<ParamInfo> v;
        for (size_t i = 0; i < kids_.size(); ++i)
            for (ParamInfo p : kids_[i]->param_info()) {
                p.name = std::to_string(i) + "." + kids_[i]->describe() + "." + p.name;
                v.push_back(p);
            }
        return v;
    }
    size_t state_size() const override {
        size_t s = 0;
        for (auto& k : kids_) s += k->state_size();
        return s;
    }
    /// The children's activation floats (a composite with its own output buffer adds it).
    size_t activation_floats() const override {
        size_t s = 0;
        for (auto& k : kids_) s += k->activation_floats();
        return s;
    }
    void bind(float* params, float* grads, float* state) override {
        this->params_ = params;
        this->grads_ = grads;
        this->n_params_ = 0;
        size_t so = 0;
        for (auto& k : kids_) {
            size_t lp = 0;
            for (const ParamInfo& p : k->param_info()) lp += p.size;
            k->bind(params + this->n_params_, grads + this->n_params_, state ? state + so : nullptr);
            this->n_params_ += lp;
            so += k->state_size();
        }
    }

protected:
    std::vector<std::unique_ptr<Base>> kids_;
};

/// An ordered chain of child layers used as one layer (make_sequential, make_gpu_sequential):
/// (N, in) -> child 1 -> ... -> child n -> (N, out); backward runs the children in reverse.
/// Errors: std::invalid_argument when there are no children, or (configure) when a child does
/// not fit its predecessor's output.
template <class Base, class T>
class SequentialOf : public CompositeOf<Base> {
public:
    SequentialOf(std::vector<std::unique_ptr<Base>> layers, std::string name) : name_(std::move(name)) {
        if (layers.empty()) throw std::invalid_argument(name_ + ": no layers");
        this->kids_ = std::move(layers);
    }
    std::string describe() const override { return name_; }
    Shape configure(const Shape& in) override {
        Shape s = in;
        for (auto& k : this->kids_) s = k->configure(s);
        return s;
    }
    const T& forward(const T& x, bool train) override {
        this->kids_.front()->set_need_input_grad(this->need_input_grad_);
        const T* t = &x;
        for (auto& k : this->kids_) t = &k->forward(*t, train);
        return *t;
    }
    const T& backward(const T& dy) override {
        const T* g = &dy;
        for (size_t i = this->kids_.size(); i-- > 0;) g = &this->kids_[i]->backward(*g);
        return *g;
    }

private:
    std::string name_;
};

/// The bookkeeping of a residual block y = body(x) + shortcut(x) (shortcut null: identity),
/// shared by the backends: children (body, then the shortcut if any), describe(), and
/// configure(), which checks that both paths give the same shape. The backend's class adds
/// forward and backward. B is a composite base (CompositeOf<...> or a wrapper of it).
/// Errors: std::invalid_argument without a body, or (configure) when the shapes differ.
template <class B, class LayerPtr>
class ResidualOf : public B {
public:
    ResidualOf(LayerPtr body, LayerPtr shortcut) {
        if (!body) throw std::invalid_argument("residual: no body");
        this->kids_.push_back(std::move(body));
        if (shortcut) this->kids_.push_back(std::move(shortcut));
    }
    std::string describe() const override {
        return "residual(" + this->kids_[0]->describe() +
               (this->kids_.size() > 1 ? " + " + this->kids_[1]->describe() : "") + ")";
    }
    Shape configure(const Shape& in) override {
        const Shape a = this->kids_[0]->configure(in);
        const Shape b = this->kids_.size() > 1 ? this->kids_[1]->configure(in) : in;
        if (a != b)
            throw std::invalid_argument("residual: body gives " + a.str() + " but the shortcut gives " + b.str());
        in_ = in;
        out_ = a;
        return a;
    }
    /// The body's and shortcut's outputs plus the sum y = body + shortcut.
    size_t activation_floats() const override { return B::activation_floats() + out_.size(); }

protected:
    Shape in_, out_;  ///< input and output shape (C, H, W) of the block
};

/// Squeeze-and-excitation (Hu et al. 2018) over `c` channels squeezed to `sq`, the part shared
/// by the backends: describe(), configure() (the input must have c channels; the output has
/// the input's shape) and activation_floats() (the children's outputs plus the rescaled
/// output). The backend's class adds the children (spec::se_name's order: global average
/// pooling, fc c -> sq, ReLU, fc sq -> c, hard sigmoid), forward and backward.
/// Errors: std::invalid_argument unless c and sq are positive, or (configure) for the wrong
/// channel count.
template <class B>
class SqueezeExcitationOf : public B {
public:
    SqueezeExcitationOf(int c, int sq) : c_(c), sq_(sq) {
        if (c <= 0 || sq <= 0) throw std::invalid_argument("squeeze-excitation: channels must be positive");
    }
    std::string describe() const override { return spec::se_name(c_, sq_); }
    Shape configure(const Shape& in) override {
        spec::se_check_channels(c_, sq_, in);
        Shape s = in;
        for (auto& k : this->kids_) s = k->configure(s);
        in_ = in;
        return in;
    }
    size_t activation_floats() const override { return B::activation_floats() + in_.size(); }

protected:
    int c_, sq_;
    Shape in_;  ///< input (= output) shape (C, H, W)
};

}  // namespace train
}  // namespace tula
