// A split language model's layer sequence (see split_layers.h).
#include "parallel/tensor/split_layers.h"

namespace ddpx::parallel::tensor {
namespace {

std::vector<torch::Tensor> parameters_of(
    const std::vector<std::shared_ptr<torch::nn::Module>>& modules,
    std::vector<torch::Tensor> extra) {
  for (const auto& m : modules)
    for (auto& p : m->parameters()) extra.push_back(p);
  return extra;
}

}  // namespace

std::vector<models::Layer> split_layers(const SplitLanguageModel& model) {
  const int64_t ranks = model.sequence_ranks;
  std::vector<models::Layer> out;
  out.push_back({"embed", model.embed, parameters_of(model.embed_modules, {model.tied}), {}});
  for (size_t i = 0; i < model.blocks.size(); ++i) {
    auto block = model.block;
    out.push_back(
        {model.block_names[i],
         [block, i, ranks](const torch::Tensor& x) { return block(i, x, ranks * x.size(1)); },
         parameters_of({model.blocks[i]}, {}),
         {}});
  }
  std::vector<torch::Tensor> head = model.head_extra;
  head.insert(head.begin(), model.tied);
  auto forward = model.head;
  out.push_back({"head",
                 [forward, ranks](const torch::Tensor& x) { return forward(x, ranks * x.size(1)); },
                 parameters_of(model.head_modules, std::move(head)),
                 {}});
  return out;
}

}  // namespace ddpx::parallel::tensor
