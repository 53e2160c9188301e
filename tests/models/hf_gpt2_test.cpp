// GPT-2 both ways with the real transformers (PyPI, a small random GPT2Config made at run time,
// never the hub): a folder written by save_pretrained loads into ddpx's GPT with the logits
// transformers computes, so does the hub's layout (GPT2Model's names, the old mask buffers, a
// stored lm_head), and a folder ddpx exports loads with from_pretrained, every key used, with
// ddpx's logits. Within 1e-5 in fp32. A config that disagrees with the model is one line.
#include "models/hf_gpt2.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/gpt.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

constexpr double kTolerance = 1e-5;

// transformers' GPT2Config(vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=2).
GptOptions small_gpt2() {
  GptOptions o;
  o.vocab_size = 101;
  o.block_size = 64;
  o.n_layer = 2;
  o.n_head = 2;
  o.n_embd = 32;
  return o;
}

const char* kSmallConfig = R"(
import os, shutil, torch
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging
logging.set_verbosity_error()
from safetensors.torch import save_file, load_file
config = GPT2Config(vocab_size=101, n_positions=64, n_embd=32, n_layer=2, n_head=2)
)";

void require_transformers() {
  ASSERT_TRUE(test::python_has_module("transformers") && test::python_has_module("safetensors"))
      << test::python_binary() << " lacks transformers: run scripts/python-env --tests";
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(HfGpt2Test, SavePretrainedFoldersLoadWithTransformersLogits) {
  require_transformers();
  test::TempDir dir;
  auto made = test::run_python(std::string(kSmallConfig) + "d = '" + dir.path() + R"('
torch.manual_seed(0)
m = GPT2LMHeadModel(config).eval()
with torch.no_grad():
    for p in m.parameters():  # LayerNorms and biases away from 1 and 0, so every mix-up shows
        p.add_(torch.randn_like(p) * 0.05)
m.save_pretrained(d + "/hf")
ids = torch.randint(0, 101, (2, 16))
with torch.no_grad():
    logits = m(ids).logits
save_file({"ids": ids, "logits": logits.contiguous()}, d + "/expected.safetensors")
# The hub's layout: GPT2Model's names, the causal-mask buffers of older versions, lm_head stored.
hub = {k: v.clone().contiguous() for k, v in m.transformer.state_dict().items()}
for i in range(config.n_layer):
    hub[f"h.{i}.attn.bias"] = torch.tril(torch.ones(64, 64)).view(1, 1, 64, 64)
hub["lm_head.weight"] = m.lm_head.weight.detach().clone()
os.makedirs(d + "/hub")
save_file(hub, d + "/hub/model.safetensors", metadata={"format": "pt"})
shutil.copy(d + "/hf/config.json", d + "/hub/config.json")
print("made")
)");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  auto expected = io::read_safetensors(dir.file("expected.safetensors")).tensors;
  for (const char* folder : {"hf", "hub"}) {
    SCOPED_TRACE(folder);
    Gpt model(small_gpt2());
    model->eval();
    std::string line = load_hf_gpt2(dir.file(folder), *model, "small-gpt2");
    EXPECT_TRUE(test::has(line, "2 layers, 2 heads, 32 wide")) << line;
    torch::NoGradGuard no_grad;
    auto logits = model->forward(expected.at("ids"));
    const double diff = max_diff(logits, expected.at("logits"));
    std::printf("  transformers -> ddpx (%s): max |diff| %.3g\n", folder, diff);
    EXPECT_LE(diff, kTolerance);
  }
}

TEST(HfGpt2Test, ExportLoadsInTransformersWithDdpxLogits) {
  require_transformers();
  test::TempDir dir;
  torch::manual_seed(1);
  Gpt model(small_gpt2());
  model->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
  export_hf_gpt2(*model, dir.file("out"));
  auto ids = torch::randint(0, 101, {2, 16}, torch::kInt64);
  io::write_safetensors(dir.file("ddpx.safetensors"),
                        {{"ids", ids}, {"logits", model->forward(ids)}});
  auto read = test::run_python(std::string(kSmallConfig) + "d = '" + dir.path() + R"('
m, info = GPT2LMHeadModel.from_pretrained(d + "/out", output_loading_info=True)
assert not any(info.values()), info
assert m.config.to_diff_dict() and m.config.n_layer == 2 and m.config.vocab_size == 101
m.eval()
want = load_file(d + "/ddpx.safetensors")
with torch.no_grad():
    logits = m(want["ids"]).logits
print("max_diff", (logits - want["logits"]).abs().max().item())
)");
  ASSERT_EQ(read.exit_code, 0) << read.output;
  const size_t at = read.output.find("max_diff ");
  ASSERT_NE(at, std::string::npos) << read.output;
  const double diff = std::stod(read.output.substr(at + 9));
  std::printf("  ddpx -> transformers: max |diff| %.3g\n", diff);
  EXPECT_LE(diff, kTolerance);
}

TEST(HfGpt2Test, AConfigOfAnotherSizeIsOneLineNamingTheField) {
  test::TempDir dir;
  Gpt model(small_gpt2());
  export_hf_gpt2(*model, dir.path());
  auto options = small_gpt2();
  options.n_layer = 3;
  Gpt deeper(options);
  try {
    load_hf_gpt2(dir.path(), *deeper, "gpt-deeper");
    FAIL() << "a 2-layer folder loaded into a 3-layer model";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_TRUE(test::has(e.what(), "config.json has n_layer 2, the model gpt-deeper has 3"))
        << e.what();
    EXPECT_FALSE(test::has(e.what(), "\n"));
  }
}

TEST(HfGpt2Test, AFolderOfAnotherArchitectureIsRefusedByName) {
  test::TempDir dir;
  test::write_bytes(dir.file("config.json"), R"({"model_type": "llama", "vocab_size": 101})");
  Gpt model(small_gpt2());
  try {
    load_hf_gpt2(dir.path(), *model, "small-gpt2");
    FAIL() << "a llama config was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_TRUE(test::has(e.what(), "model_type is \"llama\", expected \"gpt2\"")) << e.what();
  }
  test::write_bytes(dir.file("config.json"),
                    R"({"model_type": "gpt2", "activation_function": "relu"})");
  try {
    load_hf_gpt2(dir.path(), *model, "small-gpt2");
    FAIL() << "a relu GPT-2 was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), "activation_function is relu")) << e.what();
  }
}

}  // namespace
}  // namespace ddpx::models
