// The prefetching loader: order, completeness, determinism across thread counts, restarts,
// errors raised in worker threads, and the consumer building samples of the batch it waits for.
#include "data/loader.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/error.h"

namespace ddpx::data {
namespace {

// n gray 4x4 images whose pixels all equal the sample index; label = index.
Dataset indexed(int64_t n) {
  Dataset d;
  d.name = "indexed";
  d.num_classes = n;
  d.labels = torch::arange(n, torch::kInt64);
  d.images = d.labels.to(torch::kUInt8).view({n, 1, 1, 1}).repeat({1, 4, 4, 1}).contiguous();
  return d;
}

LoaderOptions plain(int64_t batch, int workers) {
  LoaderOptions o;
  o.batch_size = batch;
  o.num_workers = workers;
  o.prefetch = 2;
  o.transform.out_channels = 1;
  o.transform.normalize = Normalize::kNone;
  return o;
}

std::vector<int64_t> reversed(int64_t n) {
  std::vector<int64_t> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = n - 1 - i;
  return v;
}

TEST(LoaderTest, EverySampleOnceInSamplerOrder) {
  Dataset d = indexed(10);
  for (int workers : {0, 1, 3}) {
    DataLoader loader(d, plain(3, workers));
    loader.start_epoch(reversed(10), 0);
    EXPECT_EQ(loader.num_batches(), 4);
    std::vector<int64_t> labels, sizes;
    while (auto batch = loader.next()) {
      sizes.push_back(batch->size());
      EXPECT_EQ(batch->images.sizes(), (std::vector<int64_t>{batch->size(), 1, 4, 4}));
      for (int64_t i = 0; i < batch->size(); ++i) {
        labels.push_back(batch->labels[i].item<int64_t>());
        // The image travelled with its label.
        EXPECT_NEAR(batch->images[i][0][3][3].item<float>() * 255, labels.back(), 1e-3);
      }
    }
    EXPECT_EQ(labels, reversed(10)) << workers << " workers";
    EXPECT_EQ(sizes, (std::vector<int64_t>{3, 3, 3, 1}));
  }
}

TEST(LoaderTest, DropLastAndLimitBatches) {
  Dataset d = indexed(10);
  LoaderOptions o = plain(3, 2);
  o.drop_last = true;
  DataLoader loader(d, o);
  loader.start_epoch(reversed(10), 0);
  int count = 0;
  while (auto batch = loader.next()) {
    EXPECT_EQ(batch->size(), 3);
    ++count;
  }
  EXPECT_EQ(count, 3);
  o.limit_batches = 2;
  DataLoader limited(d, o);
  limited.start_epoch(reversed(10), 0);
  EXPECT_EQ(limited.num_batches(), 2);
}

TEST(LoaderTest, AugmentationIsDeterministicWhateverTheThreadCount) {
  Dataset d = indexed(40);
  d.images = torch::randint(0, 256, {40, 8, 8, 3}, torch::kUInt8);
  auto run = [&](int workers, uint64_t seed, int64_t epoch) {
    LoaderOptions o = plain(8, workers);
    o.seed = seed;
    o.transform.out_channels = 3;
    o.transform.random_crop = o.transform.horizontal_flip = true;
    DataLoader loader(d, o);
    loader.start_epoch(reversed(40), epoch);
    std::vector<torch::Tensor> out;
    while (auto batch = loader.next()) out.push_back(batch->images);
    return torch::cat(out);
  };
  auto reference = run(0, 5, 1);
  EXPECT_TRUE(run(1, 5, 1).equal(reference));
  EXPECT_TRUE(run(4, 5, 1).equal(reference));
  EXPECT_FALSE(run(2, 5, 2).equal(reference));  // a new epoch draws new crops
  EXPECT_FALSE(run(2, 6, 1).equal(reference));
}

// The deterministic mode's streams: a sample gets the same crop and flip whichever batch and
// position it lands in (the batch streams give it another).
TEST(LoaderTest, PerSampleStreamsAugmentASampleAlikeInAnyBatch) {
  Dataset d = indexed(16);
  d.images = torch::randint(0, 256, {16, 8, 8, 3}, torch::kUInt8);
  auto run = [&](int64_t batch, std::vector<int64_t> order, bool per_sample) {
    LoaderOptions o = plain(batch, 1);
    o.seed = 3;
    o.per_sample_streams = per_sample;
    o.transform.out_channels = 3;
    o.transform.random_crop = o.transform.horizontal_flip = true;
    DataLoader loader(d, o);
    loader.start_epoch(order, 0);
    std::map<int64_t, torch::Tensor> by_sample;
    while (auto b = loader.next())
      for (int64_t i = 0; i < b->size(); ++i)
        by_sample[b->labels[i].item<int64_t>()] = b->images[i];
    return by_sample;
  };
  std::vector<int64_t> forward(16), backward = reversed(16);
  for (int64_t i = 0; i < 16; ++i) forward[i] = i;
  auto a = run(8, forward, true), b = run(4, backward, true);
  auto c = run(8, forward, false), e = run(4, backward, false);
  int same_batch_streams = 0;
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_TRUE(a.at(i).equal(b.at(i))) << "sample " << i;
    same_batch_streams += c.at(i).equal(e.at(i));
  }
  EXPECT_LT(same_batch_streams, 16);  // without them, the batch decides the crop
}

TEST(LoaderTest, RestartMidEpochAndDestroyWithBatchesInFlight) {
  Dataset d = indexed(100);
  DataLoader loader(d, plain(4, 3));
  loader.start_epoch(reversed(100), 0);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(reversed(100), 1);  // abandons the epoch in flight
  auto first = loader.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->labels[0].item<int64_t>(), 99);
  // The destructor joins the workers still prefetching.
}

