// The pipeline-parallel plan (see pipeline_plan.h).
#include "parallel/pipeline/pipeline_plan.h"

#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/peer_memory.h"
#include "distributed/sub_group.h"
#include "optim/fused_step.h"
#include "optim/learning_rate.h"
#include "parallel/pipeline/pipeline_links.h"
#include "parallel/placement.h"
#include "parallel/sharded/optimizer_state.h"
#include "parallel/storage.h"

namespace ddpx::parallel {
namespace {

// Rank 0's weights go out in chunks of this many bytes: a rank holds at most one chunk beside
// the model while they arrive.
constexpr int64_t kBroadcastChunk = int64_t{16} << 20;

std::vector<models::Layer> layers_of(const torch::nn::AnyModule& model, const std::string& name) {
  auto layers = models::layer_sequence(model);
  DDPX_CHECK(layers.has_value(), ErrorKind::kUsage,
             "--pipeline_parallel: {} is not a sequence of layers a pipeline can cut; the zoo's "
             "ResNets, VGG, ViT, MLP, MobileNets, EfficientNet, DenseNet, GPTs and BERT are "
             "(ddpx models), or pass a torch::nn::Sequential from C++",
             name);
  return std::move(*layers);
}

// A user's Sequential as an AnyModule (which cannot hold a Sequential: its forward is a
// template): the same children under the same names, so the same state_dict keys.
class SequentialModelImpl : public torch::nn::SequentialImpl {
 public:
  explicit SequentialModelImpl(const torch::nn::Sequential& children) {
    const auto names = children->named_children();
    for (size_t i = 0; i < children->size(); ++i) {
      push_back(names[i].key(), *(children->begin() + static_cast<std::ptrdiff_t>(i)));
    }
  }
  torch::Tensor forward(torch::Tensor x) { return SequentialImpl::forward<torch::Tensor>(x); }
};
TORCH_MODULE(SequentialModel);

int64_t count(const std::vector<torch::Tensor>& tensors) {
  int64_t n = 0;
  for (const auto& t : tensors) n += t.numel();
  return n;
}

}  // namespace

PipelinePlan::PipelinePlan(torch::nn::AnyModule model, dist::Context& context,
                           const OptimizerFactory& make_optimizer, PipelineOptions options)
    : PipelinePlan(model, layers_of(model, options.model_name), context, make_optimizer,
                   std::move(options)) {}

PipelinePlan::PipelinePlan(torch::nn::Sequential model, dist::Context& context,
                           const OptimizerFactory& make_optimizer, PipelineOptions options)
    : PipelinePlan(torch::nn::AnyModule(SequentialModel(model)), models::layer_sequence(model),
                   context, make_optimizer, std::move(options)) {}

PipelinePlan::PipelinePlan(torch::nn::AnyModule model, std::vector<models::Layer> layers,
                           dist::Context& context, const OptimizerFactory& make_optimizer,
                           PipelineOptions options)
    : model_(std::move(model)),
      layers_(std::move(layers)),
      context_(context),
      group_(context.process_group()),
      make_optimizer_(make_optimizer),
      options_(std::move(options)) {
  const int p = options_.stages, world = context_.world_size();
  const int v = options_.schedule == PipelineSchedule::kInterleaved ? options_.stages_per_rank : 1;
  // Every check before the first collective: a refused layout never hangs a rank.
  mesh_ = options_.mesh ? *options_.mesh : Mesh::build(MeshSizes{p}, world);
  DDPX_CHECK(mesh_.world_size() == world && mesh_.size(MeshDim::kPipeline) == p &&
                 mesh_.size(MeshDim::kTensor) == 1 && mesh_.size(MeshDim::kContext) == 1,
             ErrorKind::kInternal, "a pipeline of {} stages on {} ranks given the mesh {}", p,
             world, mesh_.describe());
  const std::string problem = schedule_problem(
      options_.schedule, PipelineShape{p, options_.microbatches, options_.stages_per_rank});
  DDPX_CHECK(problem.empty(), ErrorKind::kUsage, "--pipeline_schedule {}: {}",
             name(options_.schedule), problem);
  DDPX_CHECK(layers_.size() >= static_cast<size_t>(p * v), ErrorKind::kUsage,
             "{} has {} layers a pipeline can cut between, fewer than the {} stages asked for; "
             "lower --pipeline_parallel (or --stages_per_rank)",
             options_.model_name, layers_.size(), p * v);
  DDPX_CHECK(options_.bounds.empty() || options_.bounds.size() == static_cast<size_t>(p * v) + 1,
             ErrorKind::kUsage, "a pipeline of {} stages needs {} stage bounds, got {}", p * v,
             p * v + 1, options_.bounds.size());
  options_.stages_per_rank = v;
  pipeline_rank_ = mesh_.coordinate(MeshDim::kPipeline, context_.rank());
  replica_ = mesh_.data_rank(context_.rank());
  replica_count_ = mesh_.data_size();

  const std::vector<double> costs = layer_costs();  // rank 0's, before its weights are sent
  bounds_ =
      options_.bounds.empty() ? balance_stages(costs, p * v, options_.model_name) : options_.bounds;
  const bool timed = options_.balance == PipelineBalance::kTime && !options_.sample_shape.empty();
  for (int s = 0; s < p * v; ++s) {
    StageInfo info;
    info.stage = s;
    info.pipeline_rank = s % p;
    info.first_layer = bounds_[s];
    info.end_layer = bounds_[s + 1];
    DDPX_CHECK(info.first_layer < info.end_layer && info.end_layer <= layers_.size(),
               ErrorKind::kUsage, "pipeline stage {} has no layers (bounds {}..{})", s,
               info.first_layer, info.end_layer);
    info.first_name = layers_[info.first_layer].name;
    info.last_name = layers_[info.end_layer - 1].name;
    for (size_t l = info.first_layer; l < info.end_layer; ++l) {
      info.parameters += count(layers_[l].parameters);
      if (timed) info.cost_ms += costs[l] * 1e3;
    }
    table_.push_back(info);
  }
  for (int c = 0; c < v; ++c) my_stages_.push_back(c * p + pipeline_rank_);
  params_ = params_of(pipeline_rank_);
  std::set<const c10::TensorImpl*> mine;
  for (const auto& t : params_) mine.insert(t.unsafeGetTensorImpl());
  for (int stage : my_stages_) {
    for (size_t l = bounds_[stage]; l < bounds_[stage + 1]; ++l) {
      for (auto& t : layers_[l].buffers) {
        if (mine.insert(t.unsafeGetTensorImpl()).second) buffers_.push_back(t);
      }
    }
  }
  std::set<const c10::TensorImpl*> seen = mine;  // a tied parameter is listed twice: once here
  for (const auto& layer : layers_) {
    for (const auto* list : {&layer.parameters, &layer.buffers}) {
      for (const auto& t : *list) {
        if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) continue;
        others_.push_back(t);
        others_nbytes_.push_back(t.storage().nbytes());
      }
    }
  }
  find_tied();
  std::set<const c10::TensorImpl*> in_layers;
  for (const auto& layer : layers_) {
    for (const auto* list : {&layer.parameters, &layer.buffers})
      for (const auto& t : *list) in_layers.insert(t.unsafeGetTensorImpl());
  }
  const auto model_params = model_.ptr()->parameters();
  const auto model_buffers = model_.ptr()->buffers();
  covers_model_ = true;
  for (const auto* list : {&model_params, &model_buffers}) {
    for (const auto& t : *list)
      covers_model_ = covers_model_ && in_layers.count(t.unsafeGetTensorImpl()) > 0;
  }
  if (replica_count_ > 1) {
    // Recorded, as the links are: a hang in a replica's gradient sync gets the record's verdict.
    dist::SplitOptions split;
    split.recorded = true;
    replicas_ = dist::split_group(context_, mesh_.groups({MeshDim::kReplicate, MeshDim::kShard}),
                                  "pipeline_replicas", split);
  }
  build_tied_group();
  if (group_ && p > 1) links_ = std::make_unique<PipelineLinks>(context_, mesh_, v > 1);
  // The ranks start from rank 0's weights, as DDP's do: a stage at a time, each rank freeing a
  // stage it does not run as soon as it has it, so no rank holds a second copy of the model.
  if (group_) {
    std::set<const c10::TensorImpl*> sent;  // a tied parameter goes with its first stage
    for (size_t s = 0; s + 1 < bounds_.size(); ++s) {
      std::vector<torch::Tensor> state;
      for (size_t l = bounds_[s]; l < bounds_[s + 1]; ++l) {
        for (const auto* list : {&layers_[l].parameters, &layers_[l].buffers}) {
          for (const auto& t : *list)
            if (sent.insert(t.unsafeGetTensorImpl()).second) state.push_back(t);
        }
      }
      dist::broadcast_coalesced(*group_, state, 0, kBroadcastChunk);
      for (const auto& t : state) {
        if (!mine.count(t.unsafeGetTensorImpl())) free_storage(t);
      }
    }
  }
  if (options_.device) {  // only this rank's stages take device memory
    std::vector<torch::Tensor> mine_list = params_;
    mine_list.insert(mine_list.end(), buffers_.begin(), buffers_.end());
    place_tensors(mine_list, *options_.device, options_.channels_last);
    for (const auto& t : others_) move_freed(t, *options_.device);
  }
  if (options_.shard != ShardMode::kNone && replicas_) {
    build_units();  // and their reducers
  } else if (replicas_) {
    build_reducers();
  }
  if (!params_.empty()) optimizer_ = make_optimizer_(sharded() ? shards_ : params_);
  for (const auto& line : stage_table_lines()) log::out("{}", line);
  free_others();
}

