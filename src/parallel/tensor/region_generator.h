// The random numbers of a tensor-parallel region (Megatron-LM's model-parallel RNG tracker), and
// a split block recomputed in backward with the same draws.
//
// Attention dropout inside a split region drops this rank's heads only, so each tensor rank draws
// its masks from a generator of its own, seeded by the default seed, a constant and the tensor
// rank (Megatron-LM's offset 2718); the default generator, which the replicated regions'
// dropouts draw from in step on every tensor rank, is not moved by it. The generator is made at
// its first use, on the device of the tensor it drops (a CUDA device's is a clone of that
// device's default generator, reseeded).
//
// checkpoint_replaying(block, x, generator) is models::checkpoint(block, x) (which replays the
// default generator) that also replays `generator`: the recompute in backward starts it where the
// first forward found it and puts it back where the forward left it, so the recomputed masks are
// the first forward's and later draws are unchanged. The recompute runs the block's collectives
// again, in backward, in the same order on every rank of the group.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include <cstdint>

#include "models/activation_checkpoint.h"

namespace ddpx::parallel::tensor {

class RegionGenerator {
 public:
  explicit RegionGenerator(int tensor_rank);
  at::Generator& get(const torch::Device& device);
  torch::Tensor state(const torch::Device& device);
  void set_state(const torch::Tensor& state, const torch::Device& device);

 private:
  uint64_t seed_ = 0;
  at::Generator generator_;
};

torch::Tensor checkpoint_replaying(const models::BlockForward& block, const torch::Tensor& x,
                                   RegionGenerator& generator);

}  // namespace ddpx::parallel::tensor
