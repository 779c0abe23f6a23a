// tula-train: a sequential network with fused parameter / gradient buffers, and the
// reference models of the brief (lenet5, fmnist-cnn).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/layers.hpp"

namespace tula {
namespace train {

/// One parameter tensor's place in the fused buffers.
struct ParamSegment {
    std::string name;    ///< "<layer index>.<layer description>.<param>", e.g. "0.conv5x5(1->6, pad 2).weight"
    size_t offset = 0;   ///< first value, index into params()/grads()
    size_t size = 0;     ///< values
    bool decay = true;   ///< weight decay applies
};

/// A chain of layers. All trainable parameters live in ONE contiguous float32 buffer and
/// all gradients in another of the same size (layer order, each layer's param_info()
/// order), so that a data-parallel step needs a single allreduce of grads(); the BN
/// running statistics live in a third buffer (state()).
class Model {
public:
    /// Builds the layers for examples of shape `input` and allocates the buffers
    /// (parameters zero until init()). Errors: std::invalid_argument if a layer does not
    /// fit the shape its predecessor produces.
    Model(std::string name, const Shape& input, std::vector<std::unique_ptr<Layer>> layers);

    const std::string& name() const { return name_; }
    const Shape& input_shape() const { return input_; }
    const Shape& output_shape() const { return output_; }
    const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
    const std::vector<ParamSegment>& segments() const { return segments_; }

    /// Floats of activations one training example produces in the forward pass: the input
    /// plus every layer's activation_floats() (composites' inner outputs included). The
    /// planner's memory model takes 2 x 4 bytes per float (values and their gradients).
    size_t activation_floats_per_example() const;
    /// Number of trainable parameters (= values in params()).
    size_t num_params() const { return params_.size(); }
    float* params() { return params_.data(); }
    const float* params() const { return params_.data(); }
    float* grads() { return grads_.data(); }
    const float* grads() const { return grads_.data(); }
    size_t state_size() const { return state_.size(); }
    float* state() { return state_.data(); }

    /// Initializes every layer from an Rng seeded with `seed` (layer order), so one seed
    /// gives the same weights on every rank and every run.
    void init(uint64_t seed);
    /// The states of the layers' own random generators (dropout), in layer order; empty
    /// for models without dropout. For checkpoints.
    std::vector<std::string> rng_states() const;
    /// Restores rng_states(). Errors: std::invalid_argument when the count differs or a
    /// state does not parse (another model).
    void set_rng_states(const std::vector<std::string>& states);
    /// Sets all gradients to zero (layers accumulate into them).
    void zero_grad();
    /// Logits (N, classes, 1, 1) for x (N, input). `train` as in Layer::forward.
    const Tensor& forward(const Tensor& x, bool train);
    /// Back-propagates dL/dlogits, accumulating into grads(). Call after forward().
    void backward(const Tensor& dlogits);
    /// The same, calling done(offset) after each layer's backward (last layer first), where
    /// offset is the index in grads() of that layer's first parameter: from then on the
    /// gradients grads()[offset..num_params) are final, so they may be reduced while the
    /// earlier layers run backward (the gradient buckets of Trainer::step).
    void backward(const Tensor& dlogits, const std::function<void(size_t offset)>& done);
    /// One line per layer with its output shape and parameter count.
    std::string summary() const;

private:
    std::string name_;
    Shape input_, output_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<Shape> shapes_;  // output shape of each layer
    std::vector<ParamSegment> segments_;
    std::vector<size_t> layer_offset_;  // index in params() of each layer's first parameter
    std::vector<float> params_, grads_, state_;
};

/// Names of the models build_model() knows, in a fixed order.
std::vector<std::string> model_names();
/// Builds a model of the brief's zoo for 1x28x28 inputs and 10 classes (Fashion-MNIST),
/// not yet initialized:
///   lenet5:     conv5x5(1->6, pad 2)-ReLU-maxpool2, conv5x5(6->16)-ReLU-maxpool2,
///               fc 400->120-ReLU, 120->84-ReLU, 84->10 (LeCun et al. 1998, with ReLU and
///               max pooling); 61,706 parameters.
///   fmnist-cnn: [conv3x3(1->32, pad 1, no bias)-BN-ReLU] [conv3x3(32->32, pad 1)-BN-ReLU]
///               maxpool2 [conv3x3(32->64, pad 1)-BN-ReLU] [conv3x3(64->64, pad 1)-BN-ReLU]
///               maxpool2, fc 3136->256-ReLU, 256->10; every convolution without bias (BN
///               follows); 870,826 parameters.
/// Errors: std::invalid_argument for an unknown name (the message lists model_names()).
std::unique_ptr<Model> build_model(const std::string& name);

/// Builds model `name` for examples of shape `input` (C x H x W) and `classes` outputs.
/// lenet5 and fmnist-cnn adapt their first layer to C and their first fc to the flattened
/// size. The larger models follow torchvision's definitions (same layers, widths and hence
/// parameter counts for the same C and classes), with the small-image stems of the brief:
///   resnet18:  CIFAR style (He et al. 2016, sec. 4.2 stem): conv3x3(C->64, no bias)-BN-ReLU,
///              no stem pool; 4 stages x 2 basic blocks (64, 128, 256, 512; stride 1,2,2,2;
///              1x1-conv+BN projection shortcut where the shape changes); global avg pool,
///              fc 512->K.
///   resnet50:  the same stem and stages with torchvision's bottleneck blocks ("v1.5", He et
///              al. 2016 Table 1, stride on the 3x3): conv1x1(c->w)-BN-ReLU, conv3x3(w->w,
///              stride s)-BN-ReLU, conv1x1(w->4w)-BN, plus identity or 1x1-conv+BN projection,
///              ReLU; 3, 4, 6, 3 blocks of width 64, 128, 256, 512; global avg pool, fc 2048->K.
///   vgg11:     torchvision vgg11_bn (Simonyan & Zisserman 2015, config A, with BN): 8
///              conv3x3-BN-ReLU (64,M,128,M,256,256,M,512,512,M,512,512,M; a pool is skipped
///              when the map is already 1 pixel), adaptive avg pool 7x7, fc 25088->4096-ReLU-
///              dropout, 4096->4096-ReLU-dropout, 4096->K.
///   alexnet:   torchvision alexnet (Krizhevsky et al. 2012) with a small-input stem
///              conv3x3(C->64, stride 1, pad 1) instead of conv11x11/4; maxpool 3/2 after
///              conv1, conv2 and conv5 (skipped on maps smaller than 3); adaptive avg pool
///              6x6; dropout-fc 9216->4096-ReLU, dropout-fc 4096->4096-ReLU, fc 4096->K.
///   mobilenetv3-small: torchvision mobilenet_v3_small (Howard et al. 2019, Table 2) with a
///              stride-1 stem (C->16); BN eps 0.001, momentum 0.01; SE squeeze width
///              make_divisible(exp/4, 8); head conv1x1 96->576, fc 576->1024-hardswish-
///              dropout(0.2), 1024->K.
/// Errors: std::invalid_argument for an unknown name, classes < 2, or an input too small
/// for the network (the message names the layer).
std::unique_ptr<Model> build_model(const std::string& name, const Shape& input, int classes);

/// The number of trainable parameters of build_model(name, input, classes) without
/// allocating the model's buffers (vgg11 has ~129 million). Errors: as build_model.
size_t count_model_params(const std::string& name, const Shape& input, int classes);

}  // namespace train
}  // namespace tula
