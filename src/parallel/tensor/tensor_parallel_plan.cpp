// The tensor-parallel plan (see tensor_parallel_plan.h).
#include "parallel/tensor/tensor_parallel_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/sub_group.h"
#include "optim/clip_grad.h"
#include "parallel/sharded/sharded_plan.h"
#include "parallel/tensor/parallelize.h"

namespace ddpx::parallel {

TensorParallelPlan::TensorParallelPlan(torch::nn::AnyModule model, dist::Context& context,
                                       const OptimizerFactory& make_optimizer,
                                       TensorParallelOptions options)
    : whole_(std::move(model)),
      context_(context),
      make_optimizer_(make_optimizer),
      options_(std::move(options)) {
  const int t = options_.size, world = context.world_size();
  const int p = options_.pipeline ? options_.pipeline->stages : 1;
  mesh_ = options_.mesh
              ? *options_.mesh
              : Mesh::build(MeshSizes{p, t, 1, options_.shard != ShardMode::kNone}, world);
  DDPX_CHECK(mesh_.world_size() == world && mesh_.size(MeshDim::kTensor) == t &&
                 mesh_.size(MeshDim::kPipeline) == p && mesh_.size(MeshDim::kContext) == 1,
             ErrorKind::kInternal,
             "tensor parallelism of {} x {} pipeline stages on {} ranks "
             "given the mesh {}",
             t, p, world, mesh_.describe());
  tensor::check_splittable(whole_, t, options_.model_name, options_.sequence_parallel,
                           options_.checkpointing);
  // Every tensor rank cuts its pieces from the same weights: rank 0's.
  if (context.distributed()) {
    std::vector<torch::Tensor> state = whole_.ptr()->parameters();
    for (const auto& b : whole_.ptr()->buffers()) state.push_back(b);
    // In 16 MiB chunks: a rank holds at most one beside the model while they arrive.
    dist::broadcast_coalesced(*context.process_group(), state, 0, int64_t{16} << 20);
  }
  replica_ = mesh_.data_rank(context.rank());
  // Tensor groups: one a data-parallel replica's stage. Their replicas: the ranks of one tensor
  // rank (a pipeline's, with stages).
  const auto tensor_groups = mesh_.groups({MeshDim::kTensor});
  if (tensor_groups.size() == 1) {  // the job's own group: its collectives stay in the record
    tensor_group_ = std::shared_ptr<dist::Context>(std::shared_ptr<dist::Context>(), &context);
  } else {
    // Recorded, as the pipeline's links are: a hang in a split layer's collective gets the
    // record's verdict, and a step's tensor-parallel bytes are told from the rest by the name.
    dist::SplitOptions split;
    split.recorded = true;
    tensor_group_ = dist::split_group(context, tensor_groups, "tensor", split);
  }
  {
    // Recorded too: a hang in the replicas' gradient sync gets the record's verdict.
    dist::SplitOptions split;
    split.recorded = true;
    replicas_ = dist::split_group(
        context, mesh_.groups({MeshDim::kReplicate, MeshDim::kShard, MeshDim::kPipeline}),
        "tensor_replicas", split);
  }
  auto split = tensor::split_model(
      whole_, *tensor_group_, options_.sequence_parallel, options_.checkpointing,
      options_.pipeline ? options_.pipeline->sample_shape : std::vector<int64_t>(),
      options_.vocab_divisible_by);
  DDPX_CHECK(p == 1 || !split.layers.empty(), ErrorKind::kUsage,
             "--pipeline_parallel {} with --tensor_parallel {}: {} has no pipeline of split "
             "stages yet; drop one of the two",
             p, t, options_.model_name);
  split_ = split.module;
  specs_ = std::move(split.specs);
  split_loss_ = std::move(split.loss);
  split_predict_ = std::move(split.predict);
  split_gather_ = std::move(split.gather);
  auto named = split_.ptr()->named_parameters();
  for (const auto& name : split.partial_grads) {
    partial_grads_.push_back(named[name]);
    for (size_t i = 0; i < named.size(); ++i) {
      if (named[i].key() == name) partial_index_.push_back(i);
    }
  }
  summary_ = std::move(split.summary);
  // The whole model's split parameters go before the inner plan is built: its start-up (the
  // replicas' broadcast, a sharded plan's flat shards) then sits beside the pieces only.
  auto whole = whole_.ptr()->named_parameters();
  for (const auto& [name, spec] : specs_) {
    whole_split_.push_back(whole[name]);
    whole_split_nbytes_.push_back(whole[name].storage().nbytes());
  }
  free_whole();
  if (p > 1) {
    // The pipeline over the ranks of this tensor rank (the mesh's slice at it: the job's ranks
    // t, t + T, ...), running this rank's pieces; the T ranks of a stage are neighbours.
    PipelineOptions pipeline = *options_.pipeline;
    pipeline.sample_shape.clear();  // balanced by parameters: see TensorParallelOptions
    pipeline.checkpointing = {};    // the split layers checkpoint themselves
    pipeline.mesh =
        mesh_.slice(MeshDim::kTensor, mesh_.coordinate(MeshDim::kTensor, context.rank()));
    pipeline.model_name = options_.model_name;
    pipeline.shard = options_.shard;  // the replicas of each stage's pieces shard them
    // The last stage's tensor ranks find the predictions from their slices of the logits, and
    // only those ids travel to the first stage.
    if (split_predict_) pipeline.predict = split_predict_;
    auto plan = std::make_unique<PipelinePlan>(split_, std::move(split.layers), *replicas_,
                                               make_optimizer_, pipeline);
    DDPX_CHECK(plan->optimizer() != nullptr, ErrorKind::kInternal,
               "tensor parallel: pipeline stage {} has no parameters", plan->pipeline_rank());
    inner_optimizer_ = plan->optimizer();
    pipeline_ = plan.get();
    inner_ = std::move(plan);
  } else if (options_.shard != ShardMode::kNone && replicas_->distributed()) {
    ShardedOptions sharded;
    sharded.mode = options_.shard;
    sharded.broadcast_buffers = options_.replicas.ddp.broadcast_buffers;
    sharded.model_name = options_.model_name;
    auto plan = std::make_unique<ShardedPlan>(split_, *replicas_, make_optimizer_, sharded);
    inner_optimizer_ = &plan->optimizer();
    sharded_ = plan.get();
    inner_ = std::move(plan);
  } else {
    DataParallelOptions dp = options_.replicas;
    dp.step.inside_backward = false;  // clip_grad_norm() reads the gradients across tensor ranks
    dp.step.split = false;
    dp.model_name = options_.model_name;
    auto plan = std::make_unique<DataParallelPlan>(split_, *replicas_, make_optimizer_, dp);
    inner_optimizer_ = &plan->optimizer();
    inner_ = std::move(plan);
  }
}

TensorParallelPlan::~TensorParallelPlan() = default;

int TensorParallelPlan::tensor_rank() const { return tensor_group_->rank(); }

std::string TensorParallelPlan::mesh_line() const {
  const int t = options_.size, data = mesh_.data_size();
  const int p = pipeline_ != nullptr ? options_.pipeline->stages : 1;
  // One row a data-parallel replica: its tensor groups, a stage each.
  std::vector<std::vector<std::string>> stages(static_cast<size_t>(data));
  for (const auto& group : mesh_.groups({MeshDim::kTensor})) {
    const int replica = mesh_.data_rank(group.front());
    const std::string ranks = fmt::format("{}", fmt::join(group, " "));
    stages[static_cast<size_t>(replica)].push_back(
        p == 1 ? "ranks " + ranks
               : fmt::format("stage {} ranks {}",
                             mesh_.coordinate(MeshDim::kPipeline, group.front()), ranks));
  }
  std::vector<std::string> rows;
  for (int r = 0; r < data; ++r) {
    rows.push_back(
        fmt::format("replica {}: {}", r, fmt::join(stages[static_cast<size_t>(r)], ", ")));
  }
  if (p == 1) {
    return fmt::format("mesh (data x tensor) {} x {}: {}", data, t, fmt::join(rows, " | "));
  }
  return fmt::format("mesh (data x pipeline x tensor) {} x {} x {}: {}", data, p, t,
                     fmt::join(rows, " | "));
}

std::string TensorParallelPlan::describe() {
  if (pipeline_ != nullptr) {
    return fmt::format("tensor parallel: {} ranks a layer ({}); {}; {}", options_.size, summary_,
                       mesh_line(), inner_->describe());
  }
  const int replicas = mesh_.data_size();
  const std::string replicated =
      replicas == 1 ? ""
      : sharded_ != nullptr
          ? fmt::format("; each piece sharded over its replicas (--shard {})", name(options_.shard))
          : "; each piece averaged over its replicas by DDP";
  return fmt::format("tensor parallel: {} ranks a layer x {} data-parallel replica{} ({}); {}{}",
                     options_.size, replicas, replicas == 1 ? "" : "s", summary_, mesh_line(),
                     replicated);
}

MicroBatchResult TensorParallelPlan::forward_backward(const MicroBatch& batch, bool sync) {
  if (whole_held_) free_whole();
  MicroBatchResult result;
  if (split_loss_) {
    // The loss from this rank's slice of the logits, and the predictions for the metrics.
    MicroBatch local = batch;
    local.loss = [this](const torch::Tensor& output, const torch::Tensor& labels) {
      return split_loss_(output, labels, options_.label_smoothing);
    };
    result = inner_->forward_backward(local, sync);
    // A pipeline's are the predictions already (PipelineOptions::predict, on its last stage).
    if (result.output.defined() && pipeline_ == nullptr)
      result.output = split_predict_(result.output);
  } else {
    result = inner_->forward_backward(batch, sync);
  }
  if (sync && !partial_grads_.empty() && tensor_group_->distributed()) {
    // Each rank's share of the tokens gave its share of these gradients: one all-reduce of all.
    // Sharded over the replicas, what the step reads is each one's shard of the gradient, already
    // averaged over them (the same slice of the same parameter on every tensor rank of a
    // replica): summing the shards over the tensor group sums the whole.
    // A pipeline's rank holds its stages' (the same stages on every rank of its tensor group).
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> grads;
    const std::vector<torch::Tensor> shards =
        sharded_ != nullptr ? inner_->parameters() : std::vector<torch::Tensor>();
    std::map<const c10::TensorImpl*, torch::Tensor> stage_shards;  // a sharded pipeline's
    if (pipeline_ != nullptr) {
      for (const auto& unit : pipeline_->units()) {
        for (size_t i = 0; i < unit.params().size(); ++i)
          stage_shards[unit.params()[i].unsafeGetTensorImpl()] = unit.shards()[i];
      }
    }
    for (size_t i = 0; i < partial_grads_.size(); ++i) {
      auto staged = stage_shards.find(partial_grads_[i].unsafeGetTensorImpl());
      const torch::Tensor& g = sharded_ != nullptr            ? shards.at(partial_index_[i]).grad()
                               : staged != stage_shards.end() ? staged->second.grad()
                                                              : partial_grads_[i].grad();
      if (g.defined() && g.numel() > 0) grads.push_back(g.view({-1}));
    }
    if (grads.empty()) return result;  // a stage without such parameters (the head alone)
    torch::Tensor flat = torch::cat(grads);
    tensor_group_->all_reduce_sum(flat);
    int64_t offset = 0;
    for (auto& g : grads) {
      g.copy_(flat.narrow(0, offset, g.numel()));
      offset += g.numel();
    }
  }
  return result;
}

torch::Tensor TensorParallelPlan::clip_grad_norm(double max_norm) {
  if (sharded_ != nullptr || (pipeline_ != nullptr && !pipeline_->units().empty()))
    return clip_sharded(max_norm);
  // Every rank holds its pieces and the unsplit layers, the latter on each of the T ranks of its
  // tensor group (1/T of their squares a rank). Without a pipeline the tensor group holds the
  // whole model; with one, the job holds it once a replica, and the replicas hold the same
  // averaged gradients.
  std::vector<optim::HeldGradient> grads;
  for (const auto& p : split_.ptr()->named_parameters()) {
    const auto& g = p.value().grad();
    if (!g.defined()) continue;
    // A tied piece (a GPT's embedding rows on the first and the last stage) counts once over
    // its pipeline copies.
    const int copies = pipeline_ != nullptr ? pipeline_->copies(p.value()) : 1;
    grads.push_back({g, (specs_.count(p.key()) ? 1 : options_.size) * copies});
  }
  optim::NormSum sum;
  if (pipeline_ != nullptr) {
    sum.all_reduce_sum = [this](torch::Tensor& t) { context_.all_reduce_sum(t); };
    sum.replicas = mesh_.data_size();
  } else {
    sum.all_reduce_sum = [this](torch::Tensor& t) { tensor_group_->all_reduce_sum(t); };
  }
  return optim::clip_by_global_norm(grads, sum, max_norm);
}

torch::Tensor TensorParallelPlan::clip_sharded(double max_norm) {
  // Each replica holds its part of each piece's (and each unsplit layer's) averaged gradient:
  // the sharded plan's shards, in the split model's parameter order, or a sharded pipeline's
  // stage units'. The job's sum of the shards' squares counts every piece once and every unsplit
  // layer T times.
  const auto named = split_.ptr()->named_parameters();
  // (shard, ranks of a replica holding it: T for an unsplit layer's, times a tied piece's
  // pipeline copies)
  std::vector<std::pair<torch::Tensor, int>> shards;
  if (sharded_ != nullptr) {
    const auto all = inner_->parameters();
    DDPX_CHECK(all.size() == named.size(), ErrorKind::kInternal,
               "tensor parallel: {} shards for {} parameters", all.size(), named.size());
    for (size_t i = 0; i < all.size(); ++i)
      shards.emplace_back(all[i], specs_.count(named[i].key()) > 0 ? 1 : options_.size);
  } else {
    std::map<const c10::TensorImpl*, bool> piece;
    for (const auto& p : named) piece[p.value().unsafeGetTensorImpl()] = specs_.count(p.key()) > 0;
    for (const auto& unit : pipeline_->units()) {
      for (size_t i = 0; i < unit.params().size(); ++i) {
        const torch::Tensor& param = unit.params()[i];
        shards.emplace_back(
            unit.shards()[i],
            (piece.at(param.unsafeGetTensorImpl()) ? 1 : options_.size) * pipeline_->copies(param));
      }
    }
  }
  std::vector<optim::HeldGradient> grads;
  for (const auto& [shard, held_by] : shards) {
    const torch::Tensor& g = shard.grad();
    if (g.defined()) grads.push_back({g, held_by});
  }
  optim::NormSum sum;
  sum.all_reduce_sum = [this](torch::Tensor& t) { context_.all_reduce_sum(t); };
  return optim::clip_by_global_norm(grads, sum, max_norm);
}

void TensorParallelPlan::step() {
  inner_->step();
  stale_ = true;
}

void TensorParallelPlan::zero_grad() { inner_->zero_grad(); }

std::vector<torch::Tensor> TensorParallelPlan::parameters() { return inner_->parameters(); }

void TensorParallelPlan::set_training(bool on) {
  whole_.ptr()->train(on);
  split_.ptr()->train(on);
  if (pipeline_ != nullptr) pipeline_->set_training(on);  // sharded stages: gathered for eval
}

Plan::Share TensorParallelPlan::eval_share(int /*rank*/, int /*world_size*/) {
  return {replica_, mesh_.data_size()};
}

torch::Tensor TensorParallelPlan::forward_eval(const torch::Tensor& input) {
  if (whole_held_) free_whole();
  if (sharded_ != nullptr) sharded_->module();  // ZeRO-3: every piece gathered for evaluation
  torch::NoGradGuard no_grad;
  // A pipeline's logits reach its replica's first stage, on each tensor rank.
  torch::Tensor logits =
      pipeline_ != nullptr ? pipeline_->forward_eval(input) : split_.forward(input);
  // A vocabulary-parallel output; a pipeline's logits on its first stage's tensor group only.
  if (split_gather_ && logits.defined()) logits = split_gather_(logits);
  return tensor_group_->rank() == 0 ? logits : torch::Tensor();
}

}  // namespace ddpx::parallel
