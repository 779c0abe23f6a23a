// tula-train: a sequential network with fused parameter / gradient buffers, and the
// reference models of the brief (lenet5, fmnist-cnn).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "layers.hpp"

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
    /// Sets all gradients to zero (layers accumulate into them).
    void zero_grad();
    /// Logits (N, classes, 1, 1) for x (N, input). `train` as in Layer::forward.
    const Tensor& forward(const Tensor& x, bool train);
    /// Back-propagates dL/dlogits, accumulating into grads(). Call after forward().
    void backward(const Tensor& dlogits);
    /// One line per layer with its output shape and parameter count.
    std::string summary() const;

private:
    std::string name_;
    Shape input_, output_;
    std::vector<std::unique_ptr<Layer>> layers_;
    std::vector<Shape> shapes_;  // output shape of each layer
    std::vector<ParamSegment> segments_;
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
std::unique_ptr<Model> build_model(const std::string& name, Backend backend = Backend::Cpu);

}  // namespace train
}  // namespace tula
