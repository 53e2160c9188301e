// The parallel plan: the one seam through which the trainer (and `bench train`) wraps the
// model, runs forward and backward, steps the optimizer, clips, evaluates, and saves and loads.
// Data parallel (parallel/data/data_parallel_plan.h), sharded (ZeRO/FSDP), pipeline and tensor
// parallel plans implement it, so the loop never branches on which plan it runs.
//
// The seam is split by concern, each part with its own contract below: TrainingStep (forward,
// backward, clipping, the update), CheckpointState (whole and sharded state), HeldModel (what
// this rank holds of the model and the whole assembled from it), Evaluation and Reporting. A
// Plan is all five; a caller takes the part it uses (evaluation an Evaluation&, a checkpoint a
// CheckpointState&), so what it may call is what its type says.
//
// What every plan does at construction:
// - What it wraps: the model as built on this rank (placed on its device, pretrained weights
//   loaded; a pipeline may take it in host memory and move only its stages to the device),
//   handed over at construction. The plan may convert layers (SyncBatchNorm,
//   tensor-parallel layers), keep only some of them (a pipeline stage) or shard their
//   parameters (ZeRO-3/FSDP).
// - Ownership: the plan owns the wrapped model and the optimizer. It builds the optimizer from
//   the factory it is given, over the parameters this rank updates (all of them for data
//   parallel, a shard for sharded plans, a stage's for a pipeline), and holds the optimizer
//   state, whole or sharded. Callers never step, zero or reload the optimizer themselves.
// - Collectives: any method may communicate unless its contract says it does not, so every rank
//   calls every method, in the same order (describe() and state_dict() included, though only
//   rank 0 prints or writes).
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ddpx::parallel {

// Builds the optimizer over the parameters this rank updates. A plan may keep it and call it
// again (the sharded plan builds an unsharded optimizer to save and load whole state), so it
// must not refer to anything that dies before the plan.
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor> params)>;

// A tensor this rank holds of the model (HeldModel::held_tensors()), by its name in the model.
struct HeldTensor {
  std::string name;
  torch::Tensor tensor;
};

// One micro-batch, as the caller hands it to forward_backward().
struct MicroBatch {
  torch::Tensor input;   // on the device; the first stage's input
  torch::Tensor target;  // what the loss compares the output with (labels, soft targets)
  // (output, target) -> their mean loss. A pipeline splits input and target along dim 0 into
  // its own micro-batches and calls it on the last stage for each.
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  // The loss -> the tensor backward starts from (loss scaling, 1/accumulation); null: the loss.
  std::function<torch::Tensor(const torch::Tensor& loss)> backward_root;
  // Run `forward` (the model and the loss) and `backward` inside the caller's contexts
  // (autocast, the profiler's ranges); null: as they are. A pipeline calls them once per stage.
  std::function<void(const std::function<void()>& forward)> in_forward_context;
  std::function<void(const std::function<void()>& backward)> in_backward_context;
  // The optimizer step this micro-batch's update makes, counted from the run's start and
  // carried by its checkpoints (the trainer's global step); -1: not known, the plan counts its
  // own. The deterministic mode keys its dropout streams by it, so a resumed run draws what an
  // uninterrupted one does.
  int64_t step = -1;
  // The learning rate of the update this micro-batch's step makes (the scheduler's rate at that
  // step); < 0: the rate the previous batch carried (or the optimizer's own).
  double learning_rate = -1;
};

// What forward_backward() leaves for the metrics, on the device; undefined on ranks that hold
// no loss.
struct MicroBatchResult {
  torch::Tensor loss;  // the micro-batch's mean loss, unscaled
  // What the metrics read: the model's output (logits), or the predicted class or token ids
  // (int64) where logits would cost a transfer (a pipeline's, a vocabulary-parallel plan's).
  torch::Tensor output;
};

// The training step.
// - forward_backward(batch, sync): the forward of the batch (inside the caller's forward
//   context: autocast, profiler ranges), its loss (the caller's function, applied where the
//   output is: the last stage of a pipeline, once per pipeline micro-batch) and backward from
//   the caller's backward root (fp16 loss scaling, 1/accumulation). It returns the mean loss
//   and the output for the metrics on the ranks that hold them, undefined tensors elsewhere.
// - When gradients are final: after forward_backward() with `sync` true, every gradient the
//   plan's step reads is complete (averaged over data-parallel ranks, reduced to its owner by a
//   sharded plan). With `sync` false (all but the last micro-batch of an accumulation) they
//   are this rank's local sum only, and nothing is communicated.
// - Where the update runs: in step(), unless the plan moved it into backward (the data-parallel
//   plan does with SGD on peer memory, told at construction that nothing reads the gradients
//   between backward and step: no loss scaling, no clipping); describe() then says "inside
//   backward" and step() only checks that backward made the update.
// - The learning rate travels with the batch: MicroBatch::learning_rate (when >= 0) is the rate
//   of the update that batch's step makes; forward_backward() gives it to the optimizer before
//   anything runs, since the update may run inside that backward. The plan has no other way in
//   for it, so no call order is imposed.
// - step(): the update after a synchronized backward, leaving the model where an unsharded step
//   on the global batch would. zero_grad() clears the gradients for the next accumulation.
// - clip_grad_norm(max_norm): scales the gradients so that their global L2 norm, over
//   everything the plan shards or splits across ranks, is at most max_norm: the same factor on
//   every rank. Returns the norm before clipping (on the device).
class TrainingStep {
 public:
  virtual ~TrainingStep() = default;

