// The pipeline-parallel plan (--pipeline_parallel P): the model's layers (layer_sequence.h) cut
// into P stages (stage_split.h; V*P with --stages_per_rank V), one a rank, and each batch cut into
// M micro-batches that flow through the stages in the order of a schedule (schedule.h): GPipe,
// 1F1B or interleaved 1F1B. Activations go forward and their gradients back by c10d send/recv
// on links between neighbouring ranks (pipeline_links.h: NCCL on GPUs, Gloo on the CPU, their
// transfers matched by order), each micro-batch's loss is taken on the last stage, and the
// gradients are those of the unsplit model over the whole batch. A world of N ranks is P stages x
// N/P data-parallel replicas laid out by the mesh (mesh.h: without tensor parallelism, global rank
// g is stage g % P of replica g / P); every replica sees its own batch (the data's rank is the
// replica), and a stage's replicas average their gradients over a group of their own
// (sub_group.h).
//
// Whole replicas average through the gradient reducer DDP uses (reducer.h), one for each of
// this rank's stages over the stage's replica group: its gradients are packed into buckets, the
// micro-batches' backwards accumulate into them without communicating, and the stage's last
// micro-batch backward launches each bucket's all-reduce as the bucket fills, so the averaging
// overlaps the rest of that backward and of the schedule (an interleaved rank's other stages,
// the sends, the loss). forward_backward() waits for the buckets before it returns.
//
// Sharded replicas (--shard, torchtitan's PP x FSDP): each stage is one unit (shard_unit.h) split
// across its replicas, with a unit reducer of its own (unit_reducer.h; both kinds are one
// gradient-sync seam, gradient_sync.h): after the schedule its gradients are reduce-scattered
// instead of all-reduced (not during the last backward: the reduce's input, the stage's whole
// gradients packed, would lie beside that backward's activations), and the optimizer steps
// this replica's shards:
// - optimizer (ZeRO-1) and gradients (ZeRO-2): the stage's whole parameters are all-gathered
//   from the updated shards before the next forward; gradients drops the whole gradients once
//   they are scattered.
// - full (ZeRO-3): as gradients, and the stage's parameters are freed after the step's
//   reduce-scatter and gathered again at the next forward. They stay whole through all of a
//   step's micro-batches (FSDP's reshard_after_forward=False, which torchtitan uses under a
//   pipeline): one all-gather and one reduce-scatter a step, not one a micro-batch.
// The parameters equal the unsharded pipeline's up to the order of sums; state_dict() is the
// same whole model and optimizer state.
//
// Within the plan contract (plan.h):
// - forward_backward() returns the batch's loss and logits on each replica's first rank (the
//   last stage sends them there, so rank 0 reports), undefined tensors on the others.
// - The optimizer is built over this rank's stages' parameters; step() updates them.
// - A rank holds only its stages' parameters and buffers while it trains: the other stages'
//   tensors keep their shapes but not their memory (storage.h) from construction on.
//   module() and state_dict() bring every stage's parameters and buffers from its replica-0
//   rank to all ranks, so export and whole checkpoints see the whole trained model, and such a
//   checkpoint is the unsplit model's (it loads in any plan); the next forward_backward() frees
//   the other stages again. Evaluation runs through the stages and gathers nothing.
// - Checkpoints by stage (saves_sharded(), --checkpoint_format auto): each rank writes what it
//   holds and nothing is gathered. A stage's replica-0 rank writes its stages' parameters,
//   buffers and optimizer; with sharded replicas every replica writes its shards and their
//   optimizer state (replica 0 the buffers). The index (sharded_state.h's PartHolders) says
//   which part holds which rows, so the parts load whole at any world size, in any plan.
// - The model as handed over is whole on every rank (rank 0's weights are broadcast, rank 0
//   times the layers), so it must fit once, at start: in host memory where `device` is given
//   (the trainer's way), after which only the rank's stages reach the device.
// - BatchNorm normalises each micro-batch by its own statistics (as in GPipe and PyTorch's
//   pipelining), so a BatchNorm model's gradients differ from the unsplit batch's; models
//   without BatchNorm match it to rounding.
// - Tied parameters (GPT's token embedding, which is its output layer too: a parameter that
//   layers of stages on different pipeline ranks list, layer_sequence.h) are kept whole on each of
//   those ranks, one copy each (Megatron's embedding group). After a synchronized backward, and
//   after the replicas' averages, their gradients are summed over a group of those ranks (one per
//   replica, made once, in one order on every rank), so every copy takes the same step and the
//   copies stay equal; the gradient norm counts them once, and scales both. A tensor that two
//   stages of one rank list is taken once (params_of()). Checkpoints and module() hold the one
//   tensor under the unsplit model's key.
// Shapes and dtypes of what crosses each stage boundary are found once, at the first batch: each
// stage's rank runs its stage on one sample in the caller's forward context (autocast
// included), in stage order, handing the shapes on, so no rank sends a shape at run time.
#pragma once

