// The pipeline plan's transfers between stages (see pipeline_plan.h): the boundaries' shapes,
// agreed once, then activations forward and their gradients back, by c10d send/recv with a tag
// per (micro-batch, stage, direction), through host memory.
#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::parallel {

namespace {

constexpr int kShapeTag = (1 << 24) + 16;  // the boundaries' table: above PipelinePlan's results
constexpr int64_t kMaxDims = 8;            // of a boundary, less the batch dimension

int tag_of(int microbatch, int stage, int stages, bool forward) {
  return (microbatch * stages + stage) * 2 + (forward ? 0 : 1);
}

}  // namespace

void PipelinePlan::probe_boundaries(const MicroBatch& batch) {
  // Row s of the table: stage s's output as [dtype, dims, size 1, size 2, ...], less the batch
  // dimension. Each stage's rank runs its stage on one sample (zeros of the shape its
  // predecessor wrote, or the batch's first sample) and hands the table on; the last stage's
  // rank of replica 0 then gives every rank the whole table.
  torch::NoGradGuard no_grad;
  const int stages = static_cast<int>(table_.size()), me = context_.rank();
  torch::Tensor table = torch::zeros({stages, 2 + kMaxDims}, torch::kInt64);
  auto row = [&](int s) { return table.accessor<int64_t, 2>()[s]; };
  const bool training = model_.ptr()->is_training();
  model_.ptr()->eval();
  for (int s = 0; s < stages; ++s) {
    if (rank_of(s) != me) continue;
    if (s > 0 && rank_of(s - 1) != me) {
      std::vector<torch::Tensor> in{table};
      dist::wait_work(
          group_->recv(in, rank_of(s - 1), kShapeTag),
          fmt::format("pipeline stage {}'s input shape from rank {}", s, rank_of(s - 1)));
    }
    torch::Tensor x;
    if (s == 0) {
      x = batch.input.narrow(0, 0, 1);
    } else {
      auto r = row(s - 1);
      std::vector<int64_t> shape{1};
      for (int64_t d = 0; d < r[1]; ++d) shape.push_back(r[2 + d]);
      x = torch::zeros(shape, batch.input.options().dtype(static_cast<c10::ScalarType>(r[0])));
    }
    auto run = [&] { x = run_stage(s, x); };
    if (batch.in_forward_context) {
      batch.in_forward_context(run);
    } else {
      run();
    }
    DDPX_CHECK(x.dim() >= 1 && x.dim() - 1 <= kMaxDims, ErrorKind::kUsage,
               "pipeline stage {} ({} .. {}) outputs a tensor of {} dimensions; a stage boundary "
               "takes a batch dimension and at most {} more",
               s, table_[s].first_name, table_[s].last_name, x.dim(), kMaxDims);
    auto r = row(s);
    r[0] = static_cast<int64_t>(x.scalar_type());
    r[1] = x.dim() - 1;
    for (int64_t d = 1; d < x.dim(); ++d) r[1 + d] = x.size(d);
    if (s + 1 < stages && rank_of(s + 1) != me) {
      std::vector<torch::Tensor> out{table};
      dist::wait_work(
          group_->send(out, rank_of(s + 1), kShapeTag),
          fmt::format("pipeline stage {}'s output shape to rank {}", s, rank_of(s + 1)));
    }
  }
  if (training) model_.ptr()->train();
  if (group_) context_.broadcast(table, (stages - 1) % options_.stages);
  for (int s = 0; s < stages; ++s) {
    auto r = row(s);
    Boundary b;
    b.dtype = static_cast<c10::ScalarType>(r[0]);
    for (int64_t d = 0; d < r[1]; ++d) b.shape.push_back(r[2 + d]);
    boundaries_.push_back(std::move(b));
  }
}

torch::Tensor PipelinePlan::receive(int from_stage, int to_stage, int microbatch, bool forward,
                                    const Boundary& boundary, int64_t rows,
                                    const torch::Device& device) {
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), boundary.shape.begin(), boundary.shape.end());
  // Through host memory (Gloo): see send().
  std::vector<torch::Tensor> buffer{
      torch::empty(shape, torch::TensorOptions().dtype(boundary.dtype))};
  const int stages = static_cast<int>(table_.size());
  const int tag = tag_of(microbatch, forward ? from_stage : to_stage, stages, forward);
  Stopwatch watch;
  dist::wait_work(group_->recv(buffer, rank_of(from_stage), tag),
                  fmt::format("pipeline {} of micro-batch {} from stage {} (rank {})",
                              forward ? "activations" : "gradients", microbatch, from_stage,
                              rank_of(from_stage)));
  stats_.wait_seconds += watch.seconds();
  return buffer[0].to(device);
}

