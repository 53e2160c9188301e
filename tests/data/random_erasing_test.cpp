// Random erasing: which images change, how much of each, and that the rest stays untouched.
#include "data/random_erasing.h"

#include <gtest/gtest.h>

#include "data/transforms.h"

namespace ddpx::data {
namespace {

// (B, C, H, W) of a constant that normal noise never hits exactly.
torch::Tensor constant_images(int64_t batch) { return torch::full({batch, 3, 28, 28}, 7.0f); }

TEST(RandomErasingTest, EveryImageGetsOneRectangleOfTheAllowedArea) {
  auto images = constant_images(64);
  RandomErasingOptions o;
  o.probability = 1.0;
  std::mt19937_64 rng(3);
  EXPECT_EQ(random_erase_(images, o, rng), 64);
  for (int64_t b = 0; b < 64; ++b) {
    auto changed = images[b].ne(7.0f);  // (C, H, W)
    // The same pixels change in every channel (a rectangle through all channels).
    EXPECT_TRUE(changed[0].equal(changed[1]) && changed[0].equal(changed[2])) << "image " << b;
    auto rows = changed[0].any(1).nonzero().flatten();
    auto cols = changed[0].any(0).nonzero().flatten();
    ASSERT_GT(rows.numel(), 0) << "image " << b << " was not erased";
    int64_t h = rows.max().item<int64_t>() - rows.min().item<int64_t>() + 1;
    int64_t w = cols.max().item<int64_t>() - cols.min().item<int64_t>() + 1;
    EXPECT_EQ(changed[0].sum().item<int64_t>(), h * w) << "a filled rectangle, image " << b;
    double share = static_cast<double>(h * w) / (28.0 * 28.0);
    EXPECT_GE(share, 0.015) << "image " << b;  // 2% give or take the rounding of the sides
    EXPECT_LE(share, 0.36) << "image " << b;
  }
}

TEST(RandomErasingTest, ProbabilityIsPerImage) {
  auto images = constant_images(2000);
  RandomErasingOptions o;
  o.probability = 0.25;
  std::mt19937_64 rng(11);
  int64_t erased = random_erase_(images, o, rng);
  EXPECT_NEAR(static_cast<double>(erased) / 2000.0, 0.25, 0.04);
  auto per_image = images.ne(7.0f).flatten(1).any(1).sum().item<int64_t>();
  EXPECT_EQ(per_image, erased);

  auto untouched = constant_images(8);
  o.probability = 0.0;
  EXPECT_EQ(random_erase_(untouched, o, rng), 0);
  EXPECT_TRUE(untouched.equal(constant_images(8)));
}

TEST(RandomErasingTest, TransformBatchErasesAfterNormalizing) {
  // Gray 28x28 images of value 255 normalized to (1 - 0.5) / 0.5 = 1: erased pixels differ.
  auto input = torch::full({16, 28, 28, 1}, 255, torch::kUInt8);
  TransformOptions o;
  o.normalize = Normalize::kNegOneOne;
  o.random_erasing.probability = 1.0;
  std::mt19937_64 rng(5);
  auto out = transform_batch(input, o, rng);  // (16, 3, 28, 28)
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{16, 3, 28, 28}));
  auto kept = out.eq(1.0f).to(torch::kFloat).mean().item<double>();
  EXPECT_GT(kept, 0.6);  // at most a third of each image is erased
  EXPECT_LT(kept, 0.99);
  std::mt19937_64 same(5);
  EXPECT_TRUE(out.equal(transform_batch(input, o, same))) << "the seed fixes the erasing";
}

}  // namespace
}  // namespace ddpx::data
