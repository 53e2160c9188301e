// The pipeline plan's transfers between stages (see pipeline_plan.h): the boundaries' shapes,
// agreed once, then activations forward and their gradients back, by c10d send/recv on the links
// between adjacent ranks (pipeline_links.h), in the order of the schedule's actions.
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "core/timer.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "parallel/pipeline/pipeline_plan.h"

namespace ddpx::parallel {

namespace {

c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::VirtualGuardImpl(device.type()).getStream(device);
}

constexpr int kShapeTag = (1 << 24) + 16;  // the boundaries' table: above PipelinePlan's results
constexpr int64_t kMaxDims = 8;            // of a boundary, less the batch dimension

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
  // On the GPU where the job has NCCL, else through host memory (Gloo): as send() sends it.
  const bool on_device = links_->on_device() && device.is_cuda();
  auto options = torch::TensorOptions().dtype(boundary.dtype);
  std::vector<torch::Tensor> buffer{
      torch::empty(shape, on_device ? options.device(device) : options)};
  // NCCL's wait() only makes this rank's stream wait: the stream's idle time is the span
  // between an event before the wait and one after it (device_idle()).
  std::optional<c10::Event> reached;
  if (on_device) {
    reached.emplace(device.type(), c10::EventFlag::BACKEND_DEFAULT);
    reached->record(current_stream(device));
  }
  Stopwatch watch;
  dist::wait_work(links_->recv(buffer, from_stage % options_.stages, forward),
                  fmt::format("pipeline stage {}'s {} of micro-batch {} from stage {} (rank {})",
                              to_stage, forward ? "activations" : "gradients", microbatch,
                              from_stage, rank_of(from_stage)));
  stats_.wait_seconds += watch.seconds();
  if (!on_device) return buffer[0].to(device);
  c10::Event resumed(device.type(), c10::EventFlag::BACKEND_DEFAULT);
  resumed.record(current_stream(device));
  device_waits_.emplace_back(std::move(*reached), std::move(resumed));
  return buffer[0];
}

double PipelinePlan::device_idle() {
  double seconds = 0;
  for (auto& [reached, resumed] : device_waits_) {
    resumed.synchronize();
    seconds += reached.elapsedTime(resumed) / 1e3;  // milliseconds
  }
  device_waits_.clear();
  return seconds;
}

void PipelinePlan::send(const torch::Tensor& t, int to_stage, bool forward) {
  // Each link's transfers match by order, so a send needs no tag: the rank at the other end
  // receives in the same order (pipeline_links.h). A send never waits for its receive here:
  // Gloo's return at once, NCCL's run on the link's own stream; finish_sends() waits for them.
  torch::Tensor data = t.detach();
  data =
      links_->on_device() && data.is_cuda() ? data.contiguous() : data.to(torch::kCPU).contiguous();
  std::vector<torch::Tensor> buffer{data};
  // Finished sends give their tensors back now rather than at the step's end: NCCL's say so
  // once their stream has run them (Gloo's only when waited for, in finish_sends()).
  auto finished = std::remove_if(sends_.begin(), sends_.end(), [](auto& sent) {
    if (!sent.first->isCompleted()) return false;
    dist::wait_work(sent.first, "a pipeline send");  // at once; throws its error, if any
    return true;
  });
  sends_.erase(finished, sends_.end());
  sends_.emplace_back(links_->send(buffer, to_stage % options_.stages, forward), buffer[0]);
}

torch::Tensor PipelinePlan::predict(const torch::Tensor& output) const {
  return options_.predict ? options_.predict(output) : output.argmax(-1);
}

torch::Tensor PipelinePlan::output_to_first_rank(const torch::Tensor& output, int64_t rows,
                                                 const torch::Device& device, bool predictions) {
  const int stages = static_cast<int>(table_.size()), me = context_.rank();
  const int last_rank = rank_of(stages - 1), first_rank = rank_of(0);
  const char* what = predictions ? "predictions" : "logits";
  if (me == last_rank) {
    if (last_rank == first_rank) return output;
    std::vector<torch::Tensor> sent{output.to(torch::kCPU).contiguous()};
    Stopwatch watch;  // until the first rank takes them, as a receive waits
    dist::wait_work(group_->send(sent, first_rank, kResultTag + 1),
                    fmt::format("sending the pipeline's {}", what));
    stats_.wait_seconds += watch.seconds();
    return {};
  }
  if (me != first_rank) return {};
  const Boundary& last = boundaries_.back();
  std::vector<int64_t> shape{rows};
  shape.insert(shape.end(), last.shape.begin(), last.shape.end() - (predictions ? 1 : 0));
  const auto dtype = predictions ? torch::kLong : last.dtype;
  std::vector<torch::Tensor> in{torch::empty(shape, torch::TensorOptions().dtype(dtype))};
  Stopwatch watch;
  dist::wait_work(group_->recv(in, last_rank, kResultTag + 1),
                  fmt::format("receiving the pipeline's {}", what));
  stats_.wait_seconds += watch.seconds();
  return in[0].to(device);
}

torch::Tensor PipelinePlan::forward_eval(const torch::Tensor& input) {
  // The whole batch through the stages in order, one micro-batch, no gradients: evaluation
  // needs no schedule. Its transfers take the links in stage order, after training's have finished.
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
      send(x, s + 1, true);
      finish_sends();
    }
  }
  device_waits_.clear();  // evaluation has no bubble to report
  return output_to_first_rank(me == rank_of(stages - 1) ? x : torch::Tensor(), rows, input.device(),
                              /*predictions=*/false);
}

void PipelinePlan::finish_sends() {
  Stopwatch watch;
  for (auto& [work, tensor] : sends_) dist::wait_work(work, "a pipeline send");
  sends_.clear();
  stats_.wait_seconds += watch.seconds();
}

}  // namespace ddpx::parallel
