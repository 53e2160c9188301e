#include "data/batch_source.h"

namespace ddpx::data {
namespace stream_detail {

// seed_seq keeps 32 bits per value, so 64-bit values go in as two halves.
uint32_t lo(uint64_t v) { return static_cast<uint32_t>(v); }
uint32_t hi(uint64_t v) { return static_cast<uint32_t>(v >> 32); }

}  // namespace stream_detail

std::mt19937_64 batch_stream(uint64_t seed, uint64_t epoch, uint64_t batch) {
  std::seed_seq seq{stream_detail::lo(seed),  stream_detail::hi(seed),  stream_detail::lo(epoch),
                    stream_detail::hi(epoch), stream_detail::lo(batch), stream_detail::hi(batch)};
  return std::mt19937_64(seq);
}

std::mt19937_64 sample_stream(uint64_t seed, uint64_t epoch, uint64_t sample) {
  // A fourth pair, so never the batch stream of the same numbers.
  std::seed_seq seq{stream_detail::lo(seed),
                    stream_detail::hi(seed),
                    stream_detail::lo(epoch),
                    stream_detail::hi(epoch),
                    stream_detail::lo(sample),
                    stream_detail::hi(sample),
                    1u,
                    0u};
  return std::mt19937_64(seq);
}

}  // namespace ddpx::data
