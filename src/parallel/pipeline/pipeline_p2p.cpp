// The pipeline plan's transfers between stages (see pipeline_plan.h): activations forward and
// their gradients back, by c10d send/recv with a tag per (micro-batch, stage, direction), through
// host memory.
#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/timer.h"
#include "distributed/collectives.h"
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::parallel {

namespace {
int tag_of(int microbatch, int stage, int stages, bool forward) {
  return (microbatch * stages + stage) * 2 + (forward ? 0 : 1);
}
}  // namespace

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
  // GPU tensors go through host memory, by Gloo, whose sends never block: NCCL's send waits for
  // its receive, and 1F1B's two ranks each send (activations one way, gradients the other)
  // before they receive on the same pair's stream, which can deadlock unless the pairs are
  // grouped (as torch.distributed.pipelining's batch_isend_irecv does). NCCL send/recv, grouped,
  // comes once it has run on GPUs.
  std::vector<torch::Tensor> buffer{t.detach().to(torch::kCPU).contiguous()};
  const int stages = static_cast<int>(table_.size());
  const int tag = tag_of(microbatch, forward ? from_stage : to_stage, stages, forward);
  sends_.emplace_back(group_->send(buffer, rank_of(to_stage), tag), buffer[0]);
}

void PipelinePlan::finish_sends() {
  Stopwatch watch;
  for (auto& [work, tensor] : sends_) dist::wait_work(work, "a pipeline send");
  sends_.clear();
  stats_.wait_seconds += watch.seconds();
}

}  // namespace ddpx::parallel
