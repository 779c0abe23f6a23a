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

std::vector<std::string> model_names() {
    return {"lenet5", "fmnist-cnn", "resnet18", "vgg11", "alexnet", "mobilenetv3-small"};
}

namespace {

using Layers = std::vector<std::unique_ptr<Layer>>;

// Output size of a k x k window with stride s and padding p (floor), as in PyTorch.
int out_size(int n, int k, int s, int p) { return (n + 2 * p - k) / s + 1; }

// conv-BN(-act) as one block; act: 0 none, 1 ReLU, 2 hard-swish.
std::unique_ptr<Layer> conv_bn(Backend b, int cin, int cout, int k, int s, int groups, int act, float mom = 0.1f,
                               float eps = 1e-5f) {
    Layers L;
    L.push_back(make_conv2d(b, cin, cout, k, s, (k - 1) / 2, false, groups));
    L.push_back(make_batchnorm2d(b, cout, mom, eps));
    if (act == 1) L.push_back(make_relu(b));
    if (act == 2) L.push_back(make_hardswish(b));
    return make_sequential(std::move(L), "conv" + std::to_string(k) + "-bn");
}

// torchvision's _make_divisible(v, 8) (MobileNet v2/v3 channel rounding).
int make_divisible(double v, int d = 8) {
    int nv = std::max(d, static_cast<int>(v + d / 2.0) / d * d);
    if (nv < 0.9 * v) nv += d;
    return nv;
}

// ---- the declarative descriptions ----

// lenet5 / fmnist-cnn: see model.hpp.
void lenet5(Backend b, Shape in, int K, Layers& L) {
    L.push_back(make_conv2d(b, in.c, 6, 5, 1, 2, true));
    L.push_back(make_relu(b));
    L.push_back(make_maxpool2d(b, 2));
    L.push_back(make_conv2d(b, 6, 16, 5, 1, 0, true));
    L.push_back(make_relu(b));
    L.push_back(make_maxpool2d(b, 2));
    const int h = (in.h / 2 - 4) / 2, w = (in.w / 2 - 4) / 2;
    if (h <= 0 || w <= 0) throw std::invalid_argument("lenet5 needs inputs of at least 12x12, not " + in.str());
    L.push_back(make_linear(b, 16 * h * w, 120));
    L.push_back(make_relu(b));
    L.push_back(make_linear(b, 120, 84));
    L.push_back(make_relu(b));
    L.push_back(make_linear(b, 84, K));
}

void fmnist_cnn(Backend b, Shape in, int K, Layers& L) {
    const int widths[4][2] = {{in.c, 32}, {32, 32}, {32, 64}, {64, 64}};
    for (int i = 0; i < 4; ++i) {
        L.push_back(make_conv2d(b, widths[i][0], widths[i][1], 3, 1, 1, false));
        L.push_back(make_batchnorm2d(b, widths[i][1]));
        L.push_back(make_relu(b));
        if (i % 2 == 1) L.push_back(make_maxpool2d(b, 2));
    }
    const int h = in.h / 4, w = in.w / 4;
    if (h <= 0 || w <= 0) throw std::invalid_argument("fmnist-cnn needs inputs of at least 4x4, not " + in.str());
    L.push_back(make_linear(b, 64 * h * w, 256));
    L.push_back(make_relu(b));
    L.push_back(make_linear(b, 256, K));
}

// resnet18: stages {width, blocks, stride}.
void resnet18(Backend b, Shape in, int K, Layers& L) {
    const int stages[4][3] = {{64, 2, 1}, {128, 2, 2}, {256, 2, 2}, {512, 2, 2}};
    L.push_back(conv_bn(b, in.c, 64, 3, 1, 1, 1));
    int c = 64;
    for (const auto& st : stages)
        for (int i = 0; i < st[1]; ++i) {
            const int s = i == 0 ? st[2] : 1, w = st[0];
            Layers body;
            body.push_back(conv_bn(b, c, w, 3, s, 1, 1));
            body.push_back(conv_bn(b, w, w, 3, 1, 1, 0));
            std::unique_ptr<Layer> sc;
            if (s != 1 || c != w) sc = conv_bn(b, c, w, 1, s, 1, 0);
            L.push_back(make_residual(make_sequential(std::move(body), "basic-block"), std::move(sc)));
            L.push_back(make_relu(b));
            c = w;
        }
    L.push_back(make_global_avgpool(b));
    L.push_back(make_linear(b, 512, K));
}

// vgg11 (config A); 0 = max pool.
void vgg11(Backend b, Shape in, int K, Layers& L) {
    const int cfg[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    int c = in.c, h = in.h, w = in.w;
    for (int v : cfg) {
        if (v == 0) {
            if (h >= 2 && w >= 2) {
                L.push_back(make_maxpool2d(b, 2));
                h /= 2;
                w /= 2;
            }
            continue;
        }
        L.push_back(make_conv2d(b, c, v, 3, 1, 1, true));
        L.push_back(make_batchnorm2d(b, v));
        L.push_back(make_relu(b));
        c = v;
    }
    L.push_back(make_adaptive_avgpool2d(b, 7, 7));
    L.push_back(make_linear(b, 512 * 7 * 7, 4096));
    L.push_back(make_relu(b));
    L.push_back(make_dropout(b, 0.5));
    L.push_back(make_linear(b, 4096, 4096));
    L.push_back(make_relu(b));
    L.push_back(make_dropout(b, 0.5));
    L.push_back(make_linear(b, 4096, K));
}

// alexnet: {out, kernel, pool after}.
void alexnet(Backend b, Shape in, int K, Layers& L) {
    const int cfg[5][3] = {{64, 3, 1}, {192, 5, 1}, {384, 3, 0}, {256, 3, 0}, {256, 3, 1}};
    int c = in.c, h = in.h, w = in.w;
    for (const auto& v : cfg) {
        L.push_back(make_conv2d(b, c, v[0], v[1], 1, v[1] / 2, true));
        L.push_back(make_relu(b));
        c = v[0];
        if (v[2] && h >= 3 && w >= 3) {
            L.push_back(make_maxpool2d(b, 3, 2));
            h = out_size(h, 3, 2, 0);
            w = out_size(w, 3, 2, 0);
        }
    }
    L.push_back(make_adaptive_avgpool2d(b, 6, 6));
    L.push_back(make_dropout(b, 0.5));
    L.push_back(make_linear(b, 256 * 6 * 6, 4096));
    L.push_back(make_relu(b));
    L.push_back(make_dropout(b, 0.5));
    L.push_back(make_linear(b, 4096, 4096));
    L.push_back(make_relu(b));
    L.push_back(make_linear(b, 4096, K));
}

// mobilenetv3-small: torchvision's bneck table {in, kernel, expanded, out, SE, hard-swish, stride}.
void mobilenetv3_small(Backend b, Shape in, int K, Layers& L) {
    const int cfg[11][7] = {{16, 3, 16, 16, 1, 0, 2},  {16, 3, 72, 24, 0, 0, 2},  {24, 3, 88, 24, 0, 0, 1},
                            {24, 5, 96, 40, 1, 1, 2},  {40, 5, 240, 40, 1, 1, 1}, {40, 5, 240, 40, 1, 1, 1},
                            {40, 5, 120, 48, 1, 1, 1}, {48, 5, 144, 48, 1, 1, 1}, {48, 5, 288, 96, 1, 1, 2},
                            {96, 5, 576, 96, 1, 1, 1}, {96, 5, 576, 96, 1, 1, 1}};
    const float mom = 0.01f, eps = 1e-3f;
    L.push_back(conv_bn(b, in.c, 16, 3, 1, 1, 2, mom, eps));
    for (const auto& v : cfg) {
        const int cin = v[0], k = v[1], exp = v[2], cout = v[3], act = v[5] ? 2 : 1, s = v[6];
        Layers body;
        if (exp != cin) body.push_back(conv_bn(b, cin, exp, 1, 1, 1, act, mom, eps));
        body.push_back(conv_bn(b, exp, exp, k, s, exp, act, mom, eps));
        if (v[4]) body.push_back(make_squeeze_excitation(b, exp, make_divisible(exp / 4)));
        body.push_back(conv_bn(b, exp, cout, 1, 1, 1, 0, mom, eps));
        auto blk = make_sequential(std::move(body), "inverted-residual");
        if (s == 1 && cin == cout) blk = make_residual(std::move(blk), nullptr);
        L.push_back(std::move(blk));
    }
    L.push_back(conv_bn(b, 96, 576, 1, 1, 1, 2, mom, eps));
    L.push_back(make_global_avgpool(b));
    L.push_back(make_linear(b, 576, 1024));
    L.push_back(make_hardswish(b));
    L.push_back(make_dropout(b, 0.2));
    L.push_back(make_linear(b, 1024, K));
}

Layers model_layers(const std::string& name, const Shape& input, int classes, Backend b) {
    if (input.c <= 0 || input.h <= 0 || input.w <= 0)
        throw std::invalid_argument("input shape " + input.str() + " must be positive");
    if (classes < 2) throw std::invalid_argument("need at least 2 classes, not " + std::to_string(classes));
    Layers L;
    if (name == "lenet5") lenet5(b, input, classes, L);
    else if (name == "fmnist-cnn") fmnist_cnn(b, input, classes, L);
    else if (name == "resnet18") resnet18(b, input, classes, L);
    else if (name == "vgg11") vgg11(b, input, classes, L);
    else if (name == "alexnet") alexnet(b, input, classes, L);
    else if (name == "mobilenetv3-small") mobilenetv3_small(b, input, classes, L);
    else {
        std::string valid;
        for (const auto& n : model_names()) valid += (valid.empty() ? "" : ", ") + n;
        throw std::invalid_argument("unknown model '" + name + "'; valid models: " + valid);
    }
    return L;
}

}  // namespace

std::unique_ptr<Model> build_model(const std::string& name, Backend b) { return build_model(name, Shape{1, 28, 28}, 10, b); }

std::unique_ptr<Model> build_model(const std::string& name, const Shape& input, int classes, Backend b) {
    return std::make_unique<Model>(name, input, model_layers(name, input, classes, b));
}

size_t count_model_params(const std::string& name, const Shape& input, int classes) {
    Layers L = model_layers(name, input, classes, Backend::Cpu);
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
