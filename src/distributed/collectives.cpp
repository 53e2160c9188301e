// Blocking collective helpers (see collectives.h).
#include "distributed/collectives.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>

#include "core/error.h"
#include "core/log.h"
#include "distributed/c10d/traced_backend.h"
#include "distributed/peer_memory.h"

namespace ddpx::dist {

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) {
  try {
    work->wait();
  } catch (const std::exception& e) {
    std::string message = e.what();
    message = message.substr(0, message.find('\n'));
    if (auto* traced = dynamic_cast<TracedWork*>(work.get())) {
      std::string verdict;
      try {
        verdict = explain_failure(const_cast<trace::CollectiveTrace&>(traced->trace()));
      } catch (const std::exception& inner) {
        verdict = std::string("no collective record: ") + inner.what();
      }
      fail(ErrorKind::kDist, "{} (seq {}) failed: {}; {}", what, traced->seq(), message, verdict);
    }
    fail(ErrorKind::kDist,
         "{} failed: {}; a rank may have died, timed out, or run a different model or step", what,
         message);
  }
}

void all_reduce_sum(c10d::ProcessGroup& group, torch::Tensor& tensor, const std::string& what) {
  std::vector<torch::Tensor> tensors{tensor};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::SUM;
  wait_work(group.allreduce(tensors, options), what);
}

void barrier(c10d::ProcessGroup& group) {
  // As ProcessGroup::barrier() does, with a tensor of this call's own.
  const bool cuda = group.getBackendType() == c10d::ProcessGroup::BackendType::NCCL;
  at::Tensor tensor = at::empty({1}, at::TensorOptions()
                                         .device(cuda ? at::DeviceType::CUDA : at::DeviceType::CPU)
                                         .dtype(at::kByte));
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("c10d::barrier", "")
                       .typed<c10::intrusive_ptr<c10d::Work>(
                           at::Tensor, const c10::intrusive_ptr<c10d::ProcessGroup>&,
                           const std::vector<int64_t>&, bool, int64_t)>();
  const c10d::BarrierOptions options;
  wait_work(
      op.call(tensor, c10::intrusive_ptr<c10d::ProcessGroup>::unsafe_reclaim_from_nonowning(&group),
              options.device_ids, options.asyncOp, options.timeout.count()),
      "barrier");
}

void broadcast_coalesced(c10d::ProcessGroup& group, const std::vector<torch::Tensor>& tensors,
                         int root, int64_t cap_bytes) {
  torch::NoGradGuard no_grad;
  // Group by dtype, keeping the order, then cut each group into chunks of at most cap_bytes.
  std::map<int, std::vector<torch::Tensor>> by_dtype;
  for (const auto& t : tensors) {
    if (t.numel() > 0) by_dtype[static_cast<int>(t.scalar_type())].push_back(t);
  }
  for (auto& [dtype, group_tensors] : by_dtype) {
    size_t begin = 0;
    while (begin < group_tensors.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      std::vector<torch::Tensor> flat_parts;
      while (end < group_tensors.size() && (end == begin || bytes < cap_bytes)) {
        bytes += group_tensors[end].numel() * group_tensors[end].element_size();
        flat_parts.push_back(group_tensors[end].detach().reshape({-1}));
        ++end;
      }
      std::vector<torch::Tensor> flat{torch::cat(flat_parts)};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      wait_work(group.broadcast(flat, options), "broadcast from rank " + std::to_string(root));
      int64_t offset = 0;
      for (size_t i = begin; i < end; ++i) {
        auto& t = group_tensors[i];
        t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view(t.sizes()));
        offset += t.numel();
      }
      begin = end;
    }
  }
}

std::vector<torch::Tensor> all_gather(c10d::ProcessGroup& group, const torch::Tensor& tensor) {
  std::vector<std::vector<torch::Tensor>> outputs(1);
  for (int r = 0; r < group.getSize(); ++r) outputs[0].push_back(torch::empty_like(tensor));
  std::vector<torch::Tensor> inputs{tensor.contiguous()};
  wait_work(group.allgather(outputs, inputs), "all-gather");
  return outputs[0];
}

c10::intrusive_ptr<c10d::Work> submit_steps(c10d::ProcessGroup& group, PeerMemory& memory,
                                            const char* name,
                                            const std::vector<at::Tensor>& tensors,
                                            std::function<void(PeerSteps&)> op) {
  auto start = [&] { return memory.submit(std::move(op)); };
  auto* traced = dynamic_cast<TracedBackend*>(group.getBackend(c10::DeviceType::CPU).get());
  return traced == nullptr ? start() : traced->record(name, tensors, start);
}

}  // namespace ddpx::dist
