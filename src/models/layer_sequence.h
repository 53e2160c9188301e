// A model as a sequence of layers whose composition is its forward(): what a pipeline splits
// into stages (parallel/pipeline/). Each layer names the parameters and buffers it uses, each
// parameter in exactly one layer, so a stage knows what it trains and what it sends; except a
// tied one (GPT's token embedding, which is also its output layer; BERT's word embedding, also its
// MLM decoder), listed in each layer that uses it: a pipeline keeps a copy on each rank whose
// stages use it and sums their gradients (pipeline_plan.h).
//
// Sequential-shaped models are the zoo's ResNets (ResNeXt, Wide ResNet, He et al.'s CIFAR
// ResNets), VGG, ViT, the MLP, MobileNet v2/v3, EfficientNet and DenseNet: a stem, their blocks
// one a layer, a head; the GPT family: the embeddings, the blocks, the final LayerNorm with the
// tied head; and BERT: the embeddings, the encoder layers, the MLM head with the tied decoder. A
// user's torch::nn::Sequential is one layer a child.
#pragma once

#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddpx::models {

struct Layer {
  std::string name;  // the submodule's path ("layer1.0", "encoder.layers.encoder_layer_3") or
                     // what the layer does ("stem", "head")
  std::function<torch::Tensor(const torch::Tensor&)> forward;
  std::vector<torch::Tensor> parameters;  // the model's own tensors, not copies
  std::vector<torch::Tensor> buffers;
};

// The layers of a zoo model, in order: running them one after the other is model.forward(x),
// bit for bit. nullopt for a model that is not sequential-shaped.
std::optional<std::vector<Layer>> layer_sequence(const torch::nn::AnyModule& model);

// One layer per child of `sequential`, named by the child's name.
std::vector<Layer> layer_sequence(const torch::nn::Sequential& sequential);

// Whether `b` is another copy of the layer `a` just before it: the next index of the same name
// ("transformer.h.3" after "transformer.h.2"), with parameters, all of the same shapes, and
// buffers of the same shapes. A transformer's blocks are; a ResNet's are within a stage. Given
// the same input, such a copy holds the same bytes (`ddpx plan` probes a run of them twice).
bool repeats(const Layer& a, const Layer& b);

}  // namespace ddpx::models
