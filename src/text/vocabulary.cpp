#include "text/vocabulary.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "text/hf_bpe.h"

namespace ddpx::text {
namespace {

// The first byte that is not white space, or 0 for an empty file.
char first_byte(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in.good(), ErrorKind::kData,
             "{}: no such vocabulary; give the vocab.json that `ddpx data tokenize` wrote beside "
             "the training data, or GPT-2's rank file (`ddpx data download gpt2-vocab`)",
             path);
  char c = 0;
  while (in.get(c)) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return c;
  }
  return 0;
}

}  // namespace

Vocabulary Vocabulary::load(const std::string& path) {
  Vocabulary v;
  v.path_ = path;
  if (is_hf_bpe(path) || first_byte(path) != '{') {
    v.bpe_.emplace(BpeTokenizer::from_file(path));
    return v;
  }
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kData, "{}: not JSON ({}); expected the vocab.json of `ddpx data tokenize`",
         path, e.what());
  }
  if (json.is_object() && json.value("tokenizer", std::string()) == "gpt2") {
    auto it = json.find("rank_file");
    DDPX_CHECK(it != json.end() && it->is_string(), ErrorKind::kData,
               "{}: a gpt2 vocabulary without \"rank_file\"; tokenize the data again with `ddpx "
               "data tokenize --tokenizer gpt2`, or give the rank file itself to --vocab",
               path);
    std::filesystem::path ranks(it->get<std::string>());
    if (ranks.is_relative()) ranks = std::filesystem::path(path).parent_path() / ranks;
    v.bpe_.emplace(BpeTokenizer::from_file(ranks.string()));
    return v;
  }
  v.chars_.emplace(CharTokenizer::load(path));  // its own error for anything else
  return v;
}

std::vector<uint32_t> Vocabulary::encode(std::string_view text, const std::string& source) const {
  if (bpe_) return bpe_->encode(text);
  std::vector<uint32_t> out;
  chars_->encode(text, 0, text.size(), source, out);
  return out;
}

std::string Vocabulary::decode(const std::vector<uint32_t>& tokens) const {
  for (uint32_t t : tokens) {
    DDPX_CHECK(t < vocab_size(), ErrorKind::kData,
               "token {} is past the {} tokens of {}; give the vocabulary of the data the model "
               "was trained on",
               t, vocab_size(), path_);
  }
  return bpe_ ? bpe_->decode(tokens) : chars_->decode(tokens);
}

int64_t Vocabulary::vocab_size() const { return bpe_ ? bpe_->vocab_size() : chars_->vocab_size(); }

std::optional<uint32_t> Vocabulary::end_of_text() const {
  if (bpe_) return bpe_->end_of_text();
  return std::nullopt;
}

}  // namespace ddpx::text
