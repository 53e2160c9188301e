// Activation checkpointing (torch.utils.checkpoint, which libtorch lacks: pytorch#52744): run a
// block's forward without keeping its activations, and run it again inside backward to get
// them. Memory falls to the block's input; time grows by one forward of the block.
//
// checkpoint(fn, x) returns fn(x) computed under no_grad, wired into autograd: in backward the
// forward is recomputed with gradients on, from the saved input, with the CPU's (and the
// input's GPU's) random-number state as the first forward found it, so dropout draws the same
// mask; the gradients of x and of every parameter fn reads are then those of running fn(x)
// directly, bit for bit. fn must be a function of x and the module's parameters alone (as
// torch.utils.checkpoint requires). Autocast: the recompute runs under the autocast state of the
// first forward. `buffers` (a BatchNorm's running statistics) are put back after the recompute,
// so they move once a step, as without checkpoints (torch.utils.checkpoint moves them twice).
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::models {

using BlockForward = std::function<torch::Tensor(const torch::Tensor&)>;

torch::Tensor checkpoint(const BlockForward& fn, const torch::Tensor& x,
                         const std::vector<torch::Tensor>& buffers = {});

// --activation_checkpointing: none, blocks (every layer of a layer sequence but the first and
// the last, the stem and the head), every:K (every K-th of those, the first included: torchtitan's
// selective checkpointing by frequency), blocks:N (the first N of those: Megatron-LM's
// --recompute-method block; the first blocks' activations are held longest, and in a CNN they are
// the largest). `every` 0 is none.
struct ActivationCheckpointing {
  int every = 0;
  int first = 0;  // blocks:N: only blocks 1..N (0: all)
};
// Throws ddpx::Error(kUsage) naming the flag for anything else.
ActivationCheckpointing parse_activation_checkpointing(const std::string& text);
std::string name(const ActivationCheckpointing& policy);
// Whether layer `index` of `count` recomputes its forward in backward.
bool checkpoints_layer(const ActivationCheckpointing& policy, size_t index, size_t count);

}  // namespace ddpx::models
