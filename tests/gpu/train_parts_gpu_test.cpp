// Parts of training that only a GPU can show (label gpu; each test skips with a message where
// this process sees no GPU, as in CI): the batches' copy stream is one per device, not a new one
// each epoch; a checkpoint restores the GPU's RNG; gradient clipping runs on the device without
// reading the norm back.
#include <ATen/DeviceAccelerator.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <atomic>
#include <cstring>

#include "data/dataset.h"
#include "data/loader.h"
#include "optim/clip_grad.h"
#include "parallel/placement.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx::train {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU visible to this process"

int64_t reserved_bytes() {
  torch::cuda::synchronize();
  const auto stats = at::accelerator::getDeviceStats(0);
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

// A feeder per epoch, as the trainer makes them: every one copies on the same side stream, so
// the batch blocks freed in one epoch are reused by the next instead of staying reserved.
TEST(PlacementGpuTest, EveryEpochsFeederCopiesOnOneStream) {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  data::DatasetSpec spec;
  spec.dataset = data::DatasetId::kSynthetic;
  spec.synthetic_train_size = 512;
  spec.synthetic_height = spec.synthetic_width = 64;
  auto splits = data::load_dataset(spec);
  data::LoaderOptions options;
  options.batch_size = 64;
  options.pin_memory = true;
  options.transform.dataset_mean = splits.mean;  // as the trainer passes them
  options.transform.dataset_std = splits.std;
  data::DataLoader loader(splits.train, options);
  std::vector<int64_t> indices(512);
  for (int64_t i = 0; i < 512; ++i) indices[i] = i;
  std::optional<c10::Stream> first_stream;
  std::vector<int64_t> reserved;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    loader.start_epoch(indices, epoch);
    parallel::DeviceFeeder feeder(loader, gpu, /*channels_last=*/false);
    while (auto batch = feeder.next()) batch->images.sum();
    ASSERT_TRUE(feeder.copy_stream().has_value());
    if (!first_stream) first_stream = feeder.copy_stream();
    EXPECT_EQ(*feeder.copy_stream(), *first_stream) << "epoch " << epoch;
    reserved.push_back(reserved_bytes());
  }
  EXPECT_LE(reserved.back(), reserved.front()) << "each epoch reserved blocks of its own";
}

// The GPU's generator (dropout, random augmentation on the device) resumes where it was saved.
TEST(CheckpointGpuTest, TheGpusRngStateIsSavedAndRestored) {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  test::TempDir dir;
  torch::nn::Linear model(4, 2);
  model->to(gpu);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  torch::manual_seed(3);
  torch::rand({16}, gpu);  // move the generator off its seed
  const CheckpointMeta meta{"linear", 2, "imagenet", 4};
  save_checkpoint(dir.file("c.ddpx"), *model, sgd, TrainPosition{}, meta);
  const auto after_save = torch::rand({16}, gpu).cpu();
  torch::rand({1000}, gpu);  // and further
  load_checkpoint(dir.file("c.ddpx"), *model, sgd, meta);
  const auto after_load = torch::rand({16}, gpu).cpu();
  EXPECT_TRUE(torch::equal(after_save, after_load));
}

// libtorch's clip_grad_norm_ ends in .item(): the host waits for the GPU every step.
TEST(ClipGradGpuTest, ClipsOnTheDeviceLikeLibtorchWithoutAHostRead) {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  auto make = [&] {
    torch::manual_seed(9);
    std::vector<torch::Tensor> params;
    for (int64_t n : {1000, 10, 300}) {
      auto p = torch::randn({n}, gpu).requires_grad_();
      p.mutable_grad() = torch::randn({n}, gpu) * 5;
      params.push_back(p);
    }
    return params;
  };
  auto mine = make(), reference = make();
  static std::atomic<int> reads{0};
  auto handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                     -> std::unique_ptr<at::ObserverContext> {
        if (std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0) ++reads;
        return nullptr;
      }).scopes({at::RecordScope::FUNCTION}));
  auto norm = optim::clip_grad_norm(mine, 1.0);
  const int mine_reads = reads.load();
  at::removeCallback(handle);
  EXPECT_EQ(mine_reads, 0);
  EXPECT_TRUE(norm.is_cuda());
  const double expected = torch::nn::utils::clip_grad_norm_(reference, 1.0);
  EXPECT_NEAR(norm.item<double>(), expected, 1e-6 * expected);
  for (size_t i = 0; i < mine.size(); ++i)
    EXPECT_LE((mine[i].grad() - reference[i].grad()).abs().max().item<float>(), 1e-6);
}

}  // namespace
}  // namespace ddpx::train
