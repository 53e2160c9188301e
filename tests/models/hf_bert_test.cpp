// BERT both ways with the real transformers (PyPI, a small random BertConfig made at run time,
// never the hub): a BertForMaskedLM folder written by save_pretrained loads into ddpx's BERT with
// the logits transformers computes, so does the hub's BertForPreTraining layout (pooler,
// next-sentence head, the position-id buffer, the decoder weight and bias stored); a folder ddpx
// exports loads with BertForMaskedLM.from_pretrained, every key used, with ddpx's logits. Within
// 1e-5 in fp32. A config that disagrees with the model is one line. The zoo's bert-base has
// BertForMaskedLM's parameter names, shapes and count.
#include "models/hf_bert.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "models/bert.h"
#include "models/zoo/registry.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

constexpr double kBertTolerance = 1e-5;

// transformers' BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2,
// num_attention_heads=2, intermediate_size=64, max_position_embeddings=64).
BertOptions small_bert() {
  BertOptions o;
  o.vocab_size = 101;
  o.hidden_size = 32;
  o.num_hidden_layers = 2;
  o.num_attention_heads = 2;
  o.intermediate_size = 64;
  o.max_position_embeddings = 64;
  return o;
}

const char* kSmallBertConfig = R"(
import os, shutil, torch
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import BertConfig, BertForMaskedLM, BertForPreTraining
from transformers.utils import logging
logging.set_verbosity_error()
from safetensors.torch import save_file, load_file
config = BertConfig(vocab_size=101, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=64, max_position_embeddings=64)
)";

double bert_max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(HfBertTest, SavePretrainedFoldersLoadWithTransformersLogits) {
  ASSERT_TRUE(test::python_has_module("transformers"));
  test::TempDir dir;
  auto made = test::run_python(std::string(kSmallBertConfig) + "d = '" + dir.path() + R"('
torch.manual_seed(0)
m = BertForMaskedLM(config).eval()
with torch.no_grad():
    for p in m.parameters():  # LayerNorms and biases away from 1 and 0, so every mix-up shows
        p.add_(torch.randn_like(p) * 0.05)
m.save_pretrained(d + "/hf")
ids = torch.randint(0, 101, (2, 16))
with torch.no_grad():
    logits = m(ids).logits
save_file({"ids": ids, "logits": logits.contiguous()}, d + "/expected.safetensors")
# The hub's layout: BertForPreTraining's pooler and next-sentence head, the position-id buffer,
# the decoder's weight and bias stored beside the tensors they are tied to.
pt = BertForPreTraining(config)
hub = {k: v.clone().contiguous() for k, v in pt.state_dict().items()}
hub.update({k: v.clone().contiguous() for k, v in m.state_dict().items()})
hub["cls.predictions.decoder.weight"] = m.bert.embeddings.word_embeddings.weight.detach().clone()
hub["cls.predictions.decoder.bias"] = m.cls.predictions.bias.detach().clone()
hub["bert.embeddings.position_ids"] = torch.arange(64).view(1, 64)
os.makedirs(d + "/hub")
save_file(hub, d + "/hub/model.safetensors", metadata={"format": "pt"})
shutil.copy(d + "/hf/config.json", d + "/hub/config.json")
print("made", sorted(k for k in hub if k.startswith("bert.pooler") or k.startswith("cls.seq")))
)");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_TRUE(test::has(made.output, "bert.pooler.dense.weight")) << made.output;
  auto expected = io::read_safetensors(dir.file("expected.safetensors")).tensors;
  for (const char* folder : {"hf", "hub"}) {
    SCOPED_TRACE(folder);
    Bert model(small_bert());
    model->eval();
    std::string line = load_hf_bert(dir.file(folder), *model, "small-bert");
    EXPECT_TRUE(test::has(line, "2 layers, 2 heads, 32 wide")) << line;
    torch::NoGradGuard no_grad;
    auto logits = model->forward(expected.at("ids"));
    const double diff = bert_max_diff(logits, expected.at("logits"));
    std::printf("  transformers -> ddpx (%s): max |diff| %.3g\n", folder, diff);
    EXPECT_LE(diff, kBertTolerance);
  }
}

TEST(HfBertTest, ExportLoadsInTransformersWithDdpxLogits) {
  ASSERT_TRUE(test::python_has_module("transformers"));
  test::TempDir dir;
  torch::manual_seed(1);
  Bert model(small_bert());
  model->eval();
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
  export_hf_bert(*model, dir.file("out"));
  auto ids = torch::randint(0, 101, {2, 16}, torch::kInt64);
  io::write_safetensors(dir.file("ddpx.safetensors"),
                        {{"ids", ids}, {"logits", model->forward(ids)}});
  auto read = test::run_python(std::string(kSmallBertConfig) + "d = '" + dir.path() + R"('
m, info = BertForMaskedLM.from_pretrained(d + "/out", output_loading_info=True)
assert not any(info.values()), info
assert m.config.num_hidden_layers == 2 and m.config.vocab_size == 101
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
  EXPECT_LE(diff, kBertTolerance);
}

TEST(HfBertTest, ConfigThatDisagreesIsOneLine) {
  test::TempDir dir;
  Bert model(small_bert());
  export_hf_bert(*model, dir.file("out"));
  BertOptions wider = small_bert();
  wider.hidden_size = 64;
  Bert other(wider);
  try {
    load_hf_bert(dir.file("out"), *other, "wide-bert");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), "config.json has hidden_size 32, the model wide-bert has 64"))
        << e.what();
  }
}

// bert-base from the zoo: BertForMaskedLM's names and shapes (transformers' own model at
// BertConfig's defaults) and the count of bert_parameter_count.
TEST(HfBertTest, ZooBertBaseHasBertForMaskedLmsParameters) {
  ASSERT_TRUE(test::python_has_module("transformers"));
  auto listed = test::run_python(R"(
import os
os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import BertConfig, BertForMaskedLM
m = BertForMaskedLM(BertConfig())
for k, v in m.named_parameters():
    print("P", k, "x".join(map(str, v.shape)))
)");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  std::set<std::string> theirs;
  std::istringstream in(listed.output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("P ", 0) == 0) theirs.insert(line.substr(2));
  ModelConfig config;
  config.num_classes = 30522;
  auto module = create_model("bert-base", config);
  std::set<std::string> ours;
  int64_t count = 0;
  for (const auto& p : module.ptr()->named_parameters()) {
    std::string shape;
    for (int64_t s : p.value().sizes()) shape += (shape.empty() ? "" : "x") + std::to_string(s);
    ours.insert(p.key() + " " + shape);
    count += p.value().numel();
  }
  EXPECT_EQ(ours, theirs);
  EXPECT_EQ(count, model_parameter_count(find_model("bert-base"), config));
}

}  // namespace
}  // namespace ddpx::models
