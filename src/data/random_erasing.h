// Random erasing (Zhong et al. 2017, as timm's RandomErasing in "pixel" mode): each image, with
// probability `probability`, gets one rectangle replaced by per-pixel normal noise. The
// rectangle covers 2% to 1/3 of the image with an aspect ratio between 0.3 and 3.3 (log-uniform),
// as in the paper and timm. It runs on normalized float images, so the noise has the data's
// scale.
#pragma once

#include <torch/types.h>

#include <random>

namespace ddpx::data {

struct RandomErasingOptions {
  double probability = 0.0;  // per image
  double min_area = 0.02;    // share of the image
  double max_area = 1.0 / 3.0;
  double min_aspect = 0.3;
  int attempts = 10;  // rectangle draws per erased image before giving up (the paper's loop)
};

// images: (B, C, H, W) float32, contiguous; erased in place. Returns how many images were erased.
int64_t random_erase_(torch::Tensor& images, const RandomErasingOptions& options,
                      std::mt19937_64& rng);

}  // namespace ddpx::data
