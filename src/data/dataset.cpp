// Dataset dispatch by name, default folders, the synthetic dataset and channel statistics.
#include "data/dataset.h"

#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "data/cifar.h"
#include "data/idx_dataset.h"
#include "data/image_dataset.h"
#include "data/shard_dataset.h"
#include "data/token_windows.h"

namespace ddpx::data {
namespace {

// Random images whose per-class mean colour differs, so a model can learn the labels.
Dataset make_synthetic(const DatasetSpec& spec, int64_t n, uint64_t stream) {
  DDPX_CHECK(n >= 0 && spec.synthetic_height > 0 && spec.synthetic_width > 0 &&
                 (spec.synthetic_channels == 1 || spec.synthetic_channels == 3) &&
                 spec.synthetic_classes > 0 && spec.synthetic_classes <= 100000,
             ErrorKind::kUsage,
             "synthetic dataset: size {}, {}x{}x{}, {} classes; expected sizes > 0, 1 or 3 "
             "channels and 1..100000 classes",
             n, spec.synthetic_height, spec.synthetic_width, spec.synthetic_channels,
             spec.synthetic_classes);
  const int64_t c = spec.synthetic_channels, hw = spec.synthetic_height * spec.synthetic_width;
  // Class colours depend on the seed only, so train and test share them.
  std::mt19937_64 colour_rng(spec.seed * 0x9E3779B97F4A7C15ull + 1);
  std::uniform_int_distribution<int> colour(48, 207);
  std::vector<int> means(spec.synthetic_classes * c);
  for (auto& m : means) m = colour(colour_rng);

  std::mt19937_64 rng(spec.seed * 0x9E3779B97F4A7C15ull + 2 + stream);
  std::uniform_int_distribution<int64_t> pick_class(0, spec.synthetic_classes - 1);
  std::uniform_int_distribution<int> noise(-40, 40);
  Dataset out;
  out.name = "synthetic";
  out.num_classes = spec.synthetic_classes;
  out.images = torch::empty({n, spec.synthetic_height, spec.synthetic_width, c}, torch::kUInt8);
  out.labels = torch::empty({n}, torch::kInt64);
  auto* pixels = out.images.data_ptr<uint8_t>();
  auto* labels = out.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t label = pick_class(rng);
    labels[i] = label;
    for (int64_t p = 0; p < hw; ++p)
      for (int64_t ch = 0; ch < c; ++ch)
        *pixels++ = static_cast<uint8_t>(std::clamp(means[label * c + ch] + noise(rng), 0, 255));
  }
  for (int64_t k = 0; k < out.num_classes; ++k) out.class_names.push_back(std::to_string(k));
  return out;
}

}  // namespace

int64_t Dataset::size() const {
  if (tokens.defined()) return window_count(tokens.size(0), seq_len);
  return labels.defined() ? labels.size(0) : 0;
}

std::string default_data_dir(DatasetId dataset) {
  const std::string name = data::name(dataset);
  // Debian's dataset-fashion-mnist package; without it, where `ddpx data download` puts files.
  constexpr const char* kDebianFashionMnist = "/usr/share/datasets/fashion-mnist";
  if (name == "fashion-mnist" && std::filesystem::is_directory(kDebianFashionMnist))
    return kDebianFashionMnist;
  // CIFAR: where `ddpx data download NAME` puts it, else the original's ./data, which is also
  // the folder that a missing set's message then names.
  if ((dataset == DatasetId::kCifar10 || dataset == DatasetId::kCifar100) &&
      !holds_cifar(name, "data/" + name))
    return "data";
  return "data/" + name;
}

DatasetSplits load_dataset(const DatasetSpec& spec) {
  std::string dir = spec.data_dir.empty() ? default_data_dir(spec.dataset) : spec.data_dir;
  DatasetSplits splits;
  switch (spec.dataset) {
    case DatasetId::kMnist:
    case DatasetId::kFashionMnist:
      return load_idx_dataset(name(spec.dataset), dir);
    case DatasetId::kCifar10:
    case DatasetId::kCifar100:
      return load_cifar_dataset(name(spec.dataset), dir);
    case DatasetId::kImageFolder:
    case DatasetId::kImagenet:
      return load_image_folder_dataset(spec, dir);
    case DatasetId::kShards:
      return load_shard_dataset(spec, dir);
    case DatasetId::kTokens:
      return load_token_dataset(dir, spec.seq_len, spec.vocab_size, spec.masked_lm_model,
                                spec.seed);
    case DatasetId::kSynthetic:
      break;
  }
  splits.train = make_synthetic(spec, spec.synthetic_train_size, 0);
  splits.test = make_synthetic(spec, spec.synthetic_test_size, 1);
  splits.source = "generated";
  channel_stats(splits.train.images, splits.mean, splits.std);
  return splits;
}

DatasetShape dataset_shape(const DatasetSpec& spec) {
  switch (spec.dataset) {
    case DatasetId::kMnist:
    case DatasetId::kFashionMnist:
      return {28, 1, 10};
    case DatasetId::kCifar10:
      return {32, 3, 10};
    case DatasetId::kCifar100:
      return {32, 3, 100};
    case DatasetId::kImageFolder:
    case DatasetId::kImagenet:  // images of any size: the ImageNet models' 224 by default
      return {224, 3,
              image_folder_classes(
                  spec, spec.data_dir.empty() ? default_data_dir(spec.dataset) : spec.data_dir)};
    case DatasetId::kShards:  // the classes are the shards' labels: list them
      return {224, 3, load_dataset(spec).train.num_classes};
    case DatasetId::kTokens: {
      // The vocabulary is the data's when not given: read it.
      const int64_t vocab =
          spec.vocab_size > 0 ? spec.vocab_size : load_dataset(spec).train.num_classes;
      return {spec.seq_len, 1, vocab};
    }
    case DatasetId::kSynthetic:
      break;
  }
  return {spec.synthetic_height, spec.synthetic_channels, spec.synthetic_classes};
}

void channel_stats(const torch::Tensor& images, std::vector<float>& mean, std::vector<float>& std) {
  DDPX_CHECK(images.dim() == 4 && images.scalar_type() == torch::kUInt8, ErrorKind::kInternal,
             "channel_stats expects (N, H, W, C) uint8, got {} dims", images.dim());
  auto contiguous = images.contiguous();
  const int64_t c = contiguous.size(3);
  const int64_t pixels = contiguous.numel() / std::max<int64_t>(c, 1);
  // Integer sums are exact; per-channel histograms would be equally exact but slower to read.
  std::vector<uint64_t> sum(c, 0), sum_sq(c, 0);
  const uint8_t* p = contiguous.data_ptr<uint8_t>();
  for (int64_t i = 0; i < pixels; ++i)
    for (int64_t ch = 0; ch < c; ++ch, ++p) {
      sum[ch] += *p;
      sum_sq[ch] += static_cast<uint64_t>(*p) * *p;
    }
  mean.assign(c, 0.f);
  std.assign(c, 1.f);
  if (pixels == 0) return;
  for (int64_t ch = 0; ch < c; ++ch) {
    double m = static_cast<double>(sum[ch]) / pixels;
    double var = static_cast<double>(sum_sq[ch]) / pixels - m * m;
    mean[ch] = static_cast<float>(m / 255.0);
    // A constant channel would divide by zero; keep 1 so normalisation is a shift only.
    std[ch] = var > 1e-12 ? static_cast<float>(std::sqrt(var) / 255.0) : 1.f;
  }
}

}  // namespace ddpx::data
