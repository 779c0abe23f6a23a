// tula-train: Model (fused buffers) and the reference networks. See model.hpp.
#include "model.hpp"

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

std::vector<std::string> model_names() { return {"lenet5", "fmnist-cnn"}; }

std::unique_ptr<Model> build_model(const std::string& name, Backend b) {
    std::vector<std::unique_ptr<Layer>> L;
    const Shape input{1, 28, 28};
    if (name == "lenet5") {
        L.push_back(make_conv2d(b, 1, 6, 5, 1, 2, true));
        L.push_back(make_relu(b));
        L.push_back(make_maxpool2d(b, 2));
        L.push_back(make_conv2d(b, 6, 16, 5, 1, 0, true));
        L.push_back(make_relu(b));
        L.push_back(make_maxpool2d(b, 2));
        L.push_back(make_linear(b, 400, 120));
        L.push_back(make_relu(b));
        L.push_back(make_linear(b, 120, 84));
        L.push_back(make_relu(b));
        L.push_back(make_linear(b, 84, 10));
    } else if (name == "fmnist-cnn") {
        const int widths[4][2] = {{1, 32}, {32, 32}, {32, 64}, {64, 64}};
        for (int i = 0; i < 4; ++i) {
            L.push_back(make_conv2d(b, widths[i][0], widths[i][1], 3, 1, 1, false));
            L.push_back(make_batchnorm2d(b, widths[i][1]));
            L.push_back(make_relu(b));
            if (i % 2 == 1) L.push_back(make_maxpool2d(b, 2));
        }
        L.push_back(make_linear(b, 64 * 7 * 7, 256));
        L.push_back(make_relu(b));
        L.push_back(make_linear(b, 256, 10));
    } else {
        std::string valid;
        for (const auto& n : model_names()) valid += (valid.empty() ? "" : ", ") + n;
        throw std::invalid_argument("unknown model '" + name + "'; valid models: " + valid);
    }
    return std::make_unique<Model>(name, input, std::move(L));
}

}  // namespace train
}  // namespace tula
