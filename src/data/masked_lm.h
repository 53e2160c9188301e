// BERT's masked-language-model objective on token windows (data/token_windows.h), applied as a
// batch is cut: in each window of seq_len tokens, round(0.15 * seq_len) positions are chosen
// among the tokens that are not special ([PAD], [UNK], [CLS], [SEP], [MASK]), exactly that many
// per window as Google's create_pretraining_data (so every rank's mean loss weighs its tokens as
// the one process does, and DDP equals one process on the same global batch); of the chosen,
// 80% become [MASK], 10% a token drawn uniformly from the vocabulary, 10% stay. The label of a
// chosen position is its original token, of every other position -100 (ignored by the loss and
// the accuracy).
//
// The draw for a window depends on (seed, epoch, the window's index) only: reproducible, other
// on every rank (each rank reads other windows) and the same whatever the number of ranks, the
// batch split or the loader threads. Evaluation windows draw with epoch 0, so every evaluation
// masks the same positions.
//
// The special tokens' ids come from the vocab.json that `ddpx data tokenize --tokenizer
// wordpiece` writes beside the token files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/batch_source.h"

namespace ddpx::data {

inline constexpr int64_t kIgnoreLabel = -100;  // torch's cross-entropy ignore_index
inline constexpr double kMaskedShare = 0.15;

struct MaskedLm {
  int64_t mask_token = 0;
  int64_t vocab_size = 0;        // random replacements are drawn from [0, vocab_size)
  std::vector<int64_t> special;  // never chosen
  uint64_t seed = 0;
};

// Reads DIR/vocab.json; throws kData naming the file when it is missing, not a wordpiece
// vocabulary or without [MASK] (`model` names what needs it in the message).
MaskedLm read_masked_lm(const std::string& dir, const std::string& model);

// The positions chosen in each window.
int64_t masked_per_window(int64_t seq_len);

// Masks batch.images (n, seq_len) in place and makes batch.labels the targets; window i is the
// sample indices[i].
void mask_windows(const MaskedLm& mlm, Batch& batch, const int64_t* indices, int64_t epoch);

}  // namespace ddpx::data
