// tula-train: the declarative descriptions of the model zoo, shared by the backends.
//
// Each model is written ONCE, as a function template over a layer factory F, so the CPU
// model (model.cpp, F = the CPU layers of layers.hpp) and the GPU model (trainer/cuda,
// F = the GpuLayer family of gpu.hpp) are built from the same description and get the same
// layer sequence and hence the same fused-buffer layout (parameters, gradients, state), which
// lets parameters move between backends with one copy and the CPU path act as the GPU's oracle.
//
// F must provide: types Ptr (an owning layer pointer) and Layers (std::vector<Ptr>), and
//   conv2d(cin, cout, k, stride, pad, bias, groups = 1)   weight (cout, cin/groups, k, k)
//   batchnorm2d(channels, momentum, eps)
//   relu(), hardswish(), dropout(p)
//   maxpool2d(k, stride = 0), adaptive_avgpool2d(oh, ow), global_avgpool()
//   linear(in_features, out_features), squeeze_excitation(channels, squeeze)
//   sequential(Layers, name), residual(body, shortcut or null)
// with the semantics documented in layers.hpp. The models themselves are documented at
// build_model() in model.hpp (architectures, sources, parameter counts).
// Errors: std::invalid_argument for an unknown name, fewer than 2 classes, a non-positive
// input shape, or an input too small for the network.
#pragma once
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor.hpp"

