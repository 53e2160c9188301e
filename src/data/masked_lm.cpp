#include "data/masked_lm.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ddpx::data {

MaskedLm read_masked_lm(const std::string& dir, const std::string& model) {
  const std::string path = dir + "/vocab.json";
  auto refuse = [&](const std::string& what) {
    fail(ErrorKind::kData,
         "{}: {}; {} trains with masked-LM and needs BERT's [MASK]: tokenize the text with "
         "`ddpx data tokenize FILE --tokenizer wordpiece --vocab vocab.txt --out {}`",
         path, what, model, dir);
  };
  if (!std::filesystem::is_regular_file(path)) refuse("no such file");
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception&) {
    refuse("not JSON");
  }
  if (!json.is_object() || json.value("tokenizer", std::string()) != "wordpiece")
    refuse(fmt::format("the tokens are not WordPiece's (tokenizer {})",
                       json.is_object() ? json.value("tokenizer", std::string("?")) : "?"));
  auto special = json.find("special_tokens");
  if (special == json.end() || !special->is_object() || !special->contains("[MASK]") ||
      !(*special)["[MASK]"].is_number_integer())
    refuse("the vocab.txt it was tokenized with has no [MASK] token");
  MaskedLm mlm;
  mlm.mask_token = (*special)["[MASK]"].get<int64_t>();
  for (const auto& [name, id] : special->items())
    if (id.is_number_integer()) mlm.special.push_back(id.get<int64_t>());
  std::sort(mlm.special.begin(), mlm.special.end());
  auto size = json.find("vocab_size");
  if (size == json.end() || !size->is_number_integer() || size->get<int64_t>() <= mlm.mask_token)
    refuse("no vocab_size above the [MASK] id");
  mlm.vocab_size = size->get<int64_t>();
  return mlm;
}

int64_t masked_per_window(int64_t seq_len) {
  return std::max<int64_t>(1, std::llround(kMaskedShare * static_cast<double>(seq_len)));
}

void mask_windows(const MaskedLm& mlm, Batch& batch, const int64_t* indices, int64_t epoch) {
  torch::Tensor inputs = batch.images.contiguous();
  const int64_t n = inputs.size(0), t = inputs.size(1);
  torch::Tensor labels = torch::full({n, t}, kIgnoreLabel, torch::kInt64);
  auto* in = inputs.data_ptr<int64_t>();
  auto* out = labels.data_ptr<int64_t>();
  const int64_t k = masked_per_window(t);
  std::vector<int64_t> candidates;
  for (int64_t i = 0; i < n; ++i) {
    int64_t* x = in + i * t;
    int64_t* y = out + i * t;
    std::seed_seq seq{static_cast<uint32_t>(mlm.seed),
                      static_cast<uint32_t>(mlm.seed >> 32),
                      static_cast<uint32_t>(epoch),
                      static_cast<uint32_t>(indices[i]),
                      static_cast<uint32_t>(static_cast<uint64_t>(indices[i]) >> 32),
                      0x6d6c6du};
    std::mt19937_64 rng(seq);
    candidates.clear();
    for (int64_t p = 0; p < t; ++p)
      if (!std::binary_search(mlm.special.begin(), mlm.special.end(), x[p]))
        candidates.push_back(p);
    const auto chosen = static_cast<size_t>(std::min<int64_t>(k, candidates.size()));
    for (size_t c = 0; c < chosen; ++c) {  // a partial Fisher-Yates shuffle
      std::swap(candidates[c], candidates[c + rng() % (candidates.size() - c)]);
      const int64_t p = candidates[c];
      y[p] = x[p];
      const uint64_t r = rng() % 10;
      if (r < 8)
        x[p] = mlm.mask_token;
      else if (r == 8)
        x[p] = static_cast<int64_t>(rng() % static_cast<uint64_t>(mlm.vocab_size));
    }
  }
  batch.images = inputs;
  batch.labels = labels;
}

}  // namespace ddpx::data
