#include "train/evaluate.h"

#include "data/sampler.h"
#include "parallel/placement.h"
#include "train/metrics.h"

namespace ddpx::train {

double evaluate(torch::nn::AnyModule& model, data::DataLoader& loader, int64_t test_size,
                dist::Context& context, const EvalSetup& setup) {
  torch::NoGradGuard no_grad;
  model.ptr()->eval();
  loader.start_epoch(data::eval_indices(test_size, context.rank(), context.world_size()), 0);
  parallel::DeviceFeeder feeder(loader, setup.device, setup.channels_last);
  DeviceSums sums(setup.device);
  while (auto batch = feeder.next()) {
    optim::AutocastGuard autocast(setup.amp, setup.device);
    torch::Tensor logits = model.forward(batch->images);
    sums.add(torch::zeros({}, logits.options().dtype(torch::kFloat32)), logits, batch->labels);
  }
  MetricSums total = sums.read();
  total.all_reduce(context);
  return total.accuracy();
}

}  // namespace ddpx::train
