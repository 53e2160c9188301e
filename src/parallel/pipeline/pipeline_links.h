// The links between a pipeline's ranks (pipeline_plan.h): for each edge from pipeline rank r to
// the next, r + 1 (and P-1 to 0 under interleaved, whose stages wrap around the ranks), one group
// of two ranks for the activations that flow along it and one for the gradients that flow back.
// A link carries one direction of one kind, and every transfer on it has the same tag, so its
// sends and receives match by their order, as NCCL's do: NCCL matches a pair's transfers by the
// order they are posted on the pair's stream, not by tag, and a send waits for its receive. On
// links of their own the schedules' transfers need no grouping: a rank's sends on a link follow
// its actions' order, and so do the receives at the other end, in the same order
// (schedule_transfers() in schedule.h, tested for every layout), and a send to one rank never
// queues behind a receive from another, or behind a transfer the other way.
//
// The same code runs on every backend: Gloo (CPU tensors, and CUDA ones through host memory
// where the job has no NCCL) and NCCL (CUDA tensors, which stay on the GPU). Gloo matches a
// tag's transfers in order too, so the CPU tests check the order NCCL relies on.
//
// Building the links is collective over the job (each link over its two ranks), in one order on
// every rank; with NCCL each link then sends one element, in that order, so every pair's NCCL
// communicator forms while no rank waits on another link (NCCL forms a pair's communicator at
// its first transfer, blocking until both ends arrive).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <utility>
#include <vector>

namespace c10d {
class ProcessGroup;
class Work;
}  // namespace c10d

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel {

class Mesh;

class PipelineLinks {
 public:
  // `context`: the pipeline's ranks, laid out by `mesh` (mesh.h: its pipeline dimension is P,
  // its ranks the context's); `ring`: the edge from P-1 back to 0 too (interleaved).
  PipelineLinks(const dist::Context& context, const Mesh& mesh, bool ring);
  ~PipelineLinks();

  // This rank's transfer to or from pipeline rank `peer` of its replica, the next rank around
  // the ring for activations sent (`forward`) and gradients received, the previous one for
  // activations received and gradients sent. Throws ddpx::Error(kInternal) where no link joins
  // them that way.
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int peer, bool forward);
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int peer, bool forward);
  // CUDA tensors stay on the GPU (the job has NCCL); else they go through host memory.
  bool on_device() const { return on_device_; }

 private:
  struct Link {  // edge e: from pipeline rank e to e + 1 (mod P), the way activations go
    std::shared_ptr<dist::Context> forward, backward;  // null where this rank is on neither end
  };
  // The group for a transfer between this rank and `peer` and the peer's rank in it.
  std::pair<c10d::ProcessGroup*, int> route(int peer, bool sending, bool forward) const;
  int stages_ = 1, me_ = 0;
  bool on_device_ = false;
  std::vector<Link> links_;
};

}  // namespace ddpx::parallel
