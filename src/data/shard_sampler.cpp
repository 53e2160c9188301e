#include "data/shard_sampler.h"

#include <algorithm>
#include <random>

#include "core/error.h"

namespace ddpx::data {
namespace shard_sampler_detail {

// A stream keyed by (seed, epoch, what): what = 0 the shard order, 1 + r rank r's shuffle.
std::mt19937_64 stream(uint64_t seed, uint64_t epoch, uint64_t what) {
  std::seed_seq seq{static_cast<uint32_t>(seed),
                    static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(epoch),
                    static_cast<uint32_t>(epoch >> 32),
                    static_cast<uint32_t>(what),
                    static_cast<uint32_t>(what >> 32),
                    2u,  // so never data/batch_source.h's streams of the same numbers
                    0u};
  return std::mt19937_64(seq);
}

// Fisher-Yates with a portable draw (std::shuffle's is the library's own).
template <typename T>
void shuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng() % i]);
}

}  // namespace shard_sampler_detail

ShardSampler::ShardSampler(std::vector<int32_t> shard_of, SamplerOptions options)
    : options_(options) {
  DDPX_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
             ErrorKind::kUsage, "sampler rank {} of world size {}: expected 0 <= rank < world",
             options.rank, options.world_size);
  DDPX_CHECK(options.block == 0, ErrorKind::kUsage,
             "--deterministic is not available with --dataset shards (a rank reads its own "
             "shards, so a global batch depends on the world size); train without it, or on the "
             "image folder itself");
  for (size_t i = 0; i < shard_of.size(); ++i) {
    const int32_t s = shard_of[i];
    DDPX_CHECK(s >= 0, ErrorKind::kInternal, "negative shard number {}", s);
    if (static_cast<size_t>(s) >= shards_.size()) shards_.resize(s + 1);
    shards_[s].push_back(static_cast<int64_t>(i));
  }
  total_ = static_cast<int64_t>(shard_of.size());
  const int64_t w = options.world_size;
  num_samples_ = options.drop_last ? total_ / w : (total_ + w - 1) / w;
}

std::vector<std::vector<int64_t>> ShardSampler::plan(int64_t epoch) const {
  const int64_t w = options_.world_size;
  std::vector<size_t> order(shards_.size());
  for (size_t s = 0; s < order.size(); ++s) order[s] = s;
  if (options_.shuffle) {
    auto rng = shard_sampler_detail::stream(options_.seed, epoch, 0);
    shard_sampler_detail::shuffle(order, rng);
  }
  // Deal each shard to the rank with the fewest samples so far (the lowest rank on a tie).
  std::vector<std::vector<int64_t>> ranks(w);
  for (size_t s : order) {
    auto& least = *std::min_element(ranks.begin(), ranks.end(), [](const auto& a, const auto& b) {
      return a.size() < b.size();
    });
    least.insert(least.end(), shards_[s].begin(), shards_[s].end());
  }
  // Move what is over num_samples_ to the ranks short of it, in rank order.
  std::vector<int64_t> spare;
  for (auto& r : ranks)
    if (static_cast<int64_t>(r.size()) > num_samples_) {
      spare.insert(spare.end(), r.begin() + num_samples_, r.end());
      r.resize(num_samples_);
    }
  size_t next = 0;
  for (auto& r : ranks)
    while (static_cast<int64_t>(r.size()) < num_samples_ && next < spare.size())
      r.push_back(spare[next++]);
  return ranks;  // with drop_last, the spare beyond every rank's room is this epoch's drop
}

std::vector<int64_t> ShardSampler::indices(int64_t epoch) const {
  std::vector<int64_t> mine = std::move(plan(epoch)[options_.rank]);
  if (options_.shuffle) {
    auto rng = shard_sampler_detail::stream(options_.seed, epoch, 1 + options_.rank);
    shard_sampler_detail::shuffle(mine, rng);
  }
  // Pad by repeating from the start; a rank with nothing at all (fewer samples than ranks)
  // repeats the set's first samples.
  const size_t have = mine.size();
  for (size_t i = 0; static_cast<int64_t>(mine.size()) < num_samples_; ++i)
    mine.push_back(have > 0 ? mine[i % have] : static_cast<int64_t>(i % total_));
  return mine;
}

std::string ShardSampler::describe() const {
  const int64_t w = options_.world_size;
  const int64_t repeated = std::max<int64_t>(num_samples_ * w - total_, 0);
  const int64_t dropped = std::max<int64_t>(total_ - num_samples_ * w, 0);
  int64_t shards = 0;  // those with a sample of this split
  for (const auto& s : shards_) shards += !s.empty();
  return fmt::format(
      "shards: {} over {} rank(s), {} samples each an epoch: every one of the {} once{}", shards, w,
      num_samples_, total_,
      repeated > 0  ? fmt::format(", {} repeated to even the ranks", repeated)
      : dropped > 0 ? fmt::format(" but {} (drop_last)", dropped)
                    : "");
}

}  // namespace ddpx::data
