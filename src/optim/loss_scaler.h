// Dynamic loss scaling for fp16 training, PyTorch's GradScaler for one optimizer: the loss is
// multiplied by a scale before backward so that small fp16 gradients do not flush to zero; before
// the step the gradients are divided back and checked for inf/NaN. A step whose gradients
// overflowed is skipped and the scale halves (backoff); after growth_interval clean steps in a
// row it doubles (growth). Scale and growth tracker live on the gradients' device and are updated
// by ATen's own kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_), so the
// only host synchronization is reading whether to step.
//
// Across ranks: unscale() returns this rank's found_inf; sum it across the ranks (a collective on
// the device tensor) before should_step() and update(), so that every rank skips the same steps
// and keeps the same scale.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <vector>

namespace ddpx::optim {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, as torch.amp.GradScaler
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(torch::Device device, LossScalerOptions options = {});

  // loss x scale (autograd flows through it).
  torch::Tensor scale(const torch::Tensor& loss) const;

  // Divides every defined gradient of `params` by the scale, in place, and returns found_inf: a
  // one-element float32 tensor on the device, non-zero when any gradient held an inf or NaN.
  torch::Tensor unscale(const std::vector<torch::Tensor>& params) const;

  // Whether the step may run: found_inf (summed over the ranks) is zero. Reads the device.
  static bool should_step(const torch::Tensor& found_inf);

  // After the step or its skip: backoff on inf, growth after growth_interval clean steps.
  void update(const torch::Tensor& found_inf);

  double current_scale() const;                     // reads the device
  int64_t growth_tracker() const;                   // clean steps in a row since the last change
  void load(double scale, int64_t growth_tracker);  // a checkpoint's values

 private:
  LossScalerOptions options_;
  torch::Tensor scale_;           // float32, one element, on the device
  torch::Tensor growth_tracker_;  // int32, one element, on the device
};

}  // namespace ddpx::optim
