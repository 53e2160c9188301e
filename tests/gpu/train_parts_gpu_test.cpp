// Parts of training that only a GPU can show (label gpu; each test skips with a message where
// this process sees no GPU, as in CI): the batches' copy stream is one per device, not a new one
// each epoch; a checkpoint restores the GPU's RNG; gradient clipping runs on the device without
// reading the norm back; a pipeline moves only each rank's stage to the GPU.
#include <ATen/DeviceAccelerator.h>
#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <atomic>
#include <cstring>

#include "data/dataset.h"
#include "data/loader.h"
#include "distributed/ranks.h"
#include "optim/clip_grad.h"
#include "parallel/pipeline/pipeline_plan.h"
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

// A pipeline handed its model in host memory, as the trainer hands it, puts only each rank's
// stage on the GPU: two ranks (threads) sharing one GPU have allocated about one model's bytes
// between them once built, not two; the other stage's tensors are on the GPU without memory; 3
// SGD steps end at the single process's parameters (on the CPU; 1e-5 relative), and module()
// gathers them there.
TEST(PipelineGpuTest, OnlyEachRanksStageReachesTheGpu) {
  SKIP_WITHOUT_GPU();
  const torch::Device gpu(torch::kCUDA, 0);
  auto make_net = [] {
    torch::manual_seed(11);
    return torch::nn::Sequential(torch::nn::Linear(512, 1024), torch::nn::Tanh(),
                                 torch::nn::Linear(1024, 1024), torch::nn::Tanh(),
                                 torch::nn::Linear(1024, 512), torch::nn::Tanh(),
                                 torch::nn::Linear(512, 16));
  };
  auto sgd = [](std::vector<torch::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05));
  };
  torch::manual_seed(2);
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < 3; ++s) {
    xs.push_back(torch::randn({8, 512}));
    ys.push_back(torch::randn({8, 16}));
  }
  auto reference = make_net();
  auto reference_sgd = sgd(reference->parameters());
  int64_t model_bytes = 0;
  for (const auto& p : reference->parameters()) model_bytes += p.nbytes();
  for (int s = 0; s < 3; ++s) {
    (reference->forward(xs[s]) - ys[s]).pow(2).mean().backward();
    reference_sgd->step();
    reference_sgd->zero_grad();
  }
  std::vector<torch::nn::Sequential> nets{make_net(), make_net()};
  auto allocated = [] {
    torch::cuda::synchronize();
    return at::accelerator::getDeviceStats(0)
        .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  };
  at::accelerator::resetPeakStats(0);
  const int64_t before = allocated().current;
  int64_t built_peak = 0;
  auto errors = test::run_ranks(2, [&](int rank, dist::Context& context) {
    parallel::PipelineOptions options;
    options.microbatches = 2;
    options.sample_shape = {512};  // timed on the GPU, a layer at a time
    options.device = gpu;
    parallel::PipelinePlan plan(nets[rank], context, sgd, options);
    context.barrier();  // both built
    if (rank == 0) built_peak = allocated().peak - before;
    size_t own = 0;
    for (const auto& p : plan.parameters()) {
      EXPECT_TRUE(p.is_cuda()) << "rank " << rank;
      own += p.storage().nbytes();
    }
    size_t held = 0;
    for (const auto& p : nets[rank]->parameters()) {
      EXPECT_TRUE(p.is_cuda()) << "rank " << rank << ": a parameter left in host memory";
      held += p.storage().nbytes();
    }
    EXPECT_EQ(held, own) << "rank " << rank << " holds another stage's memory";
    for (int s = 0; s < 3; ++s) {
      parallel::MicroBatch mb;
      mb.input = xs[s].to(gpu);
      mb.target = ys[s].to(gpu);
      mb.loss = [](const torch::Tensor& o, const torch::Tensor& y) {
        return (o - y).pow(2).mean();
      };
      mb.learning_rate = 0.05;
      plan.forward_backward(mb, true);
      plan.step();
      plan.zero_grad();
    }
    auto got = plan.module().ptr()->parameters();
    auto want = reference->parameters();
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(got[i].is_cuda());
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LE((got[i].cpu() - want[i]).abs().max().item<double>(), 1e-5 * scale + 1e-7)
          << "rank " << rank << " parameter " << i;
    }
  });
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(test::error_text(errors[r]), "") << r;
  // The two stages, and rank 0's timing (a layer and its activations at a time): about one
  // model. The whole model on the GPU on both ranks first would be two.
  EXPECT_LT(built_peak, model_bytes * 5 / 4)
      << "built, the ranks peaked at " << built_peak << " B; one model is " << model_bytes << " B";
}

}  // namespace
}  // namespace ddpx::train
