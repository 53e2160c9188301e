// A tensor region's generator and its replay under activation checkpointing (see
// region_generator.h).
#include "parallel/tensor/region_generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <memory>
#include <mutex>

namespace ddpx::parallel::tensor {

RegionGenerator::RegionGenerator(int tensor_rank)
    : seed_(at::detail::getDefaultCPUGenerator().current_seed() + 2718 +
            static_cast<uint64_t>(tensor_rank)) {}

at::Generator& RegionGenerator::get(const torch::Device& device) {
  if (!generator_.defined() || generator_.device() != device) {
    if (device.is_cuda()) {
      generator_ = at::globalContext().defaultGenerator(device).clone();
      generator_.set_current_seed(seed_);
    } else {
      generator_ = at::detail::createCPUGenerator(seed_);
    }
  }
  return generator_;
}

torch::Tensor RegionGenerator::state(const torch::Device& device) {
  at::Generator& g = get(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  return g.get_state();
}

void RegionGenerator::set_state(const torch::Tensor& state, const torch::Device& device) {
  at::Generator& g = get(device);
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

torch::Tensor checkpoint_replaying(const models::BlockForward& block, const torch::Tensor& x,
                                   RegionGenerator& generator) {
  auto first = std::make_shared<torch::Tensor>();  // the generator's state at the first forward
  RegionGenerator* g = &generator;                 // the block's: it outlives the graph
  models::BlockForward fn = [block, first, g](const torch::Tensor& input) {
    if (!first->defined()) {
      *first = g->state(input.device());
      return block(input);
    }
    const torch::Tensor after = g->state(input.device());
    g->set_state(*first, input.device());
    torch::Tensor y = block(input);
    g->set_state(after, input.device());
    return y;
  };
  return models::checkpoint(fn, x);
}

}  // namespace ddpx::parallel::tensor
