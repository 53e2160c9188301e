// The data-parallel plan (see data_parallel_plan.h).
#include "parallel/data/data_parallel_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "distributed/context.h"
#include "optim/clip_grad.h"
#include "optim/learning_rate.h"
#include "parallel/data/powersgd.h"
#include "parallel/data/sync_batch_norm.h"
#include "parallel/held_tensors.h"

namespace ddpx::parallel {

DataParallelPlan::DataParallelPlan(torch::nn::AnyModule model, dist::Context& context,
                                   const OptimizerFactory& make_optimizer,
                                   DataParallelOptions options)
    : model_(std::move(model)),
      context_(context),
      options_(std::move(options)),
      make_optimizer_(make_optimizer) {
  if (options_.sync_bn) {
    sync_bn_layers_ = convert_sync_batch_norm(*model_.ptr(), context_);
    DDPX_CHECK(sync_bn_layers_ > 0, ErrorKind::kUsage,
               "--sync_bn: --model {} has no BatchNorm layers to synchronize; drop --sync_bn",
               options_.model_name);
  }
  optimizer_ = make_optimizer(model_.ptr()->parameters());
  if (options_.ddp.comm_hook == dist::CommHook::kPowerSgd && context_.distributed()) {
    // On every rank alike, before DDP's first broadcast.
    std::vector<torch::Tensor> trained;
    for (const auto& p : model_.ptr()->parameters())
      if (p.requires_grad()) trained.push_back(p);
    check_powersgd(trained, options_.ddp.powersgd,
                   options_.model_name.empty() ? "the model" : "--model " + options_.model_name);
    powersgd_traffic_ = powersgd_traffic(trained, options_.ddp.powersgd);
    powersgd_line_ = describe_powersgd(options_.ddp.powersgd, *powersgd_traffic_);
  }
}

DataParallelPlan::~DataParallelPlan() = default;

void DataParallelPlan::wrap() {
  if (step_) return;
  if (context_.distributed()) {
    ddp_ = std::make_unique<DistributedDataParallel>(model_, context_, options_.ddp);
  }
  // After DDP and any load (a load replaces the parameters and momentum buffers the split step
  // moves into peer memory).
  step_ = std::make_unique<StepStrategy>(*optimizer_, context_, ddp_.get(), options_.step);
}

std::string DataParallelPlan::describe() {
  wrap();
  // The step's name says where the update runs: "..., inside backward" when DDP's gradient
  // hooks make it, so that step() only checks.
  std::string plan = context_.distributed()
                         ? fmt::format("plan: data parallel over {} ranks", context_.world_size())
                         : std::string("plan: one process");
  if (!powersgd_line_.empty()) plan += ", gradients by " + powersgd_line_;
  if (!options_.note.empty()) plan += " (" + options_.note + ")";
  return fmt::format("optimizer step: {} | {}", step_->describe(), plan);
}

StepStrategy::Kind DataParallelPlan::step_kind() {
  wrap();
  return step_->kind();
}

MicroBatchResult DataParallelPlan::forward_backward(const MicroBatch& batch, bool sync) {
  wrap();
  optim::apply_learning_rate(*optimizer_, batch.learning_rate);  // the step may run in backward
  MicroBatchResult r;
  auto forward = [&] {
    r.output = ddp_ ? ddp_->forward(batch.input) : model_.forward(batch.input);
    r.loss = batch.loss(r.output, batch.target);
  };
  auto backward = [&] { (batch.backward_root ? batch.backward_root(r.loss) : r.loss).backward(); };
  auto run = [&] {
    if (batch.in_forward_context) {
      batch.in_forward_context(forward);
    } else {
      forward();
    }
    if (batch.in_backward_context) {
      batch.in_backward_context(backward);
    } else {
      backward();
    }
  };
  if (ddp_ && !sync) {
    auto guard = ddp_->no_sync();
    run();
  } else {
    run();
  }
  last_synced_ = sync;
  if (sync && ddp_) ++synced_steps_;
  return r;
}

std::vector<std::pair<std::string, double>> DataParallelPlan::epoch_metrics() {
  if (!powersgd_traffic_) return {};
  const auto compressed = std::max<int64_t>(synced_steps_ - options_.ddp.powersgd.start_iter, 0);
  return {{"powersgd_ratio", powersgd_traffic_->ratio()},
          {"powersgd_compressed_steps", static_cast<double>(compressed)},
          {"powersgd_error_feedback_bytes",
           static_cast<double>(powersgd_traffic_->error_feedback_bytes)}};
}

torch::Tensor DataParallelPlan::clip_grad_norm(double max_norm) {
  // Every rank holds the whole averaged gradient: the global norm is the local one.
  return optim::clip_grad_norm(model_.ptr()->parameters(), max_norm);
}

void DataParallelPlan::step() {
  wrap();
  step_->step(last_synced_);
}

void DataParallelPlan::zero_grad() { optimizer_->zero_grad(); }

std::vector<torch::Tensor> DataParallelPlan::parameters() { return model_.ptr()->parameters(); }

std::vector<HeldTensor> DataParallelPlan::held_tensors() { return module_tensors(*model_.ptr()); }

void DataParallelPlan::state_dict(torch::serialize::OutputArchive& model,
                                  torch::serialize::OutputArchive& optimizer) {
  // Whole on every rank (the split step keeps one shared, whole copy): nothing to gather.
  model_.ptr()->save(model);
  optimizer_->save(optimizer);
}

void DataParallelPlan::load_state_dict(torch::serialize::InputArchive& model,
                                       torch::serialize::InputArchive& optimizer) {
  DDPX_CHECK(!step_, ErrorKind::kInternal,
             "the data-parallel plan loads a state only before it is first used");
  model_.ptr()->load(model);
  optimizer_->load(optimizer);
}

}  // namespace ddpx::parallel
