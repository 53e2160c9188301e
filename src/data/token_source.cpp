#include "data/token_source.h"

#include "data/masked_lm.h"

namespace ddpx::data {

TokenSource::TokenSource(const Dataset& dataset, std::optional<uint64_t> window_seed,
                         Windows windows)
    : dataset_(dataset), window_seed_(window_seed), windows_(windows) {}

int64_t TokenSource::size() const { return dataset_.size(); }

Batch TokenSource::gather(const int64_t* indices, int64_t count, int64_t epoch,
                          int64_t /*batch_index*/) const {
  Batch batch;
  if (window_seed_ && windows_ == Windows::kRandom) {
    batch = random_window_batch(dataset_, indices, count, *window_seed_, epoch);
  } else {
    const int64_t offset = window_seed_ ? window_offset(*window_seed_, epoch, dataset_.seq_len) : 0;
    batch = window_batch(dataset_, indices, count, offset);
  }
  // Evaluation (no window seed) masks as epoch 0 every time.
  if (dataset_.masked_lm)
    mask_windows(*dataset_.masked_lm, batch, indices, window_seed_ ? epoch : 0);
  return batch;
}

}  // namespace ddpx::data