void PipelinePlan::send(const torch::Tensor& t, int from_stage, int to_stage, int microbatch,
                        bool forward) {
  // GPU tensors go through host memory, by Gloo, whose sends never block and whose tags pick the
  // matching receive. NCCL's send waits for its receive, and matches them by order on the pair's
  // stream, not by tag: 1F1B's two ranks each send (activations one way, gradients the other)
  // before they receive, which deadlocks unless each step's sends and receives are grouped (as
  // torch.distributed.pipelining's batch_isend_irecv does), and an interleaved pair carries two
  // stages each way, whose orders must agree on both ends. NCCL send/recv, grouped, comes once
  // it can run on two GPUs (docs/distributed.md, section 7).
  std::vector<torch::Tensor> buffer{t.detach().to(torch::kCPU).contiguous()};
  const int stages = static_cast<int>(table_.size());
  const int tag = tag_of(microbatch, forward ? from_stage : to_stage, stages, forward);
  sends_.emplace_back(group_->send(buffer, rank_of(to_stage), tag), buffer[0]);
}

torch::Tensor PipelinePlan::logits_to_first_rank(const torch::Tensor& logits, int64_t rows,
                                                 const torch::Device& device) {
  const int stages = static_cast<int>(table_.size()), me = context_.rank();
  const int last_rank = rank_of(stages - 1), first_rank = rank_of(0);
  if (last_rank == first_rank) return me == first_rank ? logits : torch::Tensor();
  if (me == last_rank) {
    std::vector<torch::Tensor> out{logits.to(torch::kCPU).contiguous()};
    Stopwatch watch;  // until the first rank takes them, as a receive waits
    dist::wait_work(group_->send(out, first_rank, kResultTag + 1), "sending the pipeline's logits");
    stats_.wait_seconds += watch.seconds();
    return {};
  }
  if (me != first_rank) return {};
  const Boundary& last = boundaries_.back();
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), last.shape.begin(), last.shape.end());
  std::vector<torch::Tensor> in{torch::empty(shape, torch::TensorOptions().dtype(last.dtype))};
  Stopwatch watch;
  dist::wait_work(group_->recv(in, last_rank, kResultTag + 1), "receiving the pipeline's logits");
  stats_.wait_seconds += watch.seconds();
  return in[0].to(device);
}

torch::Tensor PipelinePlan::forward_eval(const torch::Tensor& input) {
  // The whole batch through the stages in order, one micro-batch, no gradients: evaluation
  // needs no schedule. The tags are micro-batch 0's: no training transfer is in flight.
  torch::NoGradGuard no_grad;
  if (others_held_) free_others();
  if (boundaries_.empty()) {
    MicroBatch probe;
    probe.input = input;
    probe_boundaries(probe);
  }
  const int stages = static_cast<int>(table_.size()), me = context_.rank();
  const int64_t rows = input.size(0);
  torch::Tensor x;
  for (int s = 0; s < stages; ++s) {
    if (rank_of(s) != me) continue;
    if (s == 0) {
      x = input;
    } else if (rank_of(s - 1) != me) {
      x = receive(s - 1, s, 0, true, boundaries_[s - 1], rows, input.device());
    }
    for (size_t l = bounds_[s]; l < bounds_[s + 1]; ++l) x = layers_[l].forward(x);
    if (s + 1 < stages && rank_of(s + 1) != me) {
      send(x, s, s + 1, 0, true);
      finish_sends();
    }
  }
  return logits_to_first_rank(me == rank_of(stages - 1) ? x : torch::Tensor(), rows,
                              input.device());
}

void PipelinePlan::finish_sends() {
  Stopwatch watch;
  for (auto& [work, tensor] : sends_) dist::wait_work(work, "a pipeline send");
  sends_.clear();
  stats_.wait_seconds += watch.seconds();
}

}  // namespace ddpx::parallel
