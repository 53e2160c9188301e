#include "models/hf_gpt2.h"

#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/hf_config.h"
#include "models/weights.h"

namespace ddpx::models {
namespace {

namespace fs = std::filesystem;

const std::string kPrefix = "transformer.";
const std::string kLmHead = "lm_head.weight";
const std::string kWte = "transformer.wte.weight";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}
bool starts_with(const std::string& s, const std::string& head) { return s.rfind(head, 0) == 0; }

// GPT-2's Conv1D layers: weight (in, out), the transpose of nn.Linear's.
bool is_conv1d_weight(const std::string& name) {
  for (const char* tail :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, tail)) return true;
  return false;
}

// A name GPT2LMHeadModel has (lm_head aside): the embeddings, the final norm, a block's layers.
bool is_gpt2_name(const std::string& name) {
  static const std::set<std::string> top = {kWte, "transformer.wpe.weight",
                                            "transformer.ln_f.weight", "transformer.ln_f.bias"};
  if (top.count(name)) return true;
  if (!starts_with(name, "transformer.h.")) return false;
  size_t dot = name.find('.', 14);
  if (dot == std::string::npos || dot == 14) return false;
  for (size_t i = 14; i < dot; ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  const std::string layer = name.substr(dot + 1);
  for (const char* part : {"ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"})
    for (const char* kind : {".weight", ".bias"})
      if (layer == std::string(part) + kind) return true;
  return false;
}

std::string shape_of(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

}  // namespace

std::string hf_gpt2_config_json(const HfGpt2Shape& shape, double dropout) {
  nlohmann::ordered_json config = {
      {"activation_function", "gelu_new"},
      {"architectures", {"GPT2LMHeadModel"}},
      {"attn_pdrop", dropout},
      {"embd_pdrop", dropout},
      {"initializer_range", 0.02},
      {"layer_norm_epsilon", 1e-5},
      {"model_type", "gpt2"},
      {"n_embd", shape.n_embd},
      {"n_head", shape.n_head},
      {"n_inner", nullptr},
      {"n_layer", shape.n_layer},
      {"n_positions", shape.n_positions},
      {"reorder_and_upcast_attn", false},
      {"resid_pdrop", dropout},
      {"scale_attn_by_inverse_layer_idx", false},
      {"scale_attn_weights", true},
      {"tie_word_embeddings", true},
      {"dtype", "float32"},
      {"use_cache", true},
      {"vocab_size", shape.vocab_size},
  };
  // GPT-2's <|endoftext|>, where the vocabulary has it (a character vocabulary does not).
  if (shape.vocab_size > 50256) {
    config["bos_token_id"] = 50256;
    config["eos_token_id"] = 50256;
  }
  return config.dump(2) + "\n";
}

HfGpt2Shape read_hf_gpt2_config(const std::string& dir) {
  const HfConfig config(dir, {"gpt2", "GPT-2", "GPT2LMHeadModel", "GPT"});
  HfGpt2Shape s;
  s.vocab_size = config.get<int64_t>("vocab_size", 50257);
  s.n_positions = config.get<int64_t>("n_positions", 1024);
  s.n_embd = config.get<int64_t>("n_embd", 768);
  s.n_layer = config.get<int64_t>("n_layer", 12);
  s.n_head = config.get<int64_t>("n_head", 12);
  config.expect_positive({{"vocab_size", s.vocab_size},
                          {"n_positions", s.n_positions},
                          {"n_embd", s.n_embd},
                          {"n_layer", s.n_layer},
                          {"n_head", s.n_head}});
  DDPX_CHECK(s.n_embd % s.n_head == 0, ErrorKind::kData,
             "{}: n_embd {} is not a multiple of n_head {}", config.path(), s.n_embd, s.n_head);

  // What else GPT2LMHeadModel's arithmetic depends on must be GPT-2's, which ddpx's GPT computes.
  const std::string activation = config.get<std::string>("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    config.refuse("activation_function", activation, "gelu_new (GELU's tanh form)");
  const double epsilon = config.get<double>("layer_norm_epsilon", 1e-5);
  if (std::abs(epsilon - 1e-5) > 1e-12)
    config.refuse("layer_norm_epsilon", fmt::format("{}", epsilon), "1e-5");
  const int64_t inner = config.get<int64_t>("n_inner", 4 * s.n_embd);
  if (inner != 4 * s.n_embd)
    config.refuse("n_inner", std::to_string(inner), "an MLP 4 x n_embd wide (n_inner null)");
  if (!config.get<bool>("tie_word_embeddings", true))
    config.refuse("tie_word_embeddings", "false", "lm_head tied to wte");
  if (config.get<bool>("add_cross_attention", false))
    config.refuse("add_cross_attention", "true", "no cross-attention");
  if (!config.get<bool>("scale_attn_weights", true))
    config.refuse("scale_attn_weights", "false", "attention scaled by 1/sqrt(head size)");
  if (config.get<bool>("scale_attn_by_inverse_layer_idx", false))
    config.refuse("scale_attn_by_inverse_layer_idx", "true", "no per-layer attention scale");
  return s;
}

void check_hf_gpt2_shape(const HfGpt2Shape& file, const HfGpt2Shape& model,
                         const std::string& model_name, const std::string& dir) {
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"n_layer", {file.n_layer, model.n_layer}},
      {"n_head", {file.n_head, model.n_head}},
      {"n_embd", {file.n_embd, model.n_embd}},
      {"n_positions", {file.n_positions, model.n_positions}},
      {"vocab_size", {file.vocab_size, model.vocab_size}},
  };
  for (const auto& [key, values] : fields)
    DDPX_CHECK(values.first == values.second, ErrorKind::kUsage,
               "--pretrained {}: config.json has {} {}, the model {} has {}; choose the --model "
               "(and data) of the folder's size ({} layers, {} heads, {} wide, {} positions, "
               "vocabulary {})",
               dir, key, values.first, model_name, values.second, file.n_layer, file.n_head,
               file.n_embd, file.n_positions, file.vocab_size);
}

std::map<std::string, torch::Tensor> to_hf_gpt2_tensors(const torch::nn::Module& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (name == kLmHead) continue;  // tied to wte: transformers leaves it out of the file
    DDPX_CHECK(is_gpt2_name(name), ErrorKind::kUsage,
               "cannot write the {} model as GPT-2: its parameter '{}' has no place in "
               "transformers' GPT2LMHeadModel; --format hf takes a GPT-2-family model",
               model.name(), name);
    torch::Tensor t = item.value().detach().to(torch::kCPU);
    out[name] = (is_conv1d_weight(name) ? t.t() : t).contiguous();
  }
  return out;
}

