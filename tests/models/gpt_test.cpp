// The GPT-2 family: shapes, causality, the tied head, GPT-2's parameter counts and
// initialisation, the key/value cache, and logits against a GPT written in PyTorch (from
// DDPX_PYTHON) on the same weights.
#include "models/gpt.h"

#include <gtest/gtest.h>
#include <torch/serialize.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/gpt_generate.h"
#include "models/weights.h"
#include "models/zoo/registry.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

GptOptions small_options() {
  GptOptions o;
  o.vocab_size = 65;
  o.block_size = 32;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 32;
  return o;
}

TEST(GptTest, LogitsHaveOneRowPerTokenOverTheVocabulary) {
  torch::manual_seed(0);
  Gpt model(small_options());
  const torch::Tensor idx = torch::randint(0, 65, {3, 17}, torch::kLong);
  EXPECT_EQ(model->forward(idx).sizes(), (std::vector<int64_t>{3, 17, 65}));
}

TEST(GptTest, ChangingATokenLeavesTheLogitsBeforeItUnchanged) {
  torch::manual_seed(1);
  Gpt model(small_options());
  model->eval();
  torch::NoGradGuard no_grad;
  torch::Tensor idx = torch::randint(0, 65, {2, 20}, torch::kLong);
  const torch::Tensor before = model->forward(idx);
  const int64_t t = 11;
  idx.index_put_({torch::indexing::Slice(), t}, (idx.select(1, t) + 7) % 65);
  const torch::Tensor after = model->forward(idx);
  const auto past = torch::indexing::Slice(0, t);
  EXPECT_TRUE(torch::allclose(before.index({torch::indexing::Slice(), past}),
                              after.index({torch::indexing::Slice(), past}), 0, 1e-6));
  EXPECT_FALSE(torch::allclose(before.select(1, t), after.select(1, t), 0, 1e-3))
      << "the changed token must change its own logits";
}

TEST(GptTest, TheHeadIsTheTokenEmbeddingCountedOnce) {
  Gpt model(small_options());
  std::set<const void*> storages;
  for (const torch::Tensor& p : model->parameters()) {
    EXPECT_TRUE(storages.insert(p.data_ptr()).second) << "a parameter is listed twice";
  }
  // A gradient through the head reaches the embedding: the head's weight is wte's.
  const torch::Tensor idx = torch::zeros({1, 1}, torch::kLong);
  model->forward(idx).select(2, 5).sum().backward();
  const torch::Tensor grad = model->transformer->wte->weight.grad();
  EXPECT_GT(grad[5].abs().sum().item<double>(), 0.0) << "token 5 was never an input";
}

TEST(GptTest, ParameterNamesAreHuggingFaceGpt2s) {
  GptOptions o = small_options();
  o.n_layer = 1;
  Gpt model(o);
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) names.push_back(p.key());
  const std::vector<std::string> expected = {"transformer.wte.weight",
                                             "transformer.wpe.weight",
                                             "transformer.h.0.ln_1.weight",
                                             "transformer.h.0.ln_1.bias",
                                             "transformer.h.0.attn.c_attn.weight",
                                             "transformer.h.0.attn.c_attn.bias",
                                             "transformer.h.0.attn.c_proj.weight",
                                             "transformer.h.0.attn.c_proj.bias",
                                             "transformer.h.0.ln_2.weight",
                                             "transformer.h.0.ln_2.bias",
                                             "transformer.h.0.mlp.c_fc.weight",
                                             "transformer.h.0.mlp.c_fc.bias",
                                             "transformer.h.0.mlp.c_proj.weight",
                                             "transformer.h.0.mlp.c_proj.bias",
                                             "transformer.ln_f.weight",
                                             "transformer.ln_f.bias"};
  EXPECT_EQ(names, expected);
}

