// Dynamic loss scaling (see loss_scaler.h).
#include "optim/loss_scaler.h"

#include <ATen/ops/_amp_foreach_non_finite_check_and_unscale.h>
#include <ATen/ops/_amp_update_scale.h>

#include <map>

#include "core/error.h"

namespace ddpx::optim {

LossScaler::LossScaler(torch::Device device, LossScalerOptions options) : options_(options) {
  DDPX_CHECK(options.init_scale > 0 && options.growth_factor > 1 && options.backoff_factor > 0 &&
                 options.backoff_factor < 1 && options.growth_interval > 0,
             ErrorKind::kUsage,
             "loss scaling needs init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1 and "
             "growth_interval > 0");
  scale_ = torch::full({1}, options.init_scale, torch::dtype(torch::kFloat32).device(device));
  growth_tracker_ = torch::zeros({1}, torch::dtype(torch::kInt32).device(device));
}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const {
  return loss * scale_.to(loss.device(), /*non_blocking=*/true);
}

torch::Tensor LossScaler::unscale(const std::vector<torch::Tensor>& params) const {
  torch::NoGradGuard no_grad;
  torch::Tensor found_inf = torch::zeros({1}, scale_.options());
  const torch::Tensor inv_scale = scale_.reciprocal();
  // ATen's kernel takes one dtype and device a call.
  std::map<int, std::vector<torch::Tensor>> groups;
  for (const auto& p : params) {
    const auto& grad = p.grad();
    if (!grad.defined()) continue;
    DDPX_CHECK(grad.device() == scale_.device(), ErrorKind::kUsage,
               "loss scaling: a gradient is on {} and the scale on {}; keep the model on one "
               "device",
               grad.device().str(), scale_.device().str());
    groups[static_cast<int>(grad.scalar_type())].push_back(grad);
  }
  for (auto& [key, grads] : groups) {
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  }
  return found_inf;
}

bool LossScaler::should_step(const torch::Tensor& found_inf) {
  return found_inf.item<float>() == 0.0f;
}

void LossScaler::update(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  torch::Tensor found = found_inf.to(scale_.device(), torch::kFloat32);
  at::_amp_update_scale_(scale_, growth_tracker_, found, options_.growth_factor,
                         options_.backoff_factor, options_.growth_interval);
}

double LossScaler::current_scale() const { return scale_.item<float>(); }

int64_t LossScaler::growth_tracker() const { return growth_tracker_.item<int32_t>(); }

void LossScaler::load(double scale, int64_t growth_tracker) {
  DDPX_CHECK(scale > 0, ErrorKind::kData, "a loss scale of {} cannot be restored", scale);
  scale_.fill_(scale);
  growth_tracker_.fill_(growth_tracker);
}

}  // namespace ddpx::optim