std::map<std::string, torch::Tensor> from_hf_gpt2_tensors(std::map<std::string, torch::Tensor> hf,
                                                          const std::string& source) {
  std::map<std::string, torch::Tensor> out;
  torch::Tensor lm_head;
  for (auto& [stored, tensor] : hf) {
    if (stored == kLmHead) {
      lm_head = tensor;
      continue;
    }
    // Saved from GPT2Model (the hub's GPT-2 files) the names lack the prefix.
    std::string name = starts_with(stored, kPrefix) ? stored : kPrefix + stored;
    // The causal mask older transformers saved with the weights: ddpx's attention is causal.
    if (ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    if (is_conv1d_weight(name)) {
      DDPX_CHECK(tensor.dim() == 2, ErrorKind::kData, "{}: {} has shape {}, expected 2 dimensions",
                 source, stored, shape_of(tensor));
      tensor = tensor.t().contiguous();
    }
    out[name] = tensor;
  }
  if (lm_head.defined()) {
    auto wte = out.find(kWte);
    DDPX_CHECK(wte != out.end() && lm_head.sizes() == wte->second.sizes() &&
                   torch::equal(lm_head, wte->second),
               ErrorKind::kData,
               "{}: lm_head.weight differs from transformer.wte.weight; ddpx's GPT ties the two "
               "(tie_word_embeddings), so it cannot hold these weights",
               source);
  }
  return out;
}

std::map<std::string, torch::Tensor> read_hf_weights(const std::string& dir) {
  const fs::path folder(dir);
  if (fs::is_regular_file(folder / "model.safetensors"))
    return io::read_safetensors((folder / "model.safetensors").string()).tensors;
  const fs::path index = folder / "model.safetensors.index.json";
  if (fs::is_regular_file(index)) {
    // Shards: {"weight_map": {tensor name: shard file name}}, each shard a safetensors file.
    nlohmann::json json;
    try {
      json = nlohmann::json::parse(read_file(index.string()));
    } catch (const nlohmann::json::exception& e) {
      fail(ErrorKind::kData, "{}: not JSON ({})", index.string(), e.what());
    }
    DDPX_CHECK(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
               ErrorKind::kData, "{}: no \"weight_map\" object naming each tensor's shard",
               index.string());
    std::map<std::string, std::set<std::string>> shards;
    for (const auto& [name, file] : json["weight_map"].items()) {
      DDPX_CHECK(file.is_string(), ErrorKind::kData, "{}: the shard of {} is {}, expected a name",
                 index.string(), name, file.dump());
      const std::string shard = file.get<std::string>();
      DDPX_CHECK(!shard.empty() && shard.find('/') == std::string::npos && shard != "..",
                 ErrorKind::kData, "{}: shard \"{}\" is not a file name in the folder",
                 index.string(), shard);
      shards[shard].insert(name);
    }
    std::map<std::string, torch::Tensor> out;
    for (const auto& [shard, names] : shards) {
      const std::string path = (folder / shard).string();
      auto tensors = io::read_safetensors(path).tensors;
      for (const std::string& name : names) {
        auto it = tensors.find(name);
        DDPX_CHECK(it != tensors.end(), ErrorKind::kData, "{}: no tensor {}, which {} puts there",
                   path, name, index.string());
        out[name] = it->second;
      }
    }
    return out;
  }
  if (fs::is_regular_file(folder / "pytorch_model.bin"))
    return read_state_dict((folder / "pytorch_model.bin").string());
  fail(ErrorKind::kData,
       "{} has no model.safetensors (nor model.safetensors.index.json or pytorch_model.bin): a "
       "Hugging Face GPT-2 is a folder as transformers' save_pretrained writes it",
       dir);
}

HfGpt2Shape hf_gpt2_shape(const GptOptions& options) {
  return {options.vocab_size, options.block_size, options.n_embd, options.n_layer, options.n_head};
}

void export_hf_gpt2(const GptImpl& model, const std::string& dir) {
  DDPX_CHECK(model.options().bias, ErrorKind::kUsage,
             "cannot write a GPT without biases as GPT-2: transformers' GPT2LMHeadModel has them");
  auto tensors = to_hf_gpt2_tensors(model);
  std::error_code error;
  fs::create_directories(dir, error);
  DDPX_CHECK(!error, ErrorKind::kIo, "cannot create {}: {}", dir, error.message());
  io::write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                        {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(),
                    hf_gpt2_config_json(hf_gpt2_shape(model.options()), model.options().dropout));
}

std::string load_hf_gpt2(const std::string& dir, GptImpl& model, const std::string& model_name) {
  const HfGpt2Shape file = read_hf_gpt2_config(dir);
  check_hf_gpt2_shape(file, hf_gpt2_shape(model.options()), model_name, dir);
  // The tied head is transformer.wte.weight itself in ddpx's GPT: nothing of its own to load.
  load_named_tensors(model, from_hf_gpt2_tensors(read_hf_weights(dir), dir));
  return fmt::format(
      "loaded GPT-2 weights from {} ({} layers, {} heads, {} wide, {} positions, vocabulary {}; "
      "transformers' save_pretrained folder)",
      dir, file.n_layer, file.n_head, file.n_embd, file.n_positions, file.vocab_size);
}

}  // namespace ddpx::models
