#include "data/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/types.h>

#include "core/error.h"

namespace ddpx::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, SamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  DDPX_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
             ErrorKind::kUsage, "sampler rank {} of world size {}: expected 0 <= rank < world",
             options.rank, options.world_size);
  DDPX_CHECK(dataset_size >= 0, ErrorKind::kInternal, "negative dataset size {}", dataset_size);
  const int64_t w = options.world_size;
  DDPX_CHECK(options.block >= 0, ErrorKind::kInternal, "negative sampler block {}", options.block);
  if (options.block > 0) {  // whole global batches of block * w
    const int64_t global = options.block * w;
    const int64_t batches =
        options.drop_last ? dataset_size / global : (dataset_size + global - 1) / global;
    num_samples_ = batches * options.block;
    return;
  }
  // As torch.utils.data.DistributedSampler.__init__.
  if (options.drop_last && dataset_size % w != 0)
    num_samples_ = (dataset_size - w + w - 1) / w;  // ceil((n - w) / w)
  else
    num_samples_ = (dataset_size + w - 1) / w;
  if (num_samples_ < 0) num_samples_ = 0;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  const int64_t n = dataset_size_, w = options_.world_size;
  std::vector<int64_t> all(n);
  if (options_.shuffle && n > 0) {
    // torch.Generator().manual_seed(seed + epoch); torch.randperm(n, generator=g)
    auto gen = at::detail::createCPUGenerator(options_.seed + static_cast<uint64_t>(epoch));
    auto perm = torch::randperm(n, gen, torch::kLong);
    std::copy(perm.data_ptr<int64_t>(), perm.data_ptr<int64_t>() + n, all.begin());
  } else {
    for (int64_t i = 0; i < n; ++i) all[i] = i;
  }
  const int64_t total = num_samples_ * w;
  if (!options_.drop_last) {
    // Pad by repeating from the start (several times over when n is tiny).
    for (int64_t i = 0; static_cast<int64_t>(all.size()) < total && n > 0; ++i)
      all.push_back(all[i % n]);
  } else {
    all.resize(total);
  }
  std::vector<int64_t> mine;
  mine.reserve(num_samples_);
  if (const int64_t b = options_.block; b > 0) {
    for (int64_t start = options_.rank * b; start < total; start += b * w)
      mine.insert(mine.end(), all.begin() + start, all.begin() + start + b);
  } else {
    for (int64_t i = options_.rank; i < total; i += w) mine.push_back(all[i]);
  }
  return mine;
}

std::vector<int64_t> eval_indices(int64_t dataset_size, int64_t rank, int64_t world_size) {
  DDPX_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, ErrorKind::kUsage,
             "eval rank {} of world size {}: expected 0 <= rank < world", rank, world_size);
  std::vector<int64_t> mine;
  for (int64_t i = rank; i < dataset_size; i += world_size) mine.push_back(i);
  return mine;
}

}  // namespace ddpx::data