namespace tula {
namespace train {
namespace zoo {

/// Names of the models model_layers() knows, in a fixed order.
inline std::vector<std::string> names() {
    return {"lenet5", "fmnist-cnn", "resnet18", "resnet50", "vgg11", "alexnet", "mobilenetv3-small"};
}

// Output size of a k x k window with stride s and padding p (floor), as in PyTorch.
inline int out_size(int n, int k, int s, int p) { return (n + 2 * p - k) / s + 1; }

// conv-BN(-act) as one block; act: 0 none, 1 ReLU, 2 hard-swish.
template <class F>
typename F::Ptr conv_bn(F& f, int cin, int cout, int k, int s, int groups, int act, float mom = 0.1f,
                               float eps = 1e-5f) {
    typename F::Layers L;
    L.push_back(f.conv2d(cin, cout, k, s, (k - 1) / 2, false, groups));
    L.push_back(f.batchnorm2d(cout, mom, eps));
    if (act == 1) L.push_back(f.relu());
    if (act == 2) L.push_back(f.hardswish());
    return f.sequential(std::move(L), "conv" + std::to_string(k) + "-bn");
}

// torchvision's _make_divisible(v, 8) (MobileNet v2/v3 channel rounding).
inline int make_divisible(double v, int d = 8) {
    int nv = std::max(d, static_cast<int>(v + d / 2.0) / d * d);
    if (nv < 0.9 * v) nv += d;
    return nv;
}

// ---- the declarative descriptions ----

// lenet5 / fmnist-cnn: see model.hpp.
template <class F>
void lenet5(F& f, Shape in, int K, typename F::Layers& L) {
    L.push_back(f.conv2d(in.c, 6, 5, 1, 2, true));
    L.push_back(f.relu());
    L.push_back(f.maxpool2d(2));
    L.push_back(f.conv2d(6, 16, 5, 1, 0, true));
    L.push_back(f.relu());
    L.push_back(f.maxpool2d(2));
    const int h = (in.h / 2 - 4) / 2, w = (in.w / 2 - 4) / 2;
    if (h <= 0 || w <= 0) throw std::invalid_argument("lenet5 needs inputs of at least 12x12, not " + in.str());
    L.push_back(f.linear(16 * h * w, 120));
    L.push_back(f.relu());
    L.push_back(f.linear(120, 84));
    L.push_back(f.relu());
    L.push_back(f.linear(84, K));
}

template <class F>
void fmnist_cnn(F& f, Shape in, int K, typename F::Layers& L) {
    const int widths[4][2] = {{in.c, 32}, {32, 32}, {32, 64}, {64, 64}};
    for (int i = 0; i < 4; ++i) {
        L.push_back(f.conv2d(widths[i][0], widths[i][1], 3, 1, 1, false));
        L.push_back(f.batchnorm2d(widths[i][1]));
        L.push_back(f.relu());
        if (i % 2 == 1) L.push_back(f.maxpool2d(2));
    }
    const int h = in.h / 4, w = in.w / 4;
    if (h <= 0 || w <= 0) throw std::invalid_argument("fmnist-cnn needs inputs of at least 4x4, not " + in.str());
    L.push_back(f.linear(64 * h * w, 256));
    L.push_back(f.relu());
    L.push_back(f.linear(256, K));
}

// The ResNet of resnet18 and resnet50 (He et al. 2016, torchvision's definitions): the stem
// conv3x3(C->64)-BN-ReLU for small images (CIFAR-style, H < 64), for ImageNet-sized ones
// (H >= 64) conv7x7/2(C->64)-BN-ReLU and max pool 3x3/2 (unpadded: 224 -> 112 -> 55, where
// torchvision's padded pool gives 56), four stages {width, blocks, stride} of residual blocks, each followed
// by ReLU, with a 1x1 projection shortcut where the shape changes; global average pooling and
// fc to K. expansion 1: basic blocks (3x3 with the stride, 3x3); expansion 4: bottlenecks
// (1x1, 3x3 with the stride as in "ResNet v1.5", 1x1 to 4 x width).
template <class F>
void resnet(F& f, Shape in, int K, typename F::Layers& L, const int (&stages)[4][3], int expansion) {
    if (in.h >= 64) {
        L.push_back(conv_bn(f, in.c, 64, 7, 2, 1, 1));
        L.push_back(f.maxpool2d(3, 2));
    } else {
        L.push_back(conv_bn(f, in.c, 64, 3, 1, 1, 1));
    }
    int c = 64;
    for (const auto& st : stages)
        for (int i = 0; i < st[1]; ++i) {
            const int s = i == 0 ? st[2] : 1, w = st[0], out = w * expansion;
            typename F::Layers body;
            if (expansion == 1) {
                body.push_back(conv_bn(f, c, w, 3, s, 1, 1));
                body.push_back(conv_bn(f, w, w, 3, 1, 1, 0));
            } else {
                body.push_back(conv_bn(f, c, w, 1, 1, 1, 1));
                body.push_back(conv_bn(f, w, w, 3, s, 1, 1));
                body.push_back(conv_bn(f, w, out, 1, 1, 1, 0));
            }
            typename F::Ptr sc;
            if (s != 1 || c != out) sc = conv_bn(f, c, out, 1, s, 1, 0);
            L.push_back(f.residual(f.sequential(std::move(body), expansion == 1 ? "basic-block" : "bottleneck"),
                                   std::move(sc)));
            L.push_back(f.relu());
            c = out;
        }
    L.push_back(f.global_avgpool());
    L.push_back(f.linear(512 * expansion, K));
}

// resnet18: basic blocks, stages {width, blocks, stride}.
template <class F>
void resnet18(F& f, Shape in, int K, typename F::Layers& L) {
    const int stages[4][3] = {{64, 2, 1}, {128, 2, 2}, {256, 2, 2}, {512, 2, 2}};
    resnet(f, in, K, L, stages, 1);
}

// resnet50: bottleneck blocks, stages {width, blocks, stride}; a block's output is 4 x width.
template <class F>
void resnet50(F& f, Shape in, int K, typename F::Layers& L) {
    const int stages[4][3] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
    resnet(f, in, K, L, stages, 4);
}

// vgg11 (config A); 0 = max pool.
template <class F>
void vgg11(F& f, Shape in, int K, typename F::Layers& L) {
    const int cfg[] = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
    int c = in.c, h = in.h, w = in.w;
    for (int v : cfg) {
        if (v == 0) {
            if (h >= 2 && w >= 2) {
                L.push_back(f.maxpool2d(2));
                h /= 2;
                w /= 2;
            }
            continue;
        }
        L.push_back(f.conv2d(c, v, 3, 1, 1, true));
        L.push_back(f.batchnorm2d(v));
        L.push_back(f.relu());
        c = v;
    }
    L.push_back(f.adaptive_avgpool2d(7, 7));
    L.push_back(f.linear(512 * 7 * 7, 4096));
    L.push_back(f.relu());
    L.push_back(f.dropout(0.5));
    L.push_back(f.linear(4096, 4096));
    L.push_back(f.relu());
    L.push_back(f.dropout(0.5));
    L.push_back(f.linear(4096, K));
}

// alexnet: {out, kernel, pool after}.
template <class F>
void alexnet(F& f, Shape in, int K, typename F::Layers& L) {
    const int cfg[5][3] = {{64, 3, 1}, {192, 5, 1}, {384, 3, 0}, {256, 3, 0}, {256, 3, 1}};
    int c = in.c, h = in.h, w = in.w;
    for (const auto& v : cfg) {
        L.push_back(f.conv2d(c, v[0], v[1], 1, v[1] / 2, true));
        L.push_back(f.relu());
        c = v[0];
        if (v[2] && h >= 3 && w >= 3) {
            L.push_back(f.maxpool2d(3, 2));
            h = out_size(h, 3, 2, 0);
            w = out_size(w, 3, 2, 0);
        }
    }
    L.push_back(f.adaptive_avgpool2d(6, 6));
    L.push_back(f.dropout(0.5));
    L.push_back(f.linear(256 * 6 * 6, 4096));
    L.push_back(f.relu());
    L.push_back(f.dropout(0.5));
    L.push_back(f.linear(4096, 4096));
    L.push_back(f.relu());
    L.push_back(f.linear(4096, K));
}

// mobilenetv3-small: torchvision's bneck table {in, kernel, expanded, out, SE, hard-swish, stride}.
template <class F>
void mobilenetv3_small(F& f, Shape in, int K, typename F::Layers& L) {
    const int cfg[11][7] = {{16, 3, 16, 16, 1, 0, 2},  {16, 3, 72, 24, 0, 0, 2},  {24, 3, 88, 24, 0, 0, 1},
                            {24, 5, 96, 40, 1, 1, 2},  {40, 5, 240, 40, 1, 1, 1}, {40, 5, 240, 40, 1, 1, 1},
                            {40, 5, 120, 48, 1, 1, 1}, {48, 5, 144, 48, 1, 1, 1}, {48, 5, 288, 96, 1, 1, 2},
                            {96, 5, 576, 96, 1, 1, 1}, {96, 5, 576, 96, 1, 1, 1}};
    const float mom = 0.01f, eps = 1e-3f;
    L.push_back(conv_bn(f, in.c, 16, 3, 1, 1, 2, mom, eps));
    for (const auto& v : cfg) {
        const int cin = v[0], k = v[1], exp = v[2], cout = v[3], act = v[5] ? 2 : 1, s = v[6];
        typename F::Layers body;
        if (exp != cin) body.push_back(conv_bn(f, cin, exp, 1, 1, 1, act, mom, eps));
        body.push_back(conv_bn(f, exp, exp, k, s, exp, act, mom, eps));
        if (v[4]) body.push_back(f.squeeze_excitation(exp, make_divisible(exp / 4)));
        body.push_back(conv_bn(f, exp, cout, 1, 1, 1, 0, mom, eps));
        auto blk = f.sequential(std::move(body), "inverted-residual");
        if (s == 1 && cin == cout) blk = f.residual(std::move(blk), nullptr);
        L.push_back(std::move(blk));
    }
    L.push_back(conv_bn(f, 96, 576, 1, 1, 1, 2, mom, eps));
    L.push_back(f.global_avgpool());
    L.push_back(f.linear(576, 1024));
    L.push_back(f.hardswish());
    L.push_back(f.dropout(0.2));
    L.push_back(f.linear(1024, K));
}

/// The layers of model `name` for examples of shape `input` (C, H, W) and `classes` outputs,
/// made by factory f (see the top of this file). Errors: std::invalid_argument (see above).
template <class F>
typename F::Layers model_layers(const std::string& name, const Shape& input, int classes, F& f) {
    if (input.c <= 0 || input.h <= 0 || input.w <= 0)
        throw std::invalid_argument("input shape " + input.str() + " must be positive");
    if (classes < 2) throw std::invalid_argument("need at least 2 classes, not " + std::to_string(classes));
    typename F::Layers L;
    if (name == "lenet5") lenet5(f, input, classes, L);
    else if (name == "fmnist-cnn") fmnist_cnn(f, input, classes, L);
    else if (name == "resnet18") resnet18(f, input, classes, L);
    else if (name == "resnet50") resnet50(f, input, classes, L);
    else if (name == "vgg11") vgg11(f, input, classes, L);
    else if (name == "alexnet") alexnet(f, input, classes, L);
    else if (name == "mobilenetv3-small") mobilenetv3_small(f, input, classes, L);
    else {
        std::string valid;
        for (const auto& n : names()) valid += (valid.empty() ? "" : ", ") + n;
        throw std::invalid_argument("unknown model '" + name + "'; valid models: " + valid);
    }
    return L;
}


}  // namespace zoo
}  // namespace train
}  // namespace tula
