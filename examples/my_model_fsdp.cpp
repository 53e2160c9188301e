// A user's own libtorch model trained fully sharded (ZeRO-3 / FSDP) with ddpx's sharded plan:
// each rank keeps 1/N of every parameter, gradient and optimizer state; a block's parameters are
// gathered while it runs. Run it under any launcher that sets torchrun's variables, e.g.
// `ddpx run 2 -- ./example_my_model_fsdp`.
#include <torch/nn.h>
#include <torch/optim/adamw.h>

#include <cstdio>

#include "core/error.h"
#include "distributed/context.h"
#include "parallel/sharded/sharded_plan.h"

// x: (B, 16) -> (B, 1). Each element of `blocks` becomes one sharded unit.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    blocks = register_module("blocks",
                             torch::nn::Sequential(torch::nn::Linear(16, 256), torch::nn::ReLU(),
                                                   torch::nn::Linear(256, 256), torch::nn::ReLU()));
    out = register_module("out", torch::nn::Linear(256, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return out(blocks->forward(x)); }
  torch::nn::Sequential blocks{nullptr};
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(Net);

int main() try {
  auto context = ddpx::dist::init();  // torchrun's / Slurm's / Open MPI's environment
  const int rank = context->rank(), world = context->world_size();

  // Synthetic regression: every rank makes the same data, then takes its part of each batch.
  torch::manual_seed(0);
  const auto x_all = torch::randn({1024, 16});
  const auto y_all = x_all.pow(2).sum(1, /*keepdim=*/true);

  ddpx::parallel::ShardedOptions options;
  options.mode = ddpx::parallel::ShardMode::kFull;  // or kOptimizer (ZeRO-1), kGradients (ZeRO-2)
  ddpx::parallel::ShardedPlan plan(
      torch::nn::AnyModule(Net()), *context,
      [](std::vector<torch::Tensor> shards) {  // the optimizer steps this rank's shards
        return std::make_unique<torch::optim::AdamW>(shards, torch::optim::AdamWOptions(3e-3));
      },
      options);
  if (rank == 0) std::printf("%s\n", plan.describe().c_str());

  const int64_t batch = 64, mine = batch / world;
  for (int epoch = 1; epoch <= 5; ++epoch) {
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t start = 0; start + batch <= x_all.size(0); start += batch) {
      ddpx::parallel::MicroBatch mb;
      mb.input = x_all.narrow(0, start + rank * mine, mine);
      mb.target = y_all.narrow(0, start + rank * mine, mine);
      mb.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
        return torch::mse_loss(out, y);
      };
      auto result = plan.forward_backward(mb, /*sync=*/true);  // gradients reduce-scattered
      plan.step();                                             // AdamW on the shards
      plan.zero_grad();
      loss_sum += result.loss.item<double>();
      ++batches;
    }
    auto stats = torch::tensor({loss_sum, double(batches)}, torch::kDouble);
    context->all_reduce_sum(stats);
    if (rank == 0) {
      std::printf("epoch %d loss %.6f\n", epoch, stats[0].item<double>() / stats[1].item<double>());
    }
  }
  // The whole model, gathered: every rank holds the same weights.
  double checksum = 0;
  for (const auto& p : plan.module().ptr()->parameters()) checksum += p.sum().item<double>();
  std::printf("rank %d weights checksum %.8f\n", rank, checksum);
  return 0;
} catch (const ddpx::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