  // `sync` false: accumulate locally, no communication (not the last micro-batch of a step).
  // The batch's learning rate reaches the optimizer first.
  virtual MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) = 0;

  virtual torch::Tensor clip_grad_norm(double max_norm) = 0;  // returns the norm before
  virtual void step() = 0;
  virtual void zero_grad() = 0;

  // The parameters whose gradients this rank's step reads (fp16: unscaled and checked first).
  virtual std::vector<torch::Tensor> parameters() = 0;
};

// The state a checkpoint holds.
// - state_dict(): always the full, unsharded model and optimizer state in the model's own
//   parameter names and order (libtorch's Module::save / Optimizer::save archives), so a
//   checkpoint loads at any world size and under any plan; a sharded plan gathers it.
//   load_state_dict() takes the same full state and keeps what this rank needs; call it before
//   training starts (resume).
// - Sharded checkpoints: a plan whose state is split across ranks may save each rank's part
//   instead of gathering the whole (saves_sharded() true: the sharded plan). write_part() writes
//   this rank's part and is not collective; write_index() the layout of the parts (rank 0 writes
//   it). Any plan loads such parts: parallel/sharded/sharded_state.h rebuilds the whole state
//   with the plan's optimizer_factory() and hands it to load_state_dict().
// - device(): where this rank's model is, where loaded state goes. Not collective: rank 0
//   alone asks it while it writes a checkpoint's index.
class CheckpointState {
 public:
  virtual ~CheckpointState() = default;

  virtual void state_dict(torch::serialize::OutputArchive& model,
                          torch::serialize::OutputArchive& optimizer) = 0;
  virtual void load_state_dict(torch::serialize::InputArchive& model,
                               torch::serialize::InputArchive& optimizer) = 0;
  virtual torch::Device device() = 0;

  virtual bool saves_sharded() { return false; }
  virtual void write_part(torch::serialize::OutputArchive& part) { no_parts(); }
  virtual void write_index(torch::serialize::OutputArchive& index) { no_parts(); }
  // The factory the optimizer was built with (it may be called again).
  virtual const OptimizerFactory& optimizer_factory() const = 0;

 private:
  [[noreturn]] static void no_parts() {
    throw std::logic_error("this parallel plan saves whole checkpoints, not parts");
  }
};

// What this rank holds of the model, and the whole assembled from it.
// - module(): the whole model, to export and evaluate: whole for data parallel, gathered by a
//   sharded plan, a pipeline or tensor parallelism (communicating when it is not current).
// - held_tensors(): the tensors of the model this rank holds and updates, named as in the model,
//   in an order that stays the same: every parameter and buffer for data parallel and ZeRO-1/2,
//   the parameters' shards and the buffers under --shard full, its stages' (or their shards)
//   for a pipeline, its pieces and the unsplit layers for tensor parallelism. module() assembles
//   the whole model from them. What an average of the weights (EMA) keeps, so that it stays
//   where the parameters are. Not collective.
// - held_changed(): the caller wrote into held_tensors() (EMA swaps its average in, assembles it
//   through module() and swaps the weights back): the next module() assembles again instead of
//   returning what it assembled before. Not collective.
class HeldModel {
 public:
  virtual ~HeldModel() = default;

  virtual torch::nn::AnyModule& module() = 0;
  virtual std::vector<HeldTensor> held_tensors() = 0;
  virtual void held_changed() {}
};

// Evaluation. set_training(false) puts the model in evaluation mode without gathering it.
// eval_share() is this rank's share of the test set: {rank, count} for data::eval_indices.
// forward_eval(input) is the logits of this rank's test batch without gradients, defined on the
// ranks that count them (where forward_backward() returns outputs): the whole module() on every
// rank by default (Plan's); a pipeline's replica reads one share and runs it through its
// stages. Collective within the ranks of one share.
class Evaluation {
 public:
  virtual ~Evaluation() = default;

  struct Share {
    int rank = 0, count = 1;
  };
  virtual void set_training(bool on) = 0;
  virtual Share eval_share(int rank, int world_size) { return {rank, world_size}; }
  virtual torch::Tensor forward_eval(const torch::Tensor& input) = 0;
};

// What the plan tells the run. describe(): the start-up line (how the model is split and where
// the update runs). epoch_summary(): what the plan has to say after an epoch (the trainer
// prints it when it is not empty): a pipeline's bubble per rank; collective. epoch_metrics():
// figures for the run's metrics (--metrics_json, TensorBoard) at the same moment, by name:
// PowerSGD's compression; not collective.
class Reporting {
 public:
  virtual ~Reporting() = default;

  virtual std::string describe() = 0;
  virtual std::string epoch_summary() { return ""; }
  virtual std::vector<std::pair<std::string, double>> epoch_metrics() { return {}; }
};

// A plan: every part of the seam, with the defaults that read across parts (the device of the
// parameters the step updates; evaluation on the whole module()).
class Plan : public TrainingStep,
             public CheckpointState,
             public HeldModel,
             public Evaluation,
             public Reporting {
 public:
  torch::Device device() override {
    const auto params = parameters();
    return params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  }
  void set_training(bool on) override { module().ptr()->train(on); }
  torch::Tensor forward_eval(const torch::Tensor& input) override {
    return module().forward(input);
  }
};

}  // namespace ddpx::parallel
