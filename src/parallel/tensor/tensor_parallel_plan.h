// The tensor-parallel plan (--tensor_parallel T): each layer the model's plan names
// (parallelize.h: a ViT's attention and MLP, the MLP's first two layers) split across T ranks,
// Megatron-LM style, composed with data parallelism on a mesh of data x tensor, and with pipeline
// parallelism on a mesh of data x pipeline x tensor (`pipeline` below: the pieces' inner plan is
// then a pipeline over the ranks of one tensor rank, whose stages each rank's pieces are). A world
// of N ranks is N/T data-parallel replicas of T tensor-parallel ranks: global rank g is tensor rank
// g % T of replica g / T (a replica's ranks are neighbours, so on one node they share its fastest
// links). Every rank of a replica sees the replica's batch (the data's rank is the replica); the
// tensor ranks of one replica communicate inside each block (two all-reduces forward, two
// backward), and each rank's piece is averaged with the same piece of the other replicas by DDP
// over a group of its own (sub_group.h), as the data-parallel plan averages a whole model; with
// `shard`, the sharded plan shards it over that group instead (ZeRO-1/2/3 x tensor parallelism;
// on the 3-D mesh the pipeline's sharded replicas shard each stage's pieces, pipeline_plan.h).
//
// Within the plan contract (plan.h):
// - forward_backward() returns the loss and logits on every rank (each tensor rank computes the
//   whole output); the gradients are those of the unsplit model on the replicas' global batch.
//   A GPT's output layer is split over the vocabulary (tensor/vocab_parallel.h): its loss is the
//   plan's, from each rank's slice of the logits (the caller's loss function is not called), and
//   the output it returns is the predicted token ids (int64, the whole logits' argmax), not the
//   logits, which no rank holds whole in training. forward_eval() gathers them.
// - The optimizer steps this rank's pieces and the unsplit layers' parameters.
// - clip_grad_norm() takes the norm over the whole model: the pieces' squares summed over the
//   tensor ranks (and their shards' over the replicas, with `shard`), the unsplit layers' counted
//   once.
// - state_dict() is the unsplit model's and optimizer's: every piece gathered from its tensor
//   group, so a checkpoint loads at another mesh, in one process, or in any plan; load_state_dict()
//   takes such a state and keeps this rank's pieces.
// - While it trains, a rank holds memory for its pieces only: the whole model's split parameters
//   keep their shapes but not their memory (storage.h) from construction on. module() is the
//   whole model, its split layers gathered from the pieces into memory given back for them
//   (collective over the tensor group): evaluation, EMA and export see the trained model; the
//   next forward_backward() frees them again. The model as handed over is whole on every rank,
//   so it must fit once, at start. Evaluation runs on the pieces (forward_eval), not on the
//   whole model.
// Refused before any collective: a world that T does not divide, a model without a plan, heads or
// widths that T does not divide (one line naming the flag).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/activation_checkpoint.h"
#include "parallel/data/data_parallel_plan.h"
#include "parallel/mesh.h"
#include "parallel/pipeline/pipeline_plan.h"
#include "parallel/plan.h"
#include "parallel/sharded/shard_mode.h"
#include "parallel/tensor/shard_spec.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel {

struct TensorParallelOptions {
  int size = 2;  // T: ranks that split each layer
  // Megatron's sequence parallelism (tensor/regions.h; the ViTs, the GPT family, BERT): the
  // activations between the split layers cut over tokens, all-gathers and reduce-scatters in
  // place of the all-reduces.
  bool sequence_parallel = false;
  // A language model's vocabulary padded to a multiple of this x `size` (tensor/vocab_parallel.h:
  // Megatron-LM's --make-vocab-size-divisible-by, whose default this is).
  int64_t vocab_divisible_by = 128;
  // --activation_checkpointing: the split blocks recomputed in backward (parallelize.h).
  models::ActivationCheckpointing checkpointing;
  DataParallelOptions replicas;  // how the replicas average (comm hook, buffers)
  // --shard: the replicas shard each piece's optimizer state, gradients and parameters (ZeRO
  // 1/2/3, sharded_plan.h) instead of averaging whole pieces by DDP; with sequence
  // parallelism, the partial gradients' shards are summed over the tensor group after backward.
  ShardMode shard = ShardMode::kNone;
  // --pipeline_parallel P with --tensor_parallel T: the 3-D mesh of data x pipeline x tensor.
  // The split model's layers (parallelize.h) cut into P stages, each stage split over T ranks:
  // the pipeline plan (pipeline_plan.h) runs on the ranks of one tensor rank, its stage s of
  // replica d on the job's rank (d * P + s) * T + t. Its stages are balanced by parameters
  // (the split layers cannot be timed by one rank), its `checkpointing` is this struct's, its
  // `shard` this struct's (each stage's pieces sharded over their replicas). With sequence
  // parallelism the stages send each other their share of the tokens, tensor rank t to t.
  std::optional<PipelineOptions> pipeline;
  // The job's mesh (mesh.h): its tensor dimension is `size`, its pipeline `pipeline`'s stages;
  // the pipeline runs on its slice at this rank's tensor rank. Unset: built from those sizes.
  std::optional<Mesh> mesh;
  std::string model_name = "the model";
  // --label_smoothing: the vocabulary-parallel loss's (a GPT's), which replaces the caller's
  // cross-entropy there (the model's output is each rank's slice of the logits).
  double label_smoothing = 0;
};

