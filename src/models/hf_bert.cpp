#include "models/hf_bert.h"

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/hf_config.h"
#include "models/hf_gpt2.h"
#include "models/weights.h"

namespace ddpx::models {
namespace {

namespace fs = std::filesystem;

const std::string kWordEmbeddings = "bert.embeddings.word_embeddings.weight";
const std::string kDecoderWeight = "cls.predictions.decoder.weight";
const std::string kDecoderBias = "cls.predictions.decoder.bias";
const std::string kBias = "cls.predictions.bias";

bool bert_starts_with(const std::string& s, const std::string& head) {
  return s.rfind(head, 0) == 0;
}
bool bert_ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

std::string hf_bert_config_json(const BertOptions& o) {
  nlohmann::ordered_json config = {
      {"architectures", {"BertForMaskedLM"}},
      {"attention_probs_dropout_prob", o.dropout},
      {"classifier_dropout", nullptr},
      {"dtype", "float32"},
      {"hidden_act", "gelu"},
      {"hidden_dropout_prob", o.dropout},
      {"hidden_size", o.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", o.intermediate_size},
      {"layer_norm_eps", 1e-12},
      {"max_position_embeddings", o.max_position_embeddings},
      {"model_type", "bert"},
      {"num_attention_heads", o.num_attention_heads},
      {"num_hidden_layers", o.num_hidden_layers},
      {"pad_token_id", 0},
      {"position_embedding_type", "absolute"},
      {"tie_word_embeddings", true},
      {"type_vocab_size", o.type_vocab_size},
      {"use_cache", true},
      {"vocab_size", o.vocab_size},
  };
  return config.dump(2) + "\n";
}

BertOptions read_hf_bert_config(const std::string& dir) {
  const HfConfig config(dir, {"bert", "BERT", "BertForMaskedLM", "BERT"});
  BertOptions o;  // BertConfig's defaults are bert-base's, as BertOptions'
  o.vocab_size = config.get<int64_t>("vocab_size", o.vocab_size);
  o.hidden_size = config.get<int64_t>("hidden_size", o.hidden_size);
  o.num_hidden_layers = config.get<int64_t>("num_hidden_layers", o.num_hidden_layers);
  o.num_attention_heads = config.get<int64_t>("num_attention_heads", o.num_attention_heads);
  o.intermediate_size = config.get<int64_t>("intermediate_size", o.intermediate_size);
  o.max_position_embeddings =
      config.get<int64_t>("max_position_embeddings", o.max_position_embeddings);
  o.type_vocab_size = config.get<int64_t>("type_vocab_size", o.type_vocab_size);
  config.expect_positive({{"vocab_size", o.vocab_size},
                          {"hidden_size", o.hidden_size},
                          {"num_hidden_layers", o.num_hidden_layers},
                          {"num_attention_heads", o.num_attention_heads},
                          {"intermediate_size", o.intermediate_size},
                          {"max_position_embeddings", o.max_position_embeddings},
                          {"type_vocab_size", o.type_vocab_size}});
  DDPX_CHECK(o.hidden_size % o.num_attention_heads == 0, ErrorKind::kData,
             "{}: hidden_size {} is not a multiple of num_attention_heads {}", config.path(),
             o.hidden_size, o.num_attention_heads);
  const std::string act = config.get<std::string>("hidden_act", "gelu");
  if (act != "gelu") config.refuse("hidden_act", act, "gelu (the exact, erf form)");
  const double eps = config.get<double>("layer_norm_eps", 1e-12);
  if (std::abs(eps - 1e-12) > 1e-18)
    config.refuse("layer_norm_eps", fmt::format("{}", eps), "1e-12");
  const std::string positions = config.get<std::string>("position_embedding_type", "absolute");
  if (positions != "absolute")
    config.refuse("position_embedding_type", positions, "absolute (learned) positions");
  if (!config.get<bool>("tie_word_embeddings", true))
    config.refuse("tie_word_embeddings", "false", "the decoder tied to the word embedding");
  if (config.get<bool>("is_decoder", false))
    config.refuse("is_decoder", "true", "a bidirectional encoder");
  return o;
}

std::map<std::string, torch::Tensor> from_hf_bert_tensors(std::map<std::string, torch::Tensor> hf,
                                                          const std::string& source) {
  std::map<std::string, torch::Tensor> out;
  torch::Tensor decoder_weight, decoder_bias;
  for (auto& [stored, tensor] : hf) {
    std::string name = stored;
    if (name == kDecoderWeight) {
      decoder_weight = tensor;
      continue;
    }
    if (name == kDecoderBias) {
      decoder_bias = tensor;
      continue;
    }
    // Not in BertForMaskedLM: the position-id buffer, BertModel's pooler, BertForPreTraining's
    // next-sentence head.
    if (name == "bert.embeddings.position_ids" || bert_starts_with(name, "bert.pooler.") ||
        bert_starts_with(name, "cls.seq_relationship."))
      continue;
    if (bert_ends_with(name, ".gamma")) name = name.substr(0, name.size() - 6) + ".weight";
    if (bert_ends_with(name, ".beta")) name = name.substr(0, name.size() - 5) + ".bias";
    out[name] = tensor;
  }
  if (decoder_weight.defined()) {
    auto word = out.find(kWordEmbeddings);
    DDPX_CHECK(word != out.end() && decoder_weight.sizes() == word->second.sizes() &&
                   torch::equal(decoder_weight, word->second),
               ErrorKind::kData,
               "{}: {} differs from {}; ddpx's BERT ties the two (tie_word_embeddings), so it "
               "cannot hold these weights",
               source, kDecoderWeight, kWordEmbeddings);
  }
  if (decoder_bias.defined()) {
    auto bias = out.find(kBias);
    if (bias == out.end()) {
      out[kBias] = decoder_bias;
    } else {
      DDPX_CHECK(
          decoder_bias.sizes() == bias->second.sizes() && torch::equal(decoder_bias, bias->second),
          ErrorKind::kData, "{}: {} differs from {}, which BertForMaskedLM ties", source,
          kDecoderBias, kBias);
    }
  }
  return out;
}

void export_hf_bert(const BertImpl& model, const std::string& dir) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : model.named_parameters(/*recurse=*/true))
    tensors[item.key()] = item.value().detach().to(torch::kCPU).contiguous();
  std::error_code error;
  fs::create_directories(dir, error);
  DDPX_CHECK(!error, ErrorKind::kIo, "cannot create {}: {}", dir, error.message());
  io::write_safetensors((fs::path(dir) / "model.safetensors").string(), tensors,
                        {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(), hf_bert_config_json(model.options()));
}

std::string load_hf_bert(const std::string& dir, BertImpl& model, const std::string& model_name) {
  const BertOptions file = read_hf_bert_config(dir);
  const BertOptions& mine = model.options();
  const std::pair<const char*, std::pair<int64_t, int64_t>> fields[] = {
      {"num_hidden_layers", {file.num_hidden_layers, mine.num_hidden_layers}},
      {"num_attention_heads", {file.num_attention_heads, mine.num_attention_heads}},
      {"hidden_size", {file.hidden_size, mine.hidden_size}},
      {"intermediate_size", {file.intermediate_size, mine.intermediate_size}},
      {"max_position_embeddings", {file.max_position_embeddings, mine.max_position_embeddings}},
      {"type_vocab_size", {file.type_vocab_size, mine.type_vocab_size}},
      {"vocab_size", {file.vocab_size, mine.vocab_size}},
  };
  for (const auto& [key, values] : fields)
    DDPX_CHECK(values.first == values.second, ErrorKind::kUsage,
               "--pretrained {}: config.json has {} {}, the model {} has {}; choose the --model "
               "(and data) of the folder's size ({} layers, {} heads, {} wide, {} positions, "
               "vocabulary {})",
               dir, key, values.first, model_name, values.second, file.num_hidden_layers,
               file.num_attention_heads, file.hidden_size, file.max_position_embeddings,
               file.vocab_size);
  load_named_tensors(model, from_hf_bert_tensors(read_hf_weights(dir), dir));
  return fmt::format(
      "loaded BERT weights from {} ({} layers, {} heads, {} wide, {} positions, vocabulary {}; "
      "transformers' BertForMaskedLM folder)",
      dir, file.num_hidden_layers, file.num_attention_heads, file.hidden_size,
      file.max_position_embeddings, file.vocab_size);
}

}  // namespace ddpx::models
