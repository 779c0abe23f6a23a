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
        return a;
    }

protected:
    Shape in_;  ///< input shape (C, H, W) of the block
};

}  // namespace train
}  // namespace tula
