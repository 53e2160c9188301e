#include "train/ema.h"

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>

#include "core/error.h"
#include "parallel/plan.h"
#include "parallel/sharded/sharded_state.h"

namespace ddpx::train {
namespace {

// `whole`'s tensors take `from`'s values (and place): a copy, or the same memory with `alias`.
void set_tensors(torch::nn::Module& whole, const std::vector<torch::Tensor>& from, bool alias) {
  auto to = module_tensors(whole);
  DDPX_CHECK(to.size() == from.size(), ErrorKind::kInternal,
             "EMA: the model instance has {} tensors, the plan's model {}", to.size(), from.size());
  for (size_t i = 0; i < to.size(); ++i) {
    DDPX_CHECK(to[i].sizes() == from[i].sizes(), ErrorKind::kInternal,
               "EMA: tensor {} has another shape in the model instance", i);
    // Same device and memory format as the model's tensor (channels_last too).
    to[i].set_data(alias ? from[i] : from[i].detach().clone());
    to[i].requires_grad_(false);
  }
}

}  // namespace

std::vector<torch::Tensor> held_tensors(parallel::HeldModel& plan) {
  std::vector<torch::Tensor> held;
  for (auto& t : plan.held_tensors()) held.push_back(std::move(t.tensor));
  return held;
}

// Parameters then buffers, in registration order: the same order in two instances of one
// architecture.
std::vector<torch::Tensor> module_tensors(torch::nn::Module& module) {
  std::vector<torch::Tensor> all = module.parameters();
  for (auto& b : module.buffers()) all.push_back(b);
  return all;
}

ModelEma::ModelEma(const std::vector<torch::Tensor>& held, double decay) : decay_(decay) {
  torch::NoGradGuard no_grad;
  for (const auto& t : held) average_.push_back(t.detach().clone());
}

double ModelEma::decay_at(int64_t updates) const {
  return std::min(decay_,
                  (1.0 + static_cast<double>(updates)) / (10.0 + static_cast<double>(updates)));
}

void ModelEma::update(const std::vector<torch::Tensor>& held) {
  torch::NoGradGuard no_grad;
  DDPX_CHECK(held.size() == average_.size(), ErrorKind::kInternal,
             "EMA: the plan holds {} tensors, the average {}", held.size(), average_.size());
  const double d = decay_at(updates_++);
  std::vector<torch::Tensor> averaged, averaged_src;
  for (size_t i = 0; i < held.size(); ++i) {
    if (average_[i].is_floating_point()) {
      averaged.push_back(average_[i]);
      averaged_src.push_back(held[i]);
    } else {
      average_[i].copy_(held[i]);
    }
  }
  // One multi-tensor kernel for all the averages: ema += (1 - d) * (w - ema).
  if (!averaged.empty()) torch::_foreach_lerp_(averaged, averaged_src, 1.0 - d);
  assembled_ = false;
}

void ModelEma::assemble(parallel::HeldModel& plan, torch::nn::Module& whole) {
  if (assembled_) return;
  torch::NoGradGuard no_grad;
  const auto held = held_tensors(plan);
  DDPX_CHECK(held.size() == average_.size(), ErrorKind::kInternal,
             "EMA: the plan holds {} tensors, the average {}", held.size(), average_.size());
  const auto assembled = module_tensors(*plan.module().ptr());
  const bool whole_held =
      assembled.size() == held.size() &&
      std::equal(held.begin(), held.end(), assembled.begin(), [](const auto& a, const auto& b) {
        return a.unsafeGetTensorImpl() == b.unsafeGetTensorImpl();
      });
  if (whole_held) {
    // The rank holds the whole model (data parallel, ZeRO-1/2): the instance is the average
    // itself, current after every update from now on.
    set_tensors(whole, average_, /*alias=*/true);
    return;  // assembled_ stays false: aliasing again is free
  }
  std::vector<torch::Tensor> weights;
  for (size_t i = 0; i < held.size(); ++i) {
    weights.push_back(held[i].detach().clone());
    held[i].copy_(average_[i]);
  }
  plan.held_changed();
  set_tensors(whole, module_tensors(*plan.module().ptr()), /*alias=*/false);
  for (size_t i = 0; i < held.size(); ++i) held[i].copy_(weights[i]);
  plan.held_changed();
  assembled_ = true;
}

void ModelEma::load(parallel::Plan& plan, torch::nn::Module& whole) {
  torch::NoGradGuard no_grad;
  const torch::Device device = plan.device();
  torch::serialize::OutputArchive model, optimizer, average;
  plan.state_dict(model, optimizer);
  // Read back now: the archives may refer to the plan's memory (a sharded plan's gathered
  // parameters), which the loads below release.
  auto live_model = parallel::reopen(model, device);
  auto live_optimizer = parallel::reopen(optimizer, device);
  auto optimizer_again = parallel::reopen(optimizer, device);
  whole.save(average);
  auto in_average = parallel::reopen(average, device);
  plan.load_state_dict(in_average, optimizer_again);
  const auto held = held_tensors(plan);
  DDPX_CHECK(held.size() == average_.size(), ErrorKind::kInternal,
             "EMA: the plan holds {} tensors, the average {}", held.size(), average_.size());
  for (size_t i = 0; i < held.size(); ++i) average_[i].copy_(held[i]);
  plan.load_state_dict(live_model, live_optimizer);
  assembled_ = false;
}

}  // namespace ddpx::train