TEST(GptTest, ParameterCountsAreGpt2s) {
  const ModelConfig gpt2_tokens{/*num_classes=*/50257, /*image_size=*/1024, Stem::kImagenet};
  // GPT-2 124M as Hugging Face counts it (the tied head once); the published sizes of the
  // others at the same vocabulary.
  EXPECT_EQ(model_parameter_count(find_model("gpt2"), gpt2_tokens), 124439808);
  EXPECT_EQ(model_parameter_count(find_model("gpt2-medium"), gpt2_tokens), 354823168);
  EXPECT_EQ(model_parameter_count(find_model("gpt2-large"), gpt2_tokens), 774030080);
  EXPECT_EQ(model_parameter_count(find_model("gpt2-xl"), gpt2_tokens), 1557611200);
  // The formula and a built model agree, with and without biases.
  for (bool bias : {true, false}) {
    GptOptions o = small_options();
    o.bias = bias;
    EXPECT_EQ(gpt_parameter_count(o), count_parameters(*Gpt(o))) << "bias " << bias;
  }
  auto nano = create_model("gpt-nano", ModelConfig{65, 64, Stem::kImagenet});
  EXPECT_EQ(count_parameters(*nano.ptr()), 4 * 198272 + 65 * 128 + 64 * 128 + 256);
}

TEST(GptTest, InitialisationIsGpt2s) {
  torch::manual_seed(2);
  GptOptions o = small_options();
  o.n_layer = 8;
  o.n_embd = 128;
  Gpt model(o);
  const auto named = model->named_parameters();
  auto std_of = [&](const std::string& key) { return named[key].std().item<double>(); };
  EXPECT_NEAR(std_of("transformer.wte.weight"), 0.02, 0.001);
  EXPECT_NEAR(std_of("transformer.h.3.attn.c_attn.weight"), 0.02, 0.001);
  EXPECT_NEAR(std_of("transformer.h.3.mlp.c_fc.weight"), 0.02, 0.001);
  // Residual projections: 0.02 / sqrt(2 * 8) = 0.005.
  EXPECT_NEAR(std_of("transformer.h.3.attn.c_proj.weight"), 0.005, 0.0003);
  EXPECT_NEAR(std_of("transformer.h.3.mlp.c_proj.weight"), 0.005, 0.0003);
  EXPECT_TRUE(named["transformer.h.3.attn.c_attn.bias"].eq(0).all().item<bool>());
  EXPECT_TRUE(named["transformer.h.3.ln_1.weight"].eq(1).all().item<bool>());
  EXPECT_TRUE(named["transformer.ln_f.bias"].eq(0).all().item<bool>());
}

TEST(GptTest, CachedDecodingGivesTheLogitsOfTheWholeSequence) {
  torch::manual_seed(3);
  Gpt model(small_options());
  model->eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor idx = torch::randint(0, 65, {2, 12}, torch::kLong);
  const torch::Tensor whole = model->forward(idx);
  GptCache cache;
  // A prompt of 5, then one token at a time, then two at once.
  std::vector<torch::Tensor> parts = {model->forward_cached(idx.narrow(1, 0, 5), cache)};
  for (int64_t t = 5; t < 10; ++t)
    parts.push_back(model->forward_cached(idx.narrow(1, t, 1), cache));
  parts.push_back(model->forward_cached(idx.narrow(1, 10, 2), cache));
  EXPECT_EQ(cache.length(), 12);
  EXPECT_TRUE(torch::allclose(torch::cat(parts, 1), whole, 1e-5, 1e-5));
}

// Greedy decoding through the cache picks the tokens that decoding the whole sequence every time
// picks; sampling with a seed repeats itself, and top_k 1 is greedy.
TEST(GptTest, GenerationWithTheCacheEqualsGenerationWithoutIt) {
  torch::manual_seed(5);
  GptOptions o = small_options();
  o.block_size = 40;
  Gpt model(o);
  const std::vector<int64_t> prompt = {3, 14, 15, 9, 26};
  SamplingOptions greedy;
  greedy.max_new_tokens = 30;
  greedy.temperature = 0;
  const auto cached = generate(model, prompt, greedy);
  greedy.use_cache = false;
  const auto uncached = generate(model, prompt, greedy);
  EXPECT_EQ(cached.size(), prompt.size() + 30);
  EXPECT_EQ(cached, uncached);
  SamplingOptions sampled;
  sampled.max_new_tokens = 30;
  sampled.seed = 7;
  sampled.top_k = 10;
  EXPECT_EQ(generate(model, prompt, sampled), generate(model, prompt, sampled));
  sampled.use_cache = false;
  EXPECT_EQ(generate(model, prompt, sampled), generate(model, prompt, {30, 1.0, 10, 7, true}));
  sampled.top_k = 1;
  EXPECT_EQ(generate(model, prompt, sampled), cached);
  // The context bounds the sequence.
  greedy.max_new_tokens = 100;
  EXPECT_EQ(generate(model, prompt, greedy).size(), 40u);
}

