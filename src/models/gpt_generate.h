// Sampling text from a GPT: autoregressive decoding with temperature and top-k, through the
// key/value cache (each new token alone through the model) or, for checking, without it (the
// whole sequence each time). Greedy decoding (temperature 0) picks the most likely token; the
// two ways then give the same tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "models/gpt.h"

namespace ddpx::models {

struct SamplingOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: the whole vocabulary
  uint64_t seed = 0;
  bool use_cache = true;
};

// `prompt` followed by up to max_new_tokens sampled tokens (fewer when the model's context
// fills: the cache keeps the whole sequence, so decoding stops at block_size tokens). Runs on
// the model's device in evaluation mode, without gradients.
std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt,
                              const SamplingOptions& options);

}  // namespace ddpx::models
