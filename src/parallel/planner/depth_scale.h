// `ddpx plan` for a deep language model at a long sequence (gpt2-xl at 1024 tokens would take
// minutes and tens of GB to probe whole on a CPU): the probes run on copies of the model with one
// and two blocks (its width, heads and vocabulary: models::ModelConfig::layers) at a shorter
// sequence, and their figures are carried to the model's depth and sequence length:
// - depth: every figure (parameters, a rank's pieces, activations at a batch) is linear in the
//   blocks, x(L) = x(2) + (L - 2) (x(2) - x(1)); the sharded plan's units and a pipeline's
//   layers repeat the second block's;
// - tokens: what a sample adds (activations, a layer's held bytes and input, the logits and the
//   loss's buffers) scales by T / T_probe, what a batch adds once (parameter-sized buffers,
//   low-precision weight copies) does not. Attention runs through scaled_dot_product_attention,
//   whose flash kernels keep O(T) bytes a sequence (no T x T scores), so the bytes are linear in
//   the tokens.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/planner/memory_plan.h"
#include "parallel/planner/split_probe.h"

namespace ddpx::parallel {

struct DepthScale {
  int64_t blocks = 0;  // L, the model's; 0: the probes are the model itself (nothing carried)
  int64_t probed_tokens = 0, tokens = 0;  // T_probe, T
  bool active() const { return blocks > 0; }
  double token_ratio() const {
    return probed_tokens > 0 ? static_cast<double>(tokens) / static_cast<double>(probed_tokens)
                             : 1.0;
  }
};

// The blocks a language model is probed with: 1 and 2 (kProbedBlocks the deeper).
inline constexpr int64_t kProbedBlocks = 2;
// The longest sequence a probe runs (the scale carries it to the rest).
inline constexpr int64_t kProbeTokens = 64;

// `one` and `two`: the whole-model probes with one and two blocks.
ModelMemory scale_model(const ModelMemory& one, const ModelMemory& two, const DepthScale& scale);

// The two-block model's layers (embeddings, two blocks, head) with the second block repeated to
// the model's depth, each carried to the sequence length.
std::vector<LayerMemory> scale_layers(const std::vector<LayerMemory>& two, const DepthScale& scale);

// The tensor-parallel probes (at one size T) with one and two blocks; `two`'s layers carried.
TensorMemory scale_tensor(const TensorMemory& one, const TensorMemory& two,
                          const DepthScale& scale);

}  // namespace ddpx::parallel
