// The data-parallel plan (plan.h): every rank holds the whole model and the whole optimizer state;
// DistributedDataParallel averages the gradients in buckets during backward (over the context's
// transport, through the chosen comm hook), SyncBatchNorm optionally shares the BatchNorm
// statistics, and the optimizer step is chosen once (step_strategy.h). With SGD where the group
// has peer memory (one host) the update runs inside backward, bucket by bucket (sharded_sgd.h):
// describe() then says "inside backward" and step() only checks that it happened. A world of one
// is the same plan without the DDP wrap (nothing is communicated).
//
// Construction is collective only where SyncBatchNorm is asked for; DDP (which broadcasts rank
// 0's weights and registers its hooks on the parameters as loaded) and the step are built at the
// first call after construction and any load_state_dict(), so a resumed run wraps the loaded
// parameters, as before.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/data/ddp.h"
#include "parallel/data/powersgd.h"
#include "parallel/data/step_strategy.h"
#include "parallel/plan.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel {

struct DataParallelOptions {
  DdpOptions ddp;
  StepOptions step;
  bool sync_bn = false;    // --sync_bn: convert the model's BatchNorm layers
  std::string model_name;  // for the --sync_bn error when there are none
  std::string note;        // appended to describe()'s plan: why a layout asked for ran as this one
};

class DataParallelPlan : public Plan {
 public:
  // `context` must outlive the plan.
  DataParallelPlan(torch::nn::AnyModule model, dist::Context& context,
                   const OptimizerFactory& make_optimizer, DataParallelOptions options);
  ~DataParallelPlan() override;

  std::string describe() override;
  MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) override;
  torch::Tensor clip_grad_norm(double max_norm) override;
  void step() override;
  void zero_grad() override;
  std::vector<torch::Tensor> parameters() override;
  void state_dict(torch::serialize::OutputArchive& model,
                  torch::serialize::OutputArchive& optimizer) override;
  void load_state_dict(torch::serialize::InputArchive& model,
                       torch::serialize::InputArchive& optimizer) override;
  torch::nn::AnyModule& module() override { return model_; }
  std::vector<HeldTensor> held_tensors() override;  // the whole model's
  const OptimizerFactory& optimizer_factory() const override { return make_optimizer_; }
  // With --comm_hook powersgd: powersgd_ratio (elements a compressed step does not send, as a
  // factor), powersgd_compressed_steps (so far) and powersgd_error_feedback_bytes.
  std::vector<std::pair<std::string, double>> epoch_metrics() override;

  int sync_bn_layers() const { return sync_bn_layers_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  StepStrategy::Kind step_kind();

 private:
  void wrap();  // DDP and the step, once (see above)

  torch::nn::AnyModule model_;
  dist::Context& context_;
  DataParallelOptions options_;
  OptimizerFactory make_optimizer_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int sync_bn_layers_ = 0;
  // Built by wrap(), at the first call after construction and any load_state_dict().
  std::unique_ptr<DistributedDataParallel> ddp_;
  std::unique_ptr<StepStrategy> step_;
  std::string powersgd_line_;  // with --comm_hook powersgd: what it sends, for describe()
  std::optional<PowerSgdTraffic> powersgd_traffic_;
  int64_t synced_steps_ = 0;  // backwards that communicated: PowerSGD compresses after start_iter
  bool last_synced_ = true;   // the last backward communicated (else step() has no update to check)
};

}  // namespace ddpx::parallel
