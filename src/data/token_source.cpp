#include "data/token_source.h"

#include "data/token_windows.h"

namespace ddpx::data {

TokenSource::TokenSource(const Dataset& dataset, std::optional<uint64_t> window_seed)
    : dataset_(dataset), window_seed_(window_seed) {}

int64_t TokenSource::size() const { return dataset_.size(); }

Batch TokenSource::gather(const int64_t* indices, int64_t count, int64_t epoch,
                          int64_t /*batch_index*/) const {
  const int64_t offset = window_seed_ ? window_offset(*window_seed_, epoch, dataset_.seq_len) : 0;
  return window_batch(dataset_, indices, count, offset);
}

}  // namespace ddpx::data