#include <c10/core/Event.h>
#include <torch/nn/modules/container/sequential.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/activation_checkpoint.h"
#include "models/layer_sequence.h"
#include "parallel/data/ddp.h"
#include "parallel/gradient_sync.h"
#include "parallel/mesh.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/plan.h"
#include "parallel/sharded/shard_mode.h"
#include "parallel/sharded/shard_unit.h"

namespace c10d {
class ProcessGroup;
class Work;
}  // namespace c10d

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel {

class PipelineLinks;

struct PipelineOptions {
  int stages = 2;        // P: pipeline ranks
  int microbatches = 2;  // M: per batch
  PipelineSchedule schedule = PipelineSchedule::k1F1B;
  int stages_per_rank = 1;  // V (interleaved)
  PipelineBalance balance = PipelineBalance::kTime;
  // For the time balance: one sample's shape ((C, H, W); a language model's (T), token ids of
  // sample_dtype) and the micro-batch to time with. Empty:
  // the balance falls back to parameter counts.
  std::vector<int64_t> sample_shape;
  c10::ScalarType sample_dtype = c10::ScalarType::Float;  // a language model's: token ids (Long)
  int64_t micro_batch = 1;
  // The first layer of each of the V*P stages (C++ callers and tests); empty: balanced.
  std::vector<size_t> bounds;
  std::string model_name = "the model";  // for errors
  // Which layers of the stages recompute their forward in backward (activation_checkpoint.h).
  models::ActivationCheckpointing checkpointing;
  // How this plan's context's ranks lie on the job's mesh (mesh.h): its pipeline dimension of
  // `stages`, its data-parallel replicas, and for the ranks the stage table and the bubble line
  // print, the job's ranks (a pipeline of tensor-parallel stages runs on the slice of one tensor
  // rank: tensor_parallel_plan.h). Unset: data x pipeline over the context.
  std::optional<Mesh> mesh;
  // --shard: the stages' replicas shard them (see "Sharded replicas" above); nothing is split
  // where a stage has one replica. gather_dtype: what the all-gathers send (sharded_plan.h).
  ShardMode shard = ShardMode::kNone;
  c10::ScalarType gather_dtype = c10::ScalarType::Undefined;
  // Whole replicas: the gradient buckets' caps (as DdpOptions': the first bucket of each stage
  // at most about first_bucket_bytes, the others about bucket_bytes).
  int64_t first_bucket_bytes = DdpOptions{}.first_bucket_bytes;
  int64_t bucket_bytes = DdpOptions{}.bucket_bytes;
  // Where the model is handed over in host memory (built whole there, as the trainer does), the
  // device this rank's stages go to: only they are moved there (channels_last: 4-d tensors in
  // NHWC), the other stages' tensors move without memory, and rank 0 times each layer there one
  // at a time. Unset: the stages stay where the model is.
  std::optional<torch::Device> device;
  bool channels_last = false;
  // Training's predictions from the last stage's output, computed there, so that only they
  // travel to the first stage (MicroBatchResult::output): null, the argmax over the last
  // dimension; a vocabulary-parallel plan's (collective over the last stage's tensor group).
  std::function<torch::Tensor(const torch::Tensor& output)> predict;
};

// One row of the stage table the plan prints at start.
struct StageInfo {
  int stage = 0;          // virtual stage: chunk * P + pipeline rank
  int pipeline_rank = 0;  // which rank of each replica runs it
  size_t first_layer = 0, end_layer = 0;
  std::string first_name, last_name;
  int64_t parameters = 0;
  double cost_ms = 0;  // measured forward + backward (time balance), else 0
};

// What the last forward_backward() spent, on this rank.
struct PipelineStats {
  double seconds = 0;  // the whole forward_backward
  // Blocked on a receive (or on sends at the end): the bubble. On a GPU with NCCL, the time its
  // stream waited on receives.
  double wait_seconds = 0;
  int max_activations = 0;  // micro-batches whose activations this rank held at once
  double idle_share() const { return seconds > 0 ? wait_seconds / seconds : 0; }
  // Replicas, a synchronized step: this rank's stages' gradient buckets (sharded: units), how
  // many of them were launched before the backward that launches them returned (overlapped with
  // the rest of the step), and the time spent waiting for the averages after the schedule (the
  // exposed part of the replicas' averaging).
  int sync_buckets = 0;
  int sync_buckets_in_backward = 0;
  double sync_wait_seconds = 0;
};

class PipelinePlan : public Plan {
 public:
  // Collective over the world (broadcasts rank 0's weights; the time balance's costs). Throws
  // ddpx::Error(kUsage) before any collective for a layout that cannot run: a world that P does
  // not divide, a schedule the shape cannot take, a model that is not sequential-shaped, fewer
  // layers than stages. `context` must outlive the plan.
  PipelinePlan(torch::nn::AnyModule model, dist::Context& context,
               const OptimizerFactory& make_optimizer, PipelineOptions options);
  // A user's Sequential: one layer per child.
  PipelinePlan(torch::nn::Sequential model, dist::Context& context,
               const OptimizerFactory& make_optimizer, PipelineOptions options);
  // A model and its layer sequence given: a tensor-parallel split model's (parallelize.h), whose
  // layers communicate within their tensor group; every rank of that group must be in a
  // pipeline of its own, running the same stages in the same order. With time balance, every
  // pipeline's rank 0 times the layers and they must agree: give `bounds` or the parameter
  // balance where timings could differ.
  PipelinePlan(torch::nn::AnyModule model, std::vector<models::Layer> layers,
               dist::Context& context, const OptimizerFactory& make_optimizer,
               PipelineOptions options);
  ~PipelinePlan() override;

  std::string describe() override;
  MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) override;
  torch::Tensor clip_grad_norm(double max_norm) override;
  void step() override;
  void zero_grad() override;
  std::vector<torch::Tensor> parameters() override;  // this rank's stages' (or their shards)
  torch::Device device() override;  // the model's, also on a rank whose stages have no parameters
  void state_dict(torch::serialize::OutputArchive& model,
                  torch::serialize::OutputArchive& optimizer) override;
  void load_state_dict(torch::serialize::InputArchive& model,
                       torch::serialize::InputArchive& optimizer) override;
  torch::nn::AnyModule& module() override;
  // This rank's stages' parameters (their shards, sharded replicas) and buffers.
  std::vector<HeldTensor> held_tensors() override;
  void held_changed() override;  // every stage gathered and broadcast again by module()
  // The stages' modes; sharded replicas gather their stages for evaluation (collective).
  void set_training(bool on) override;
  // The replica's share; its ranks run the batch through their stages, the first gets the logits.
  Share eval_share(int rank, int world_size) override;
  torch::Tensor forward_eval(const torch::Tensor& input) override;
  const OptimizerFactory& optimizer_factory() const override { return make_optimizer_; }
  // Checkpoints by stage (see above); false where the layers do not cover every parameter and
  // buffer of the model (a part would miss them), which then saves whole.
  bool saves_sharded() override { return covers_model_; }
  void write_part(torch::serialize::OutputArchive& part) override;  // not collective
  void write_index(torch::serialize::OutputArchive& index) override;
  // "pipeline bubble (idle share of forward_backward) by rank: 0 27.1% | 1 26.0%; activations
  // held at most: 0 4 | 1 2", and with whole replicas the share of forward_backward spent
  // waiting for their averages after the schedule: since the last summary, every rank's.
  // Collective.
  std::string epoch_summary() override;

  const std::vector<StageInfo>& stage_table() const { return table_; }
  std::vector<std::string> stage_table_lines() const;
  const PipelineStats& last_stats() const { return stats_; }
  int pipeline_rank() const { return pipeline_rank_; }
  torch::optim::Optimizer* optimizer() { return optimizer_.get(); }  // null: a rank without params
  int replica() const { return replica_; }
  const std::vector<ShardUnit>& units() const { return units_; }  // sharded replicas: a stage each
  // How many pipeline ranks of a replica hold `param` (one of this rank's stages'): the tied
  // copies' count (each counts that share of the gradient norm), else 1.
  int copies(const torch::Tensor& param) const;

 private:
  // Tags above every (micro-batch, stage, direction) one: the loss, the logits, the shapes.
  static constexpr int kResultTag = 1 << 24;
  struct Boundary {  // what stage s sends to stage s+1, less the batch dimension
    std::vector<int64_t> shape;
    c10::ScalarType dtype = c10::ScalarType::Float;
  };
  struct InFlight {               // one micro-batch on one of this rank's stages
    torch::Tensor input, output;  // output: the stage's; the loss's root on the last stage
  };

  std::vector<double> layer_costs();
  void probe_boundaries(const MicroBatch& batch);
  torch::Tensor run_stage(int stage, torch::Tensor x);
  int rank_of(int stage) const;  // the global rank that runs `stage` in this replica
  torch::Tensor receive(int from_stage, int to_stage, int microbatch, bool forward,
                        const Boundary& boundary, int64_t rows, const torch::Device& device);
  void send(const torch::Tensor& t, int to_stage, bool forward);
  // A last stage's output's argmax over its last dimension (class or token ids, int64), or
  // options_.predict's: what training's metrics read, in place of the logits.
  torch::Tensor predict(const torch::Tensor& output) const;
  // The last stage's output (rows of the batch) on the replica's first rank; undefined on the
  // others. Collective between those two ranks. `predictions`: `output` holds predict()'s ids
  // (int64, one dimension fewer than the stage's output), not the logits: training's, so that
  // a language model's B x T x V logits never move.
  torch::Tensor output_to_first_rank(const torch::Tensor& output, int64_t rows,
                                     const torch::Device& device, bool predictions);
  void finish_sends();
  // The time this rank's GPU stream sat waiting on NCCL receives since the last call (it waits
  // for their events: call after the step's last receive); 0 off the GPU.
  double device_idle();
  // Replicas (pipeline_replica_sync.cpp): a gradient sync for each of this rank's stages, a
  // reducer for whole replicas (build_reducers), a unit reducer for sharded ones (build_units).
  void build_reducers();
  void finish_replica_sync();  // waits for every stage's; `full` then frees the stages
  // Tied parameters (pipeline_tied.cpp).
  std::vector<torch::Tensor> params_of(int pipeline_rank) const;  // its stages', each once
  void find_tied();           // tied_, tied_ranks_, counted_; refuses what cannot run
  void build_tied_group();    // collective over the context: every rank, in one order
  void sum_tied_gradients();  // over tied_group_: after the replicas' averages
  void gather_whole();        // every stage's parameters and buffers from its replica-0 rank
  void free_others();         // the memory of the stages this rank does not run
  // Sharded replicas (pipeline_shards.cpp).
  bool sharded() const { return !units_.empty(); }
  void build_units();
  void gather_units(bool full_precision);  // the stages whole where they are not
  std::string save_optimizer_part();       // this pipeline rank's optimizer archive, whole
  void load_optimizer_part(torch::optim::Optimizer& whole);

  torch::nn::AnyModule model_;
  std::vector<models::Layer> layers_;
  dist::Context& context_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  std::shared_ptr<dist::Context> replicas_;  // this stage's data-parallel replicas
  std::unique_ptr<PipelineLinks> links_;     // to the adjacent pipeline ranks (P > 1)
  OptimizerFactory make_optimizer_;
  PipelineOptions options_;
  Mesh mesh_;  // the context's ranks on the mesh (options_.mesh, or data x pipeline)
  int pipeline_rank_ = 0, replica_ = 0, replica_count_ = 1;
  std::vector<size_t> bounds_;  // stage s: layers [bounds_[s], bounds_[s+1])
  std::vector<StageInfo> table_;
  std::vector<int> my_stages_;                   // stage chunk * P + pipeline_rank_, by chunk
  std::vector<torch::Tensor> params_, buffers_;  // this rank's stages'
  std::vector<torch::Tensor> others_;            // the other stages' parameters and buffers
  std::vector<size_t> others_nbytes_;            // their storage sizes when held
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::vector<std::unique_ptr<GradientSync>> syncs_;  // replicas: by chunk, null: no params
  std::vector<torch::Tensor> tied_;  // this rank's parameters that another pipeline rank holds too
  std::vector<int> tied_ranks_;      // the pipeline ranks holding the tied parameters, ascending
  std::shared_ptr<dist::Context> tied_group_;  // their ranks in this replica (null: none needed)
  std::vector<bool> counted_;     // by params_: false for a tied one (its copies share the norm)
  std::vector<ShardUnit> units_;  // sharded replicas: one per stage of this rank
  std::vector<torch::Tensor> shards_;            // what the optimizer steps then, params_ order
  std::vector<std::vector<size_t>> unit_order_;  // units_[u].params()[i] is params_[order[u][i]]
  std::vector<Boundary> boundaries_;             // per stage: its output
  std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, torch::Tensor>> sends_;
  std::vector<std::pair<c10::Event, c10::Event>> device_waits_;  // (before, after) a receive
  PipelineStats stats_;
  PipelineStats epoch_;        // summed since the last epoch_summary() (max_activations: the most)
  bool covers_model_ = false;  // every parameter and buffer of model_ is in a layer
  bool whole_ = true;          // every rank's copy of every stage is current
  bool others_held_ = true;    // the other stages' tensors have memory (current or not)
  bool gathers_in_place_ = false;  // sharded replicas: from peer memory into the parameters
};

}  // namespace ddpx::parallel
