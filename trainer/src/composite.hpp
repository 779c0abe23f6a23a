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

#include "layers.hpp"

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

}  // namespace train
}  // namespace tula
