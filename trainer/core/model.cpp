// tula-train: Model (fused buffers) and the reference networks. See model.hpp.
#include "core/model.hpp"

#include "core/model_zoo.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace tula {
namespace train {

Model::Model(std::string name, const Shape& input, std::vector<std::unique_ptr<Layer>> layers)
    : name_(std::move(name)), input_(input), layers_(std::move(layers)) {
    if (layers_.empty()) throw std::invalid_argument("model " + name_ + " has no layers");
    Shape s = input;
    size_t np = 0, ns = 0;
    for (size_t i = 0; i < layers_.size(); ++i) {
        s = layers_[i]->configure(s);
        shapes_.push_back(s);
        const std::string prefix = std::to_string(i) + "." + layers_[i]->describe() + ".";
        for (const ParamInfo& p : layers_[i]->param_info()) {
            segments_.push_back(ParamSegment{prefix + p.name, np, p.size, p.decay});
            np += p.size;
        }
        ns += layers_[i]->state_size();
    }
    output_ = s;
    params_.assign(np, 0.0f);
    grads_.assign(np, 0.0f);
    state_.assign(ns, 0.0f);
    size_t po = 0, so = 0;
    for (auto& l : layers_) {
        layer_offset_.push_back(po);
        size_t lp = 0;
        for (const ParamInfo& p : l->param_info()) lp += p.size;
        l->bind(params_.data() + po, grads_.data() + po, state_.data() + so);
        po += lp;
        so += l->state_size();
    }
    layers_.front()->set_need_input_grad(false);
}

void Model::init(uint64_t seed) {
    Rng rng(seed);
    for (auto& l : layers_) l->init(rng);
}

std::vector<std::string> Model::rng_states() const {
    std::vector<std::string> v;
    for (auto& l : layers_) l->save_rng(v);
    return v;
}

void Model::set_rng_states(const std::vector<std::string>& states) {
    size_t pos = 0;
    for (auto& l : layers_) l->load_rng(states, pos);
    if (pos != states.size())
        throw std::invalid_argument(std::to_string(states.size()) + " random generator states for " + std::to_string(pos) +
                                    " dropout layers");
}

void Model::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

const Tensor& Model::forward(const Tensor& x, bool train) {
    const Tensor* t = &x;
    for (auto& l : layers_) t = &l->forward(*t, train);
    return *t;
}

void Model::backward(const Tensor& dlogits) {
    const Tensor* g = &dlogits;
    for (size_t i = layers_.size(); i-- > 0;) g = &layers_[i]->backward(*g);
}

void Model::backward(const Tensor& dlogits, const std::function<void(size_t offset)>& done) {
    const Tensor* g = &dlogits;
    for (size_t i = layers_.size(); i-- > 0;) {
        g = &layers_[i]->backward(*g);
        if (done) done(layer_offset_[i]);
    }
}

size_t Model::activation_floats_per_example() const {
    size_t n = input_.size();
    for (const auto& l : layers_) n += l->activation_floats();
    return n;
}

std::string Model::summary() const {
    std::ostringstream o;
    o << name_ << ": input " << input_.str() << "\n";
    for (size_t i = 0; i < layers_.size(); ++i) {
        size_t lp = 0;
        for (const ParamInfo& p : layers_[i]->param_info()) lp += p.size;
        o << "  " << i << "  " << layers_[i]->describe() << " -> " << shapes_[i].str();
        if (lp) o << "  (" << lp << " parameters)";
        o << "\n";
    }
    o << "  total " << params_.size() << " parameters\n";
    return o.str();
}

std::vector<std::string> model_names() { return zoo::names(); }

namespace {

using Layers = std::vector<std::unique_ptr<Layer>>;

// The CPU layer factory of the zoo's descriptions (model_zoo.hpp).
struct CpuLayerFactory {
    using Ptr = std::unique_ptr<Layer>;
    using Layers = std::vector<Ptr>;
    Ptr conv2d(int cin, int cout, int k, int s, int p, bool bias, int groups = 1) {
        return make_conv2d(cin, cout, k, s, p, bias, groups);
    }
    Ptr batchnorm2d(int c, float mom = 0.1f, float eps = 1e-5f) { return make_batchnorm2d(c, mom, eps); }
    Ptr relu() { return make_relu(); }
    Ptr hardswish() { return make_hardswish(); }
    Ptr dropout(double p) { return make_dropout(p); }
    Ptr maxpool2d(int k, int stride = 0) { return make_maxpool2d(k, stride); }
    Ptr adaptive_avgpool2d(int oh, int ow) { return make_adaptive_avgpool2d(oh, ow); }
    Ptr global_avgpool() { return make_global_avgpool(); }
    Ptr linear(int in, int out) { return make_linear(in, out); }
    Ptr squeeze_excitation(int c, int sq) { return make_squeeze_excitation(c, sq); }
    Ptr sequential(Layers l, std::string name) { return make_sequential(std::move(l), std::move(name)); }
    Ptr residual(Ptr body, Ptr shortcut) { return make_residual(std::move(body), std::move(shortcut)); }
};

Layers model_layers(const std::string& name, const Shape& input, int classes) {
    CpuLayerFactory f;
    return zoo::model_layers(name, input, classes, f);
}
}  // namespace

std::unique_ptr<Model> build_model(const std::string& name) { return build_model(name, Shape{1, 28, 28}, 10); }

std::unique_ptr<Model> build_model(const std::string& name, const Shape& input, int classes) {
    return std::make_unique<Model>(name, input, model_layers(name, input, classes));
}

size_t count_model_params(const std::string& name, const Shape& input, int classes) {
    Layers L = model_layers(name, input, classes);
    Shape s = input;
    size_t n = 0;
    for (auto& l : L) {
        s = l->configure(s);
        for (const ParamInfo& p : l->param_info()) n += p.size;
    }
    return n;
}

}  // namespace train
}  // namespace tula