TEST(GptTest, SequencesPastTheContextAreRefusedWithTheLimit) {
  Gpt model(small_options());
  try {
    model->forward(torch::zeros({1, 33}, torch::kLong));
    ADD_FAILURE() << "expected a usage error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--seq_len 32"), std::string::npos) << e.what();
  }
}

// A GPT-2 written in PyTorch from the equations (as nanoGPT's model.py), with
// torch.nn.functional.scaled_dot_product_attention, on ddpx's weights saved with
// torch::pickle_save.
constexpr const char* kReferenceGpt = R"PY(
import sys
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(77)
torch.set_num_threads(1)
src, out, n_layer, n_head = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
w = torch.load(src, weights_only=False)  # written by this test's ddpx side (torch::pickle_save)
x_ids = w.pop('idx')
def ln(x, p):
    return F.layer_norm(x, (x.size(-1),), w[p + '.weight'], w[p + '.bias'], 1e-5)
def lin(x, p):
    return F.linear(x, w[p + '.weight'], w[p + '.bias'])
B, T = x_ids.shape
x = w['transformer.wte.weight'][x_ids] + w['transformer.wpe.weight'][torch.arange(T)]
C = x.size(-1)
for i in range(n_layer):
    p = f'transformer.h.{i}.'
    q, k, v = lin(ln(x, p + 'ln_1'), p + 'attn.c_attn').split(C, dim=2)
    q, k, v = [t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v)]
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    x = x + lin(y.transpose(1, 2).reshape(B, T, C), p + 'attn.c_proj')
    h = F.gelu(lin(ln(x, p + 'ln_2'), p + 'mlp.c_fc'), approximate='tanh')
    x = x + lin(h, p + 'mlp.c_proj')
logits = F.linear(ln(x, 'transformer.ln_f'), w['transformer.wte.weight'])
torch.save({'y': logits}, out)
)PY";

TEST(GptParityTest, LogitsMatchAGptWrittenInPyTorchOnTheSameWeights) {
  test::TempDir dir;
  torch::manual_seed(4);
  GptOptions o = small_options();
  o.n_layer = 3;
  o.n_embd = 48;
  o.n_head = 6;
  Gpt model(o);
  model->eval();
  // Larger than initial weights, so that every part of the block moves the logits.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters()) {
      if (p.key().find("bias") != std::string::npos) p.value().normal_(0, 0.1);
      if (p.key().find("ln_") != std::string::npos && p.key().find("weight") != std::string::npos)
        p.value().normal_(1, 0.1);
    }
  }
  const torch::Tensor idx = torch::randint(0, o.vocab_size, {2, 24}, torch::kLong);
  c10::Dict<std::string, at::Tensor> state;
  for (const auto& p : model->named_parameters()) state.insert(p.key(), p.value().detach());
  state.insert("idx", idx);
  {
    const std::vector<char> bytes = torch::pickle_save(state);
    std::ofstream(dir.file("w.pt"), std::ios::binary).write(bytes.data(), bytes.size());
  }
  const std::string script = dir.file("ref.py");
  test::write_bytes(script, kReferenceGpt);
  const test::CommandResult r = test::run_command(
      test::shell_quote(test::python_binary()) + " " + script + " " + dir.file("w.pt") + " " +
      dir.file("y.pt") + " " + std::to_string(o.n_layer) + " " + std::to_string(o.n_head));
  if (r.exit_code == 77) GTEST_SKIP() << "DDPX_PYTHON lacks torch";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const torch::Tensor expected = read_state_dict(dir.file("y.pt")).at("y");
  torch::NoGradGuard no_grad;
  const torch::Tensor y = model->forward(idx);
  ASSERT_EQ(y.sizes(), expected.sizes());
  const double max_diff = (y - expected).abs().max().item<double>();
  std::printf("  gpt logits: max |diff| %.3g at scale %.3g\n", max_diff,
              expected.abs().max().item<double>());
  EXPECT_LE(max_diff, 1e-5);
}

}  // namespace
}  // namespace ddpx::models