class ShardedPlan;

class TensorParallelPlan : public Plan {
 public:
  // Collective over the world (rank 0's weights to every rank; the groups). `context` must
  // outlive the plan.
  TensorParallelPlan(torch::nn::AnyModule model, dist::Context& context,
                     const OptimizerFactory& make_optimizer, TensorParallelOptions options);
  ~TensorParallelPlan() override;

  std::string describe() override;
  // The batch's learning rate reaches the inner plan with the batch.
  MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) override;
  torch::Tensor clip_grad_norm(double max_norm) override;
  void step() override;
  void zero_grad() override;
  std::vector<torch::Tensor> parameters() override;  // this rank's pieces and the unsplit ones
  void state_dict(torch::serialize::OutputArchive& model,
                  torch::serialize::OutputArchive& optimizer) override;
  void load_state_dict(torch::serialize::InputArchive& model,
                       torch::serialize::InputArchive& optimizer) override;
  torch::nn::AnyModule& module() override;
  // The inner plan's: this rank's pieces and unsplit layers (their shards, their stages').
  std::vector<HeldTensor> held_tensors() override { return inner_->held_tensors(); }
  void held_changed() override;  // the whole gathered from the pieces again by module()
  void set_training(bool on) override;
  // Evaluation on the pieces: the replica's share, its T ranks computing each batch together
  // (the split layers' collectives), the logits counted on tensor rank 0.
  Share eval_share(int rank, int world_size) override;
  torch::Tensor forward_eval(const torch::Tensor& input) override;
  const OptimizerFactory& optimizer_factory() const override { return make_optimizer_; }
  // The inner plan's: a pipeline's bubble by rank (its ranks of tensor rank 0 on rank 0).
  std::string epoch_summary() override { return inner_->epoch_summary(); }
  std::vector<std::pair<std::string, double>> epoch_metrics() override {
    return inner_->epoch_metrics();
  }

  int tensor_rank() const;
  int replica() const { return replica_; }
  // Over this rank's pieces (or their shards; a pipeline: its stages' pieces).
  torch::optim::Optimizer& optimizer() { return *inner_optimizer_; }
  PipelinePlan* pipeline() { return pipeline_; }  // the inner plan, with `pipeline`; else null
  ShardedPlan* sharded() { return sharded_; }     // the inner plan, with `shard`; else null
  // The model this rank runs: its pieces by the whole model's names.
  torch::nn::Module& split_module() { return *split_.ptr(); }
  // The split parameters of split_module() by name, and how each is cut.
  const std::map<std::string, tensor::ShardSpec>& specs() const { return specs_; }
  // "mesh (data x tensor) 2 x 2: replica 0: ranks 0 1 | replica 1: ranks 2 3"; with a
  // pipeline "mesh (data x pipeline x tensor) 1 x 2 x 2: replica 0: stage 0 ranks 0 1, stage 1
  // ranks 2 3"
  std::string mesh_line() const;

 private:
  void refresh_whole();  // collective over the tensor group, when the pieces changed
  torch::Tensor clip_sharded(double max_norm);  // clip_grad_norm() over the replicas' shards
  void hold_whole();  // memory for the whole model's split parameters (their values stale)
  void free_whole();  // ... and none

  torch::nn::AnyModule whole_, split_;
  std::map<std::string, tensor::ShardSpec> specs_;
  std::vector<torch::Tensor> partial_grads_;  // sequence parallel: summed over the tensor group
  std::vector<size_t> partial_index_;         // ... their places in split_'s parameters
  std::string summary_;
  // A vocabulary-parallel output (tensor::SplitModel's): null for the others.
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, double)> split_loss_;
  std::function<torch::Tensor(const torch::Tensor&)> split_predict_, split_gather_;
  dist::Context& context_;
  Mesh mesh_;                                    // the context's ranks: data x (pipeline x) tensor
  std::shared_ptr<dist::Context> tensor_group_;  // the context itself when T is the world
  std::shared_ptr<dist::Context> replicas_;      // this piece's data-parallel replicas
  OptimizerFactory make_optimizer_;
  TensorParallelOptions options_;
  int replica_ = 0;
  std::unique_ptr<Plan> inner_;  // the pieces over the replicas: DDP, or sharded by --shard
  torch::optim::Optimizer* inner_optimizer_ = nullptr;
  ShardedPlan* sharded_ = nullptr;          // inner_, when --shard
  PipelinePlan* pipeline_ = nullptr;        // inner_, with a pipeline
  bool stale_ = false;                      // the whole model lags the pieces
  std::vector<torch::Tensor> whole_split_;  // the whole model's parameters that were split
  std::vector<size_t> whole_split_nbytes_;  // their storage sizes when held
  bool whole_held_ = true;                  // whole_split_ have memory
};

}  // namespace ddpx::parallel
