// Batch transforms: uint8 (B, H, W, C) in, float (B, C, H', W') out, ready for the model.
// Augmentations (random crop with zero padding, horizontal flip) run on uint8 bytes, before
// the conversion to float, so they move 4x less memory; random erasing runs last, on the
// normalized floats.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/names.h"
#include "data/random_erasing.h"

namespace ddpx::data {

// `--normalize`: ImageNet's mean and std, the training split's own, to [-1, 1], or none.
enum class Normalize { kImagenet, kDataset, kNegOneOne, kNone };
inline constexpr NameTable<Normalize, 4> kNormalizeNames{{{Normalize::kImagenet, "imagenet"},
                                                          {Normalize::kDataset, "dataset"},
                                                          {Normalize::kNegOneOne, "neg_one_one"},
                                                          {Normalize::kNone, "none"}}};
inline const char* name(Normalize n) { return name_of(kNormalizeNames, n); }

// ImageNet's statistics (torchvision's); a gray image uses their channel averages.
inline constexpr float kImagenetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImagenetStd[3] = {0.229f, 0.224f, 0.225f};

// `--decode` (image folders and shards): `fast` decodes only the crop, at the DCT scale it needs,
// and resizes on uint8; `exact` decodes the whole image and resizes on float as torchvision's
// tensor path does (data/image_transforms.h).
enum class ImageDecode { kFast, kExact };
inline constexpr NameTable<ImageDecode, 2> kImageDecodeNames{
    {{ImageDecode::kFast, "fast"}, {ImageDecode::kExact, "exact"}}};
inline const char* name(ImageDecode d) { return name_of(kImageDecodeNames, d); }

struct TransformOptions {
  bool random_crop = false;  // random crop back to the input size after zero padding
  int64_t crop_padding = 4;
  bool horizontal_flip = false;
  int64_t image_size = 0;    // 0 keeps the native size; otherwise bilinear resize to this square
  int64_t out_channels = 3;  // gray input is repeated to 3 channels when 3 is asked for
  Normalize normalize = Normalize::kDataset;
  std::vector<float> dataset_mean;  // used by kDataset
  std::vector<float> dataset_std;
  RandomErasingOptions random_erasing;  // after normalization (probability 0: off)
  // Image folders (images of any size, data/image_transforms.h), to image_size square:
  // RandomResizedCrop when training (random_resized_crop), else Resize + CenterCrop(crop_pct).
  bool random_resized_crop = false;
  double crop_pct = 0.875;
  ImageDecode decode = ImageDecode::kFast;
};

// The per-channel mean and std that `options.normalize` subtracts and divides by, for
// `channels` output channels (kNone: 0 and 1).
void normalization(const TransformOptions& options, int64_t channels, std::vector<float>& mean,
                   std::vector<float>& std);

// One (H, W, 3) uint8 image (HWC, contiguous) into (3, H, W) float at `out`, in one pass:
// (x / 255 - mean[c]) / std[c], the same floats as transform_batch's separate steps.
void normalize_into(const uint8_t* image, int64_t height, int64_t width, const float* mean,
                    const float* std, float* out);

// images: (B, H, W, C) uint8 -> (B, out_channels, S, S) float32, S = image_size or H.
torch::Tensor transform_batch(const torch::Tensor& images, const TransformOptions& options,
                              std::mt19937_64& rng);

}  // namespace ddpx::data
