// A user's own libtorch model trained with ddpx's DistributedDataParallel. Run it under any
// launcher that sets torchrun's variables, e.g. `ddpx run 2 -- ./example_my_model_ddp` or by
// hand: RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 ./example_my_model_ddp & RANK=1 WORLD_SIZE=2 ...
#include <torch/nn.h>
#include <torch/optim/sgd.h>

#include <cstdio>

#include "core/error.h"
#include "distributed/context.h"
#include "parallel/data/ddp.h"

// x: (B, 16) -> (B, 1)
struct MlpImpl : torch::nn::Module {
  MlpImpl() {
    hidden = register_module("hidden", torch::nn::Linear(16, 64));
    out = register_module("out", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return out(torch::relu(hidden(x))); }
  torch::nn::Linear hidden{nullptr}, out{nullptr};
};
TORCH_MODULE(Mlp);

int main() try {
  auto context = ddpx::dist::init();  // torchrun's / Slurm's / Open MPI's environment
  const int rank = context->rank(), world = context->world_size();

  // Synthetic regression: y = x . w_true. Every rank makes the same data, then takes its shard.
  torch::manual_seed(0);
  const auto w_true = torch::randn({16, 1});
  const auto x_all = torch::randn({1024, 16});
  const auto y_all = x_all.mm(w_true);
  const int64_t shard = x_all.size(0) / world;
  const auto x = x_all.narrow(0, rank * shard, shard);
  const auto y = y_all.narrow(0, rank * shard, shard);

  torch::manual_seed(100 + rank);  // different inits on purpose: DDP copies rank 0's weights
  Mlp model;
  ddpx::parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), *context);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  const int64_t batch = 32;
  for (int epoch = 1; epoch <= 5; ++epoch) {
    double loss_sum = 0;
    int64_t batches = 0;
    for (int64_t start = 0; start + batch <= shard; start += batch) {
      sgd.zero_grad();
      auto out = ddp.forward(x.narrow(0, start, batch));  // (batch, 1)
      auto loss = torch::mse_loss(out, y.narrow(0, start, batch));
      loss.backward();  // gradients are averaged across ranks before this returns
      sgd.step();
      loss_sum += loss.item<double>();
      ++batches;
    }
    // The epoch's mean loss over all ranks: sums and counts, reduced once.
    auto stats = torch::tensor({loss_sum, double(batches)}, torch::kDouble);
    context->all_reduce_sum(stats);
    if (rank == 0) {
      std::printf("epoch %d loss %.6f\n", epoch, stats[0].item<double>() / stats[1].item<double>());
    }
  }
  // Every rank must hold the same weights: print a checksum to compare.
  double checksum = 0;
  for (const auto& p : model->parameters()) checksum += p.sum().item<double>();
  std::printf("rank %d weights checksum %.8f\n", rank, checksum);
  return 0;
} catch (const ddpx::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