PipelinePlan::~PipelinePlan() {
  // Sends still in flight after a failure: their buffers must outlive them.
  for (auto& [work, tensor] : sends_) {
    try {
      work->wait();
    } catch (const std::exception&) {
    }
  }
}

std::string PipelinePlan::describe() {
  std::string shard;
  if (options_.shard != ShardMode::kNone) {
    shard = sharded()
                ? fmt::format("; each stage sharded over its {} replicas (--shard {}, {}){}",
                              replica_count_, name(options_.shard), zero_stage(options_.shard),
                              gathers_in_place_ ? fmt::format(", all-gathered straight from {}",
                                                              replicas_->peer_memory()->where())
                                                : "")
                : fmt::format("; --shard {}: one replica a stage, nothing to split",
                              name(options_.shard));
  } else if (!syncs_.empty()) {
    size_t buckets = 0;
    for (const auto& sync : syncs_) buckets += sync ? sync->launches() : 0;
    shard = fmt::format(
        "; the replicas average each stage's gradients in buckets launched during its last "
        "micro-batch's backward ({} bucket{} on rank {})",
        buckets, buckets == 1 ? "" : "s", context_.rank());
  }
  return fmt::format(
      "optimizer step: {}, on this rank's stages{} | plan: pipeline parallel: "
      "{} stages x {} data-parallel replica{} ({}, {} micro-batches{}; BatchNorm statistics per "
      "micro-batch{}{})",
      // step() takes fused_step() (a rank whose stages hold no parameters has no optimizer).
      optimizer_
          ? optim::fused_step_name(*optimizer_, !params_.empty() && !params_[0].device().is_cpu())
          : "none",
      sharded() ? "' shards" : "", table_.size(), replica_count_, replica_count_ == 1 ? "" : "s",
      name(options_.schedule), options_.microbatches,
      options_.stages_per_rank > 1 ? fmt::format(", {} stages a rank", options_.stages_per_rank)
                                   : "",
      !links_               ? ""
      : links_->on_device() ? "; stage boundaries by NCCL send/recv, on the GPU"
                            : "; stage boundaries by Gloo send/recv",
      shard);
}

