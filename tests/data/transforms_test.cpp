// Batch transforms: exact crop and flip on known bytes, normalisation values, resize, gray->3.
#include "data/transforms.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace ddpx::data {
namespace {

// (B, 5, 5, 1) with pixel value 1 + y*5 + x (never 0, so padding is recognisable).
torch::Tensor ramp(int64_t batch) {
  return (torch::arange(25, torch::kInt64) + 1)
      .to(torch::kUInt8)
      .view({1, 5, 5, 1})
      .repeat({batch, 1, 1, 1});
}

TransformOptions raw_pixels() {
  TransformOptions o;
  o.out_channels = 1;
  o.normalize = Normalize::kNone;
  return o;
}

TEST(TransformsTest, FlipMirrorsExactlyAndOnlySometimes) {
  auto input = ramp(64);
  TransformOptions o = raw_pixels();
  o.horizontal_flip = true;
  std::mt19937_64 rng(1);
  auto out = (transform_batch(input, o, rng) * 255).round().to(torch::kUInt8);  // (B, 1, 5, 5)
  auto original = input.permute({0, 3, 1, 2})[0];
  auto mirrored = original.flip({2});
  int flipped = 0;
  for (int64_t i = 0; i < 64; ++i) {
    bool same = out[i].equal(original), mirror = out[i].equal(mirrored);
    ASSERT_TRUE(same || mirror) << "sample " << i << " is neither the image nor its mirror";
    flipped += mirror;
  }
  EXPECT_GT(flipped, 10);
  EXPECT_LT(flipped, 54);
}

TEST(TransformsTest, RandomCropIsAWindowOfTheZeroPaddedImage) {
  auto input = ramp(64);
  TransformOptions o = raw_pixels();
  o.random_crop = true;
  o.crop_padding = 2;
  std::mt19937_64 rng(2);
  auto out = (transform_batch(input, o, rng) * 255).round().to(torch::kUInt8);
  auto padded = torch::constant_pad_nd(input.permute({0, 3, 1, 2})[0], {2, 2, 2, 2}, 0);  // (1,9,9)
  int shifted = 0;
  for (int64_t i = 0; i < 64; ++i) {
    bool found = false;
    for (int dy = 0; dy <= 4 && !found; ++dy)
      for (int dx = 0; dx <= 4 && !found; ++dx)
        if (out[i].equal(padded.slice(1, dy, dy + 5).slice(2, dx, dx + 5))) {
          found = true;
          shifted += dy != 2 || dx != 2;
        }
    ASSERT_TRUE(found) << "sample " << i << " is not a 5x5 window of the padded image";
  }
  EXPECT_GT(shifted, 32);
}

TEST(TransformsTest, SameRngSeedSameAugmentation) {
  TransformOptions o = raw_pixels();
  o.random_crop = o.horizontal_flip = true;
  std::mt19937_64 a(9), b(9);
  EXPECT_TRUE(transform_batch(ramp(8), o, a).equal(transform_batch(ramp(8), o, b)));
}

TEST(TransformsTest, NormalizeValues) {
  auto input = torch::full({2, 3, 3, 3}, 128, torch::kUInt8);
  TransformOptions o;
  std::mt19937_64 rng(0);
  const float x = 128.f / 255.f;
  o.normalize = Normalize::kImagenet;
  auto out = transform_batch(input, o, rng);
  EXPECT_NEAR(out[1][0][2][2].item<float>(), (x - 0.485f) / 0.229f, 1e-5);
  EXPECT_NEAR(out[0][2][0][1].item<float>(), (x - 0.406f) / 0.225f, 1e-5);
  o.normalize = Normalize::kNegOneOne;
  EXPECT_NEAR(transform_batch(input, o, rng)[0][1][1][1].item<float>(), (x - 0.5f) / 0.5f, 1e-6);
  o.normalize = Normalize::kDataset;
  o.dataset_mean = {0.1f, 0.2f, 0.3f};
  o.dataset_std = {0.5f, 0.25f, 2.f};
  EXPECT_NEAR(transform_batch(input, o, rng)[0][1][0][0].item<float>(), (x - 0.2f) / 0.25f, 1e-5);
  o.normalize = Normalize::kNone;
  EXPECT_NEAR(transform_batch(input, o, rng)[0][0][0][0].item<float>(), x, 1e-7);
  EXPECT_EQ(parse_name(kNormalizeNames, "neg_one_one"), Normalize::kNegOneOne);
  EXPECT_EQ(parse_name(kNormalizeNames, "zscore"), std::nullopt);
  for (Normalize n :
       {Normalize::kImagenet, Normalize::kDataset, Normalize::kNegOneOne, Normalize::kNone})
    EXPECT_EQ(parse_name(kNormalizeNames, name(n)), n) << name(n);
}

TEST(TransformsTest, GrayToThreeChannelsAndResize) {
  auto gray = torch::randint(0, 256, {2, 28, 28, 1}, torch::kUInt8);
  TransformOptions o;
  o.out_channels = 3;
  o.image_size = 32;
  o.normalize = Normalize::kDataset;
  o.dataset_mean = {0.3f};  // gray statistics repeat over the 3 channels
  o.dataset_std = {0.4f};
  std::mt19937_64 rng(0);
  auto out = transform_batch(gray, o, rng);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 32, 32}));
  EXPECT_EQ(out.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_TRUE(out[1][0].equal(out[1][2]));
  // A constant image stays constant through bilinear resizing.
  auto flat = transform_batch(torch::full({1, 28, 28, 1}, 51, torch::kUInt8), o, rng);
  EXPECT_NEAR(flat.max().item<float>(), (0.2f - 0.3f) / 0.4f, 1e-5);
  EXPECT_NEAR(flat.min().item<float>(), (0.2f - 0.3f) / 0.4f, 1e-5);
  // 3 -> 1 channels is refused rather than silently dropping colour.
  o.out_channels = 1;
  EXPECT_THROW(transform_batch(torch::zeros({1, 4, 4, 3}, torch::kUInt8), o, rng), Error);
}

}  // namespace
}  // namespace ddpx::data
