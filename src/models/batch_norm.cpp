#include "models/batch_norm.h"

#include "core/error.h"

namespace ddpx::models {

torch::Tensor BatchNormImpl::forward(const torch::Tensor& x) {
  if (sync_ && is_training()) return synchronized_forward(x);
  return torch::nn::BatchNorm2dImpl::forward(x);
}

// The statistics of the global batch in two all-reduces: first the per-channel sums and the
// element count (the mean), then the sums of squared deviations from that mean (the variance).
// Two passes, not sum and sum of squares in one, because E[x^2] - E[x]^2 cancels badly in
// float32. Autograd differentiates through both all-reduces.
torch::Tensor BatchNormImpl::synchronized_forward(const torch::Tensor& x) {
  DDPX_CHECK(x.dim() == 4, ErrorKind::kUsage,
             "synchronized BatchNorm expects (B, C, H, W) input, got {} dimensions", x.dim());
  const int64_t channels = x.size(1);
  auto x32 = x.to(torch::kFloat32);  // statistics in float32 under autocast too
  auto local_count = torch::full({1}, static_cast<double>(x.numel() / channels), x32.options());
  auto sums = sync_->sum(torch::cat({x32.sum({0, 2, 3}), local_count}));
  auto count = sums.narrow(0, channels, 1);
  auto mean = sums.narrow(0, 0, channels) / count;
  auto centred = x32 - mean.view({1, channels, 1, 1});
  auto var = sync_->sum(centred.square().sum({0, 2, 3})) / count;
  auto y = centred * torch::rsqrt(var + options.eps()).view({1, channels, 1, 1});
  if (options.affine()) y = y * weight.view({1, channels, 1, 1}) + bias.view({1, channels, 1, 1});

  if (options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    const double momentum = options.momentum().has_value()
                                ? *options.momentum()
                                : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    // The running variance is unbiased, as in torch.nn.BatchNorm2d.
    running_mean.mul_(1 - momentum).add_(mean.detach(), momentum);
    // (n / (n - 1) as a tensor: no host synchronization on a GPU)
    auto unbiased = var.detach() * (count / (count - 1).clamp_min(1));
    running_var.mul_(1 - momentum).add_(unbiased, momentum);
  }
  return y.to(x.scalar_type());
}

}  // namespace ddpx::models