std::string PipelinePlan::epoch_summary() {
  // One row a rank: its idle share in tenths of a percent and its most activations held.
  const int world = context_.world_size();
  torch::Tensor rows = torch::zeros({world, 3}, torch::kInt64);
  rows[context_.rank()][0] = static_cast<int64_t>(std::llround(epoch_.idle_share() * 1000));
  rows[context_.rank()][1] = epoch_.max_activations;
  const double sync_share = epoch_.seconds > 0 ? epoch_.sync_wait_seconds / epoch_.seconds : 0;
  rows[context_.rank()][2] = static_cast<int64_t>(std::llround(sync_share * 1000));
  context_.all_reduce_sum(rows);
  epoch_ = {};
  std::string idle, held, sync;
  for (int r = 0; r < world; ++r) {
    const int label = mesh_.job_group(r, MeshDim::kTensor).front();  // its tensor group's first
    idle += fmt::format("{}{} {:.1f}%", r ? " | " : "", label, rows[r][0].item<int64_t>() / 10.0);
    held += fmt::format("{}{} {}", r ? " | " : "", label, rows[r][1].item<int64_t>());
    sync += fmt::format("{}{} {:.1f}%", r ? " | " : "", label, rows[r][2].item<int64_t>() / 10.0);
  }
  return fmt::format(
      "pipeline bubble (idle share of each rank's forward and backward) by rank: {}; micro-batch "
      "activations held at most: {}{}",
      idle, held,
      syncs_.empty() ? ""
                     : fmt::format("; replicas' gradient averaging waited for after the "
                                   "schedule (share of forward and backward): {}",
                                   sync));
}

