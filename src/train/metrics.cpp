#include "train/metrics.h"

#include <torch/types.h>

namespace ddpx::train {

void MetricSums::all_reduce(dist::Context& context) {
  if (!context.distributed()) return;
  torch::Tensor sums = torch::tensor({loss_sum, correct, count}, torch::kFloat64);
  context.all_reduce_sum(sums);
  auto a = sums.accessor<double, 1>();
  loss_sum = a[0];
  correct = a[1];
  count = a[2];
}

}  // namespace ddpx::train
