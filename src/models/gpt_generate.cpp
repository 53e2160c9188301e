// Autoregressive sampling (see gpt_generate.h).
#include "models/gpt_generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include <limits>

#include "core/error.h"

namespace ddpx::models {
namespace {

// The next token from the last position's logits (V): greedy at temperature 0, otherwise a draw
// from softmax(logits / temperature) over the top_k most likely tokens.
int64_t pick(torch::Tensor logits, const SamplingOptions& o, at::Generator& generator) {
  logits = logits.to(torch::kFloat32).cpu();
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  logits = logits / o.temperature;
  if (o.top_k > 0 && o.top_k < logits.size(0)) {
    const torch::Tensor kth = std::get<0>(logits.topk(o.top_k)).min();
    logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
  }
  const torch::Tensor probs = torch::softmax(logits, 0);
  return torch::multinomial(probs, 1, /*replacement=*/false, generator).item<int64_t>();
}

}  // namespace

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt,
                              const SamplingOptions& o) {
  const GptOptions& g = model->options();
  DDPX_CHECK(!prompt.empty(), ErrorKind::kUsage,
             "the prompt is empty; give --prompt with at least one character");
  DDPX_CHECK(static_cast<int64_t>(prompt.size()) <= g.block_size, ErrorKind::kUsage,
             "the prompt is {} tokens, longer than the model's context of {}; shorten --prompt",
             prompt.size(), g.block_size);
  for (int64_t t : prompt) {
    DDPX_CHECK(t >= 0 && t < g.vocab_size, ErrorKind::kUsage,
               "prompt token {} is outside the model's vocabulary of {}", t, g.vocab_size);
  }
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Device device = model->transformer->wte->weight.device();
  at::Generator generator = at::detail::createCPUGenerator(o.seed);
  std::vector<int64_t> tokens = prompt;
  auto as_tensor = [&](const int64_t* begin, int64_t n) {
    return torch::from_blob(const_cast<int64_t*>(begin), {1, n}, torch::kInt64).to(device);
  };
  GptCache cache;
  torch::Tensor logits =  // (1, T, V)
      o.use_cache ? model->forward_cached(as_tensor(tokens.data(), tokens.size()), cache)
                  : model->forward(as_tensor(tokens.data(), tokens.size()));
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    tokens.push_back(pick(logits[0][-1], o, generator));
    const auto n = static_cast<int64_t>(tokens.size());
    if (i + 1 == o.max_new_tokens || n >= g.block_size) break;
    logits = o.use_cache ? model->forward_cached(as_tensor(&tokens.back(), 1), cache)
                         : model->forward(as_tensor(tokens.data(), n));
  }
  return tokens;
}

}  // namespace ddpx::models
