// The parallel plan: the one seam through which the trainer (and `bench train`) wraps the
// model, runs forward and backward, steps the optimizer, clips, and saves and loads. Data
// parallel (parallel/data/data_parallel_plan.h) is the first plan; sharded (ZeRO/FSDP),
// pipeline and tensor parallel plans implement the same interface, so the loop never branches
// on which plan it runs.
//
// Contract, for every plan:
// - What it wraps: the model as built on this rank (placed on its device, any pretrained
//   weights loaded), handed over at construction. The plan may convert layers (SyncBatchNorm,
//   tensor-parallel layers), keep only some of them (a pipeline stage) or shard their
//   parameters (ZeRO-3/FSDP).
// - Ownership: the plan owns the wrapped model and the optimizer. It builds the optimizer
//   itself, from the factory it is given, over the parameters this rank updates (all of them
//   for data parallel, a shard for sharded plans, a stage's for pipeline), and it holds the
//   optimizer state (whole, or sharded). Callers never step or reload the optimizer directly.
// - forward_backward(): one micro-batch's forward (inside the caller's forward context,
//   e.g. autocast), its loss (the caller's loss function, applied where the model's output
//   is: on the last stage of a pipeline) and backward from the caller's backward root (loss
//   scaling, 1/accumulation). It returns the loss and output for the metrics where this rank
//   holds them (undefined on ranks that compute no loss).
// - When gradients are final: after a forward_backward() with `sync` true, every gradient the
//   plan's step reads is complete (averaged across data-parallel ranks, reduced to its shard
//   by a sharded plan); after `sync` false they are this rank's local accumulation only
//   (gradient accumulation: no communication). A plan whose update runs inside backward says
//   so in describe(); its gradients are then never read between backward and step(), so the
//   trainer may only unscale or clip where the plan's describe() does not say "inside backward"
//   (the plan is told at construction whether anything reads them).
// - set_learning_rate(): the rate of the coming update; call before the forward_backward whose
//   step follows, because the update may run inside that backward.
// - step(): the optimizer update after a synchronized backward (or the check that backward
//   already made it), leaving every rank's model where an unsharded step on the global batch
//   would. zero_grad() clears the gradients for the next accumulation.
// - clip_grad_norm(): scales the gradients so that their global L2 norm (across everything the
//   plan shards or splits over ranks) is at most max_norm; the same factor on every rank.
// - state_dict(): always the full, unsharded model and optimizer state in the model's own
//   names and order (libtorch's Module::save / Optimizer::save archive), so a checkpoint loads
//   at any world size and under any plan. load_state_dict() takes the same full state and
//   keeps what this rank needs; call it before training starts (resume).
// - module(): the model the loop evaluates, exports and averages (EMA), whole on this rank
//   (a sharded plan gathers it; a pipeline keeps its stages and evaluates through them).
// - Collectives: every method may communicate, so every rank calls every method in the same
//   order (describe() and parameters() included).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddpx::parallel {

// Builds the optimizer over the parameters this rank updates.
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor> params)>;

// One micro-batch, as the caller hands it to forward_backward().
struct MicroBatch {
  torch::Tensor input;  // on the device; the first stage's input
  // The model's output -> this micro-batch's mean loss (the labels are the caller's).
  std::function<torch::Tensor(const torch::Tensor& output)> loss;
  // The loss -> the tensor backward starts from (loss scaling, 1/accumulation); null: the loss.
  std::function<torch::Tensor(const torch::Tensor& loss)> backward_root;
  // Run `forward` (the model and the loss) and `backward` inside the caller's contexts
  // (autocast, the profiler's ranges); null: as they are. A pipeline calls them once per stage.
  std::function<void(const std::function<void()>& forward)> in_forward_context;
  std::function<void(const std::function<void()>& backward)> in_backward_context;
};

// What forward_backward() leaves for the metrics, on the device; undefined on ranks that hold
// no loss.
struct MicroBatchResult {
  torch::Tensor loss;    // the micro-batch's mean loss, unscaled
  torch::Tensor output;  // the model's output (logits)
};

class Plan {
 public:
  virtual ~Plan() = default;

  // For the start-up line: how the model is split and where the update runs.
  virtual std::string describe() = 0;

  // `sync` false: accumulate locally, no communication (not the last micro-batch of a step).
  virtual MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) = 0;

  virtual void set_learning_rate(double lr) = 0;
  virtual torch::Tensor clip_grad_norm(double max_norm) = 0;  // returns the norm before
  virtual void step() = 0;
  virtual void zero_grad() = 0;

  // The parameters whose gradients this rank's step reads (fp16: unscaled and checked first).
  virtual std::vector<torch::Tensor> parameters() = 0;

  virtual void state_dict(torch::serialize::OutputArchive& model,
                          torch::serialize::OutputArchive& optimizer) = 0;
  virtual void load_state_dict(torch::serialize::InputArchive& model,
                               torch::serialize::InputArchive& optimizer) = 0;

  virtual torch::nn::AnyModule& module() = 0;
};

}  // namespace ddpx::parallel
