// A user's own libtorch model trained as a pipeline: a torch::nn::Sequential cut into 2 stages
// between its children, each batch in 4 micro-batches under 1F1B, and each stage sharded over
// its data-parallel replicas (FSDP x pipeline, as torchtitan composes them) where there are
// more than one: 4 processes are 2 stages x 2 replicas. Run it under any launcher that sets
// torchrun's variables, e.g. `ddpx run 4 -- ./example_my_model_pipeline`.
#include <torch/nn.h>
#include <torch/optim/adamw.h>

#include <cstdio>

#include "core/error.h"
#include "distributed/context.h"
#include "parallel/pipeline/pipeline_plan.h"

int main() try {
  auto context = ddpx::dist::init();  // torchrun's / Slurm's / Open MPI's environment
  const int rank = context->rank(), world = context->world_size();

  // Synthetic regression: every rank makes the same data; each replica takes its part.
  torch::manual_seed(0);
  const auto x_all = torch::randn({1024, 16});
  const auto y_all = x_all.pow(2).sum(1, /*keepdim=*/true);

  // x: (B, 16) -> (B, 1); the pipeline cuts between the children, balanced by parameters.
  torch::nn::Sequential net(torch::nn::Linear(16, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 256), torch::nn::ReLU(),
                            torch::nn::Linear(256, 1));

  ddpx::parallel::PipelineOptions options;
  options.stages = 2;  // the world is 2 stages x world / 2 replicas
  options.microbatches = 4;
  options.schedule = ddpx::parallel::PipelineSchedule::k1F1B;
  options.shard = ddpx::parallel::ShardMode::kFull;  // or kNone: each stage's replicas average
  ddpx::parallel::PipelinePlan plan(
      net, *context,
      [](std::vector<torch::Tensor> params) {  // this rank's stage (its shards, when sharded)
        return std::make_unique<torch::optim::AdamW>(params, torch::optim::AdamWOptions(3e-3));
      },
      options);
  if (rank == 0) std::printf("%s\n", plan.describe().c_str());

  const int replicas = world / options.stages;
  const int64_t batch = 64, mine = batch / replicas;
  for (int epoch = 1; epoch <= 5; ++epoch) {
    double loss_sum = 0, reported = 0;
    for (int64_t start = 0; start + batch <= x_all.size(0); start += batch) {
      ddpx::parallel::MicroBatch mb;
      mb.input = x_all.narrow(0, start + plan.replica() * mine, mine);
      mb.target = y_all.narrow(0, start + plan.replica() * mine, mine);
      mb.loss = [](const torch::Tensor& out, const torch::Tensor& y) {
        return torch::mse_loss(out, y);
      };
      auto result = plan.forward_backward(mb, /*sync=*/true);  // the schedule, then the replicas
      plan.step();                                             // AdamW on this rank's stage
      plan.zero_grad();
      if (result.loss.defined()) {  // each replica's first rank gets its loss
        loss_sum += result.loss.item<double>();
        ++reported;
      }
    }
    auto stats = torch::tensor({loss_sum, reported}, torch::kDouble);
    context->all_reduce_sum(stats);
    if (rank == 0) {
      std::printf("epoch %d loss %.6f\n", epoch, stats[0].item<double>() / stats[1].item<double>());
    }
  }
  // The whole model, every stage brought to every rank: the same weights everywhere.
  double checksum = 0;
  for (const auto& p : plan.module().ptr()->parameters()) checksum += p.sum().item<double>();
  std::printf("rank %d weights checksum %.8f\n", rank, checksum);
  return 0;
} catch (const ddpx::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
