#include "data/random_erasing.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorIndexing.h>
#include <torch/types.h>

#include <cmath>

#include "core/error.h"

namespace ddpx::data {

int64_t random_erase_(torch::Tensor& images, const RandomErasingOptions& o, std::mt19937_64& rng) {
  DDPX_CHECK(images.dim() == 4 && images.scalar_type() == torch::kFloat32 && images.is_contiguous(),
             ErrorKind::kInternal, "random_erase_ expects contiguous (B, C, H, W) float32");
  if (o.probability <= 0) return 0;
  const int64_t batch = images.size(0), channels = images.size(1);
  const int64_t height = images.size(2), width = images.size(3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_real_distribution<double> area_share(o.min_area, o.max_area);
  std::uniform_real_distribution<double> log_aspect(std::log(o.min_aspect),
                                                    std::log(1.0 / o.min_aspect));
  // One generator for the noise, seeded from the batch's stream: reproducible per seed.
  auto noise_generator = at::make_generator<at::CPUGeneratorImpl>(rng());
  int64_t erased = 0;
  for (int64_t b = 0; b < batch; ++b) {
    if (unit(rng) >= o.probability) continue;
    for (int attempt = 0; attempt < o.attempts; ++attempt) {
      double area = area_share(rng) * static_cast<double>(height * width);
      double aspect = std::exp(log_aspect(rng));
      auto h = static_cast<int64_t>(std::lround(std::sqrt(area * aspect)));
      auto w = static_cast<int64_t>(std::lround(std::sqrt(area / aspect)));
      if (h <= 0 || w <= 0 || h >= height || w >= width) continue;
      int64_t top = std::uniform_int_distribution<int64_t>(0, height - h)(rng);
      int64_t left = std::uniform_int_distribution<int64_t>(0, width - w)(rng);
      using torch::indexing::Slice;
      images.index({b, Slice(), Slice(top, top + h), Slice(left, left + w)})
          .copy_(at::normal(0.0, 1.0, {channels, h, w}, noise_generator));
      ++erased;
      break;
    }
  }
  return erased;
}

}  // namespace ddpx::data
