// The checkpointed wrapper of a zoo model (see checkpointed_model.h).
#include "models/checkpointed_model.h"

#include "core/error.h"
#include "models/layer_sequence.h"

namespace ddpx::models {
namespace {

class CheckpointedModelImpl : public torch::nn::Module {
 public:
  CheckpointedModelImpl(const torch::nn::AnyModule& model, std::vector<Layer> layers,
                        ActivationCheckpointing policy)
      : layers_(std::move(layers)), policy_(policy) {
    const auto& m = model.ptr();
    // Own tensors first, then the children: Module::parameters()' order, the model's.
    for (const auto& p : m->named_parameters(/*recurse=*/false))
      register_parameter(p.key(), p.value(), p.value().requires_grad());
    for (const auto& b : m->named_buffers(/*recurse=*/false)) register_buffer(b.key(), b.value());
    for (const auto& c : m->named_children()) register_module(c.key(), c.value());
  }

  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      x = checkpoints_layer(policy_, i, layers_.size())
              ? checkpoint(layer.forward, x, layer.buffers)
              : layer.forward(x);
    }
    return x;
  }

 private:
  std::vector<Layer> layers_;
  ActivationCheckpointing policy_;
};
TORCH_MODULE(CheckpointedModel);

}  // namespace

torch::nn::AnyModule with_activation_checkpointing(const torch::nn::AnyModule& model,
                                                   const ActivationCheckpointing& policy,
                                                   const std::string& model_name) {
  if (policy.every == 0) return model;
  auto layers = layer_sequence(model);
  DDPX_CHECK(layers.has_value(), ErrorKind::kUsage,
             "--activation_checkpointing {}: {} is not a sequence of blocks ddpx can recompute; "
             "the zoo's ResNets, VGG, ViT, MLP, MobileNets, EfficientNet, DenseNet, GPTs and BERT "
             "are",
             name(policy), model_name);
  return torch::nn::AnyModule(CheckpointedModel(model, std::move(*layers), policy));
}

}  // namespace ddpx::models