int PipelinePlan::rank_of(int stage) const {
  return mesh_.rank_with(context_.rank(), MeshDim::kPipeline, stage % options_.stages);
}

torch::Tensor PipelinePlan::run_stage(int stage, torch::Tensor x) {
  for (size_t l = bounds_[stage]; l < bounds_[stage + 1]; ++l) {
    const models::Layer& layer = layers_[l];
    x = models::checkpoints_layer(options_.checkpointing, l, layers_.size())
            ? models::checkpoint(layer.forward, x, layer.buffers)
            : layer.forward(x);
  }
  return x;
}

MicroBatchResult PipelinePlan::forward_backward(const MicroBatch& batch, bool sync) {
  if (optimizer_) optim::apply_learning_rate(*optimizer_, batch.learning_rate);
  Stopwatch total;
  stats_ = {};
  if (others_held_) free_others();
  if (sharded()) gather_units(/*full_precision=*/false);  // after a step, or freed (full)
  if (boundaries_.empty()) probe_boundaries(batch);
  const int p = options_.stages, stages = static_cast<int>(table_.size());
  const int64_t rows = batch.input.size(0);
  int m = static_cast<int>(std::min<int64_t>(options_.microbatches, rows));
  if (options_.schedule == PipelineSchedule::kInterleaved) m -= m % p;
  DDPX_CHECK(m >= 1, ErrorKind::kData,
             "a batch of {} samples cannot make {} micro-batches (interleaved: a multiple of {}); "
             "raise --batch_size",
             rows, options_.microbatches, p);
  const std::vector<torch::Tensor> inputs = batch.input.tensor_split(m);
  const std::vector<torch::Tensor> targets = batch.target.tensor_split(m);
  const torch::Device device = batch.input.device();

  std::map<std::pair<int, int>, InFlight> in_flight;  // (micro-batch, stage)
  // The last stage's predictions, a micro-batch each: made as each forward ends, so that no
  // micro-batch's output (a language model's B x T x V logits) outlives its loss's backward.
  std::vector<torch::Tensor> predictions(static_cast<size_t>(m));
  torch::Tensor loss_sum;
  PipelineShape shape{p, m, options_.stages_per_rank};
  const std::vector<PipelineAction> actions =
      schedule_actions(options_.schedule, shape, pipeline_rank_);
  // Whole replicas: each stage's last backward launches its gradient buckets (the others
  // accumulate into them). Sharded replicas launch their stage's reduce-scatter after the
  // schedule, in finish(): its input, the stage's whole gradients packed, then never lies beside
  // the backward's activations (the peak `ddpx plan` counts), and a tied parameter's copies are
  // summed whole before it.
  std::vector<size_t> last_backward(my_stages_.size(), actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!actions[i].forward) last_backward[static_cast<size_t>(actions[i].chunk)] = i;
  }
  const bool arms = sync && !sharded();
  for (auto& replica_sync : syncs_) {
    if (replica_sync) replica_sync->begin_iteration(sync);
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    const PipelineAction& a = actions[i];
    const int stage = a.chunk * p + pipeline_rank_;
    const bool last = stage == stages - 1;
    const int64_t n = inputs[a.microbatch].size(0);
    if (a.forward) {
      InFlight f;
      if (stage == 0) {
        f.input = inputs[a.microbatch];
      } else {
        f.input = receive(stage - 1, stage, a.microbatch, true, boundaries_[stage - 1], n, device);
        if (f.input.is_floating_point()) f.input.requires_grad_(true);
      }
      auto forward = [&] {
        torch::Tensor y;
        try {
          y = run_stage(stage, f.input);
        } catch (const c10::Error& e) {
          // BatchNorm in training on one value a channel: a micro-batch too small for the model.
          if (std::string(e.what()).find("more than 1 value per channel") == std::string::npos)
            throw;
          throw Error(ErrorKind::kUsage,
                      fmt::format("pipeline stage {}: a micro-batch of {} sample(s) leaves "
                                  "BatchNorm one value a channel; give fewer --microbatches ({}) "
                                  "or a larger --batch_size",
                                  stage, n, options_.microbatches));
        }
        if (!last) {
          f.output = y;
          return;
        }
        // The batch's mean loss is the micro-batches' means weighted by their share of rows.
        torch::Tensor loss = batch.loss(y, targets[a.microbatch]) * (static_cast<double>(n) / rows);
        f.output = batch.backward_root ? batch.backward_root(loss) : loss;
        torch::Tensor detached = loss.detach().to(torch::kFloat);
        loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
        predictions[a.microbatch] = predict(y.detach());
      };
      if (batch.in_forward_context) {
        batch.in_forward_context(forward);
      } else {
        forward();
      }
      if (!last) send(f.output, stage + 1, true);
      in_flight[{a.microbatch, stage}] = std::move(f);
      stats_.max_activations = std::max(stats_.max_activations, static_cast<int>(in_flight.size()));
    } else {
      auto it = in_flight.find({a.microbatch, stage});
      DDPX_CHECK(it != in_flight.end(), ErrorKind::kInternal,
                 "pipeline schedule {}: backward of micro-batch {} on stage {} before its forward",
                 name(options_.schedule), a.microbatch, stage);
      InFlight f = std::move(it->second);
      in_flight.erase(it);
      auto backward = [&] {
        if (last) {
          f.output.backward();
        } else {
          torch::Tensor grad =
              receive(stage + 1, stage, a.microbatch, false, boundaries_[stage], n, device);
          torch::autograd::backward({f.output}, {grad});
        }
      };
      GradientSync* replica_sync = syncs_.empty() ? nullptr : syncs_[a.chunk].get();
      const bool arm = arms && replica_sync && i == last_backward[a.chunk];
      if (arm) replica_sync->arm_next_backward();
      if (batch.in_backward_context) {
        batch.in_backward_context(backward);
      } else {
        backward();
      }
      if (arm) {
        stats_.sync_buckets_in_backward += static_cast<int>(replica_sync->launched());
        stats_.sync_buckets += static_cast<int>(replica_sync->launches());
      }
      if (stage > 0) {
        torch::Tensor grad = f.input.grad();
        if (!grad.defined()) grad = torch::zeros_like(f.input);
        send(grad, stage - 1, false);
      }
    }
  }
  finish_sends();
  stats_.wait_seconds += device_idle();
  if (sync && sharded()) sum_tied_gradients();  // whole, before the replicas scatter them

  // The loss and logits go to the replica's first rank, which reports them.
  MicroBatchResult result;
  const int last_rank = rank_of(stages - 1), first_rank = rank_of(0);
  if (last_rank == first_rank) {
    result.loss = loss_sum;
  } else if (context_.rank() == last_rank) {
    std::vector<torch::Tensor> loss{loss_sum.reshape({1}).to(torch::kCPU).contiguous()};
    // Waits until the first rank, done with its last backward, takes it: the last stage's share
    // of the bubble (the pipeline's drain).
    Stopwatch watch;
    dist::wait_work(group_->send(loss, first_rank, kResultTag), "sending the pipeline's loss");
    stats_.wait_seconds += watch.seconds();
  } else if (context_.rank() == first_rank) {
    std::vector<torch::Tensor> loss{torch::empty({1})};
    Stopwatch watch;
    dist::wait_work(group_->recv(loss, last_rank, kResultTag), "receiving the pipeline's loss");
    stats_.wait_seconds += watch.seconds();
    result.loss = loss[0].reshape({}).to(device);
  }
  result.output = output_to_first_rank(
      context_.rank() == last_rank ? torch::cat(predictions) : torch::Tensor(), rows, device,
      /*predictions=*/true);
  // The replicas' averages, last: their buckets and units ran on while the loss and logits
  // moved.
  if (sync) finish_replica_sync();
  if (sync && !sharded()) sum_tied_gradients();  // the copies' averaged gradients
  stats_.seconds = total.seconds();
  epoch_.seconds += stats_.seconds;
  epoch_.wait_seconds += stats_.wait_seconds;
  epoch_.sync_wait_seconds += stats_.sync_wait_seconds;
  epoch_.max_activations = std::max(epoch_.max_activations, stats_.max_activations);
  return result;
}

}  // namespace ddpx::parallel
