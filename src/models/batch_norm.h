// The BatchNorm2d every ddpx model uses: libtorch's BatchNorm2d (same parameters, buffers and
// state-dict names, so torchvision weights load unchanged) that can also compute its training
// statistics over the batches of all ranks, as torch.nn.SyncBatchNorm does. A model is switched
// to synchronized statistics with parallel/data/sync_batch_norm.h's convert_sync_batch_norm();
// until then, and always in evaluation mode, forward is libtorch's.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/types.h>

#include <memory>

namespace ddpx::models {

// Sums a tensor over all ranks, differentiably: the gradient of the result is summed over the
// ranks too (every rank's loss depends on every rank's batch through the statistics).
class StatsAllReduce {
 public:
  virtual ~StatsAllReduce() = default;
  virtual torch::Tensor sum(const torch::Tensor& local) = 0;
};

class BatchNormImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;

  // x: (B, C, H, W)
  torch::Tensor forward(const torch::Tensor& x);

  void synchronize(std::shared_ptr<StatsAllReduce> all_reduce) { sync_ = std::move(all_reduce); }
  bool synchronized() const { return sync_ != nullptr; }

 private:
  torch::Tensor synchronized_forward(const torch::Tensor& x);

  std::shared_ptr<StatsAllReduce> sync_;
};
TORCH_MODULE(BatchNorm);

}  // namespace ddpx::models
