// Random token windows (`--windows random`, data/token_windows.h) cut from a real token file
// (Debian's GPL, its bytes as tokens): every window is the stream's tokens at its start (targets
// one later), starts cover [0, tokens - seq_len) and are not stride-aligned, the draw is fixed by
// (seed, epoch, sample) whatever the batch around it, two DDP ranks draw distinct windows in equal
// counts that together are one process's global batch, and a loader resumed mid-epoch reads the
// batches the uninterrupted one would have.
#include "data/token_windows.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/atomic_file.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "data/token_source.h"
#include "io/token_file.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

constexpr int64_t kSeqLen = 32;

class RandomWindowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string text = read_file("/usr/share/common-licenses/GPL-3");
    std::vector<uint32_t> tokens(text.begin(), text.end());
    for (auto& t : tokens) t &= 0xff;
    io::write_token_file(dir_.file("train.bin"), tokens);
    io::write_token_file(dir_.file("val.bin"),
                         std::vector<uint32_t>(tokens.begin(), tokens.begin() + 4000));
    splits_ = load_token_dataset(dir_.path(), kSeqLen, 256);
  }
  int64_t tokens() const { return splits_.train.tokens.size(0); }
  test::TempDir dir_;
  DatasetSplits splits_;
};

TEST_F(RandomWindowsTest, EachWindowIsTheStreamAtItsStartAndStartsCoverIt) {
  const int64_t n = splits_.train.size();
  std::vector<int64_t> indices(n);
  for (int64_t i = 0; i < n; ++i) indices[i] = i;
  TokenSource source(splits_.train, /*window_seed=*/5, Windows::kRandom);
  Batch batch = source.gather(indices.data(), n, /*epoch=*/0, 0);
  ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{n, kSeqLen}));
  const torch::Tensor stream = splits_.train.tokens.to(torch::kInt64);
  int64_t lowest = tokens(), highest = 0, aligned = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t s = random_window_start(5, 0, i, tokens(), kSeqLen);
    ASSERT_GE(s, 0);
    ASSERT_LT(s, tokens() - kSeqLen);
    lowest = std::min(lowest, s);
    highest = std::max(highest, s);
    aligned += s % kSeqLen == 0;
    ASSERT_TRUE(torch::equal(batch.images[i], stream.narrow(0, s, kSeqLen))) << i;
    ASSERT_TRUE(torch::equal(batch.labels[i], stream.narrow(0, s + 1, kSeqLen))) << i;
  }
  // About n uniform draws over the stream: its ends are reached, strides are not favoured.
  EXPECT_LT(lowest, 4 * tokens() / n);
  EXPECT_GT(highest, tokens() - kSeqLen - 4 * tokens() / n);
  EXPECT_LT(aligned, 4 + 3 * n / kSeqLen) << "starts look stride-aligned";
}

TEST_F(RandomWindowsTest, TheDrawDependsOnSeedEpochAndSampleOnly) {
  TokenSource source(splits_.train, /*window_seed=*/5, Windows::kRandom);
  const std::vector<int64_t> batch{7, 3, 11}, alone{3};
  Batch a = source.gather(batch.data(), 3, /*epoch=*/1, /*batch_index=*/0);
  Batch b = source.gather(alone.data(), 1, /*epoch=*/1, /*batch_index=*/9);
  EXPECT_TRUE(torch::equal(a.images[1], b.images[0])) << "sample 3 in another batch";
  Batch again = source.gather(batch.data(), 3, 1, 0);
  EXPECT_TRUE(torch::equal(a.images, again.images));
  Batch next_epoch = source.gather(batch.data(), 3, 2, 0);
  EXPECT_FALSE(torch::equal(a.images, next_epoch.images));
  TokenSource other_seed(splits_.train, /*window_seed=*/6, Windows::kRandom);
  EXPECT_FALSE(torch::equal(a.images, other_seed.gather(batch.data(), 3, 1, 0).images));
  // Evaluation (no window seed) reads stride windows from offset 0 whatever --windows says.
  TokenSource eval(splits_.train, std::nullopt, Windows::kRandom);
  EXPECT_TRUE(torch::equal(eval.gather(batch.data(), 3, 1, 0).images,
                           window_batch(splits_.train, batch.data(), 3, 0).images));
}

TEST_F(RandomWindowsTest, TwoRanksDrawDistinctWindowsThatTogetherAreOneProcesssBatch) {
  const int64_t n = splits_.train.size(), per_rank = 4;
  DistributedSampler one(n, SamplerOptions{0, 1, true, false, 5, 0});
  DistributedSampler r0(n, SamplerOptions{0, 2, true, false, 5, 0});
  DistributedSampler r1(n, SamplerOptions{1, 2, true, false, 5, 0});
  ASSERT_EQ(r0.num_samples(), r1.num_samples());  // equal batch counts per rank
  TokenSource source(splits_.train, /*window_seed=*/5, Windows::kRandom);
  const auto i1 = one.indices(3), i0 = r0.indices(3), i2 = r1.indices(3);
  Batch whole = source.gather(i1.data(), 2 * per_rank, 3, 0);
  Batch a = source.gather(i0.data(), per_rank, 3, 0), b = source.gather(i2.data(), per_rank, 3, 0);
  std::set<std::vector<int64_t>> together, expected;
  auto rows = [](const torch::Tensor& x, std::set<std::vector<int64_t>>& out) {
    for (int64_t i = 0; i < x.size(0); ++i) {
      auto r = x[i].contiguous();
      out.insert(std::vector<int64_t>(r.data_ptr<int64_t>(), r.data_ptr<int64_t>() + r.numel()));
    }
  };
  rows(a.images, together);
  rows(b.images, together);
  rows(whole.images, expected);
  EXPECT_EQ(together.size(), static_cast<size_t>(2 * per_rank)) << "the ranks drew a window twice";
  EXPECT_EQ(together, expected);
}

TEST_F(RandomWindowsTest, ALoaderResumedMidEpochReadsTheUninterruptedBatches) {
  LoaderOptions o;
  o.batch_size = 6;
  o.window_seed = 5;
  o.windows = Windows::kRandom;
  DistributedSampler sampler(splits_.train.size(), SamplerOptions{0, 1, true, false, 5, 0});
  DataLoader whole(splits_.train, o), resumed(splits_.train, o);
  whole.start_epoch(sampler.indices(1), 1);
  resumed.start_epoch(sampler.indices(1), 1, /*first_batch=*/3);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(whole.next());
  for (int i = 0; i < 4; ++i) {
    auto a = whole.next(), b = resumed.next();
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(torch::equal(a->images, b->images)) << "batch " << 3 + i;
    EXPECT_TRUE(torch::equal(a->labels, b->labels)) << "batch " << 3 + i;
  }
}

}  // namespace
}  // namespace ddpx::data
