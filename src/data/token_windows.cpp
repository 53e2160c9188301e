// Token files as windows (see token_windows.h).
#include "data/token_windows.h"

#include <filesystem>
#include <random>

#include "core/error.h"
#include "data/masked_lm.h"
#include "io/token_file.h"

namespace ddpx::data {
namespace {

Dataset read_split(const std::string& path, const std::string& name, int64_t seq_len) {
  DDPX_CHECK(std::filesystem::exists(path), ErrorKind::kData,
             "{}: no such token file; write train.bin and val.bin with `ddpx data tokenize FILE "
             "--tokenizer char --out DIR` and pass --data_dir DIR",
             path);
  Dataset d;
  d.name = name;
  d.tokens = io::read_token_file(path);
  d.seq_len = seq_len;
  DDPX_CHECK(window_count(d.tokens.size(0), seq_len) >= 1, ErrorKind::kData,
             "{} holds {} tokens, fewer than one window of --seq_len {} + 1; give a shorter "
             "--seq_len or more text",
             path, d.tokens.size(0), seq_len);
  return d;
}

}  // namespace

int64_t window_count(int64_t tokens, int64_t seq_len) {
  return seq_len >= 1 && tokens > seq_len ? (tokens - seq_len) / seq_len : 0;
}

int64_t window_offset(uint64_t seed, int64_t epoch, int64_t seq_len) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch), 0x746f6bu};
  std::mt19937_64 rng(seq);
  return static_cast<int64_t>(rng() % static_cast<uint64_t>(seq_len));
}

DatasetSplits load_token_dataset(const std::string& dir, int64_t seq_len, int64_t vocab_size,
                                 const std::string& masked_lm_model, uint64_t seed) {
  DDPX_CHECK(seq_len >= 1, ErrorKind::kUsage,
             "--dataset tokens needs --seq_len N (the model's input length), got {}", seq_len);
  std::shared_ptr<MaskedLm> mlm;
  if (!masked_lm_model.empty()) {
    mlm = std::make_shared<MaskedLm>(read_masked_lm(dir, masked_lm_model));
    mlm->seed = seed;
    if (vocab_size <= 0) vocab_size = mlm->vocab_size;
    DDPX_CHECK(mlm->mask_token < vocab_size, ErrorKind::kUsage,
               "--vocab_size {} does not hold [MASK] ({} in {}/vocab.json); leave --vocab_size out",
               vocab_size, mlm->mask_token, dir);
    mlm->vocab_size = vocab_size;
  }
  DatasetSplits splits;
  splits.train = read_split(dir + "/train.bin", "tokens", seq_len);
  splits.test = read_split(dir + "/val.bin", "tokens", seq_len);
  splits.source = dir;
  int64_t vocab = vocab_size;
  for (Dataset* d : {&splits.train, &splits.test}) {
    const int64_t top = d->tokens.max().item<int64_t>();
    const std::string path = dir + (d == &splits.train ? "/train.bin" : "/val.bin");
    DDPX_CHECK(vocab_size <= 0 || top < vocab_size, ErrorKind::kData,
               "{} holds token {}, outside the vocabulary of {} (--vocab_size); give the "
               "tokenizer's vocabulary size",
               path, top, vocab_size);
    DDPX_CHECK(d->tokens.min().item<int64_t>() >= 0, ErrorKind::kData,
               "{} holds a negative token id; it is not a token file", path);
    if (vocab_size <= 0) vocab = std::max(vocab, top + 1);
  }
  splits.train.num_classes = splits.test.num_classes = vocab;
  splits.train.masked_lm = splits.test.masked_lm = mlm;
  return splits;
}

namespace {

// windows: (n, seq_len + 1) -> inputs (n, seq_len), targets (n, seq_len)
Batch split_windows(const torch::Tensor& windows, int64_t t) {
  return Batch{windows.narrow(1, 0, t).contiguous(), windows.narrow(1, 1, t).contiguous()};
}

// SplitMix64's finaliser: a well-mixed 64-bit value from a counter, cheap enough per sample.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

Batch window_batch(const Dataset& d, const int64_t* indices, int64_t n, int64_t offset) {
  const int64_t t = d.seq_len;
  torch::Tensor windows = torch::empty({n, t + 1}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    windows[i].copy_(d.tokens.narrow(0, offset + indices[i] * t, t + 1));
  }
  return split_windows(windows, t);
}

int64_t random_window_start(uint64_t seed, int64_t epoch, int64_t sample, int64_t tokens,
                            int64_t seq_len) {
  const uint64_t starts = static_cast<uint64_t>(tokens - seq_len);
  const uint64_t h = mix(mix(mix(seed ^ 0x72616e64ULL) ^ static_cast<uint64_t>(epoch)) ^
                         static_cast<uint64_t>(sample));
  // The modulo's bias is below starts / 2^64: nothing for any token file.
  return static_cast<int64_t>(h % starts);
}

Batch random_window_batch(const Dataset& d, const int64_t* indices, int64_t n, uint64_t seed,
                          int64_t epoch) {
  const int64_t t = d.seq_len, tokens = d.tokens.size(0);
  torch::Tensor windows = torch::empty({n, t + 1}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    windows[i].copy_(
        d.tokens.narrow(0, random_window_start(seed, epoch, indices[i], tokens, t), t + 1));
  }
  return split_windows(windows, t);
}

}  // namespace ddpx::data
