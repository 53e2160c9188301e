// A language model's data: train.bin and val.bin token files (llm.c's format, io/token_file.h)
// from a folder, each split a token stream whose samples are windows of seq_len + 1 tokens
// (input the first seq_len, target the last seq_len: every position predicts the next token).
//
// Windows follow each other every seq_len tokens (neighbours share one token, as llm.c's
// loader), so an epoch reads the stream once. A training epoch starts its windows at an offset
// in [0, seq_len) drawn from (seed, epoch), so successive epochs cut the text at other places;
// evaluation reads the windows from offset 0. Which windows a rank reads in which step is the
// sampler's (data/sampler.h): a permutation seeded by (seed, epoch), so a run resumed mid-epoch
// reads what the uninterrupted one would have.
//
// Random windows (`--windows random`, nanoGPT's get_batch) instead start each training sample
// anywhere in the stream, uniformly in [0, tokens - seq_len). The start is drawn from (seed,
// epoch, sample index) only: the sampler gives every rank distinct indices in every step, so the
// ranks draw independently, a resumed run draws what the uninterrupted one would have, and a
// global batch draws the same windows on any world size. The epoch still has window_count()
// samples, so batch counts per rank stay equal; evaluation always reads stride windows.
#pragma once

#include <cstdint>
#include <string>

#include "core/names.h"
#include "data/batch_source.h"
#include "data/dataset.h"

namespace ddpx::data {

// How a training epoch cuts its windows (above).
enum class Windows { kStride, kRandom };
inline constexpr NameTable<Windows, 2> kWindowsNames{
    {{Windows::kStride, "stride"}, {Windows::kRandom, "random"}}};
inline const char* name(Windows w) { return name_of(kWindowsNames, w); }

// Reads DIR/train.bin and DIR/val.bin. `vocab_size` 0: the largest token of either + 1;
// otherwise a token at or past it is an error naming the file. Throws ddpx::Error(kData) for a
// missing or corrupt file, or a split shorter than one window. With `masked_lm_model` (BERT),
// both splits are masked-LM windows (data/masked_lm.h) from DIR/vocab.json, seeded by `seed`,
// and `vocab_size` 0 is the vocab.json's.
DatasetSplits load_token_dataset(const std::string& dir, int64_t seq_len, int64_t vocab_size,
                                 const std::string& masked_lm_model = "", uint64_t seed = 0);

// Windows of seq_len + 1 tokens every seq_len tokens, at any offset in [0, seq_len).
int64_t window_count(int64_t tokens, int64_t seq_len);

// The first window's start in a training epoch: in [0, seq_len), from (seed, epoch) only.
int64_t window_offset(uint64_t seed, int64_t epoch, int64_t seq_len);

// The windows `indices[0..n)` of `dataset` starting at `offset`: images = inputs (n, seq_len)
// int64, labels = targets (n, seq_len) int64.
Batch window_batch(const Dataset& dataset, const int64_t* indices, int64_t n, int64_t offset);

// A random window's start for sample `sample` of `epoch`: uniform in [0, tokens - seq_len), from
// (seed, epoch, sample) only.
int64_t random_window_start(uint64_t seed, int64_t epoch, int64_t sample, int64_t tokens,
                            int64_t seq_len);

// The random windows of samples `indices[0..n)` in `epoch`, as window_batch's.
Batch random_window_batch(const Dataset& dataset, const int64_t* indices, int64_t n, uint64_t seed,
                          int64_t epoch);

}  // namespace ddpx::data