TEST(LoaderTest, WorkerErrorIsRethrownFromNext) {
  Dataset d = indexed(10);
  d.images = torch::zeros({10, 4, 4, 3}, torch::kUInt8);
  LoaderOptions o = plain(2, 2);  // asks 1 output channel from 3-channel images: invalid
  DataLoader loader(d, o);
  loader.start_epoch(reversed(10), 0);
  EXPECT_THROW(loader.next(), Error);
  EXPECT_THROW(loader.start_epoch({10}, 0), Error);  // index out of range
}

// A source whose samples are built apart (as an image folder's), each taking 20 ms, recording
// which thread built it; sample i's value is its index, so the batch shows what was built.
class SlowSamples : public BatchSource {
 public:
  int64_t size() const override { return 64; }
  Batch gather(const int64_t* indices, int64_t count, int64_t epoch,
               int64_t batch_index) const override {
    return gather_shared(indices, count, epoch, batch_index, nullptr);
  }
  Batch gather_shared(const int64_t* indices, int64_t count, int64_t, int64_t,
                      const PublishWork& publish) const override {
    auto values = torch::empty({count}, torch::kInt64);
    auto work = std::make_shared<SampleWork>(count, [&](int64_t i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      values[i] = indices[i];
      std::lock_guard<std::mutex> lock(mutex_);
      builders_.insert(std::this_thread::get_id());
    });
    if (publish) publish(work);
    work->finish();
    return {values.to(torch::kFloat32), values};
  }
  std::set<std::thread::id> builders() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return builders_;
  }

 private:
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> builders_;
};

// With one worker, the thread waiting in next() for the first batch builds some of its samples
// instead of sleeping (the first batch about twice as soon on two cores), and every batch still
// holds its samples, in order.
TEST(LoaderTest, TheWaitingThreadBuildsSamplesOfTheBatchItWaitsFor) {
  auto source = std::make_unique<SlowSamples>();
  const SlowSamples& slow = *source;
  LoaderOptions o = plain(16, 1);
  DataLoader loader(std::move(source), o);
  std::vector<int64_t> order = reversed(64);
  loader.start_epoch(order, 0);
  auto first = loader.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(slow.builders().count(std::this_thread::get_id()), 1u)
      << "the consumer built none of the first batch's samples";
  EXPECT_EQ(slow.builders().size(), 2u) << "the worker and the consumer";
  int64_t at = 0;
  for (auto batch = std::move(first); batch; batch = loader.next()) {
    for (int64_t i = 0; i < batch->size(); ++i)
      EXPECT_EQ(batch->labels[i].item<int64_t>(), order[at++]);
  }
  EXPECT_EQ(at, 64);
}

}  // namespace
}  // namespace ddpx::data
