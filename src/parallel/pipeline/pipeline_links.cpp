// The links between a pipeline's ranks (see pipeline_links.h).
#include "parallel/pipeline/pipeline_links.h"

#include <fmt/format.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "distributed/sub_group.h"
#include "parallel/mesh.h"

namespace ddpx::parallel {

namespace {

constexpr int kLinkTag = 0;  // every transfer of a link: they match by their order

// NCCL forms a pair's communicator at the pair's first transfer, each end blocking until the
// other arrives: one element along the link now, while every rank forms its links in one order.
void form_nccl_link(const dist::Context& link, bool forward) {
  // Rank 0 of a link is the edge's start: activations go 0 -> 1, gradients 1 -> 0.
  const int sender = forward ? 0 : 1;
  std::vector<at::Tensor> one{torch::zeros({1}, torch::TensorOptions().device(link.device()))};
  c10d::ProcessGroup& group = *link.process_group();
  dist::wait_work(link.rank() == sender ? group.send(one, 1 - sender, kLinkTag)
                                        : group.recv(one, sender, kLinkTag),
                  "forming a pipeline link's NCCL communicator");
}

}  // namespace

PipelineLinks::PipelineLinks(const dist::Context& context, const Mesh& mesh, bool ring)
    : stages_(mesh.size(MeshDim::kPipeline)),
      me_(mesh.coordinate(MeshDim::kPipeline, context.rank())) {
  const int world = context.world_size();
  const int stages = stages_;
  const int edges = stages < 2 ? 0 : ring ? stages : stages - 1;
  const bool nccl = context.built().nccl && context.device().is_cuda();
  on_device_ = nccl;
  for (int e = 0; e < edges; ++e) {
    const int next = (e + 1) % stages;
    Link link;
    for (const bool forward : {true, false}) {
      std::vector<std::vector<int>> groups;
      for (int r = 0; r < world; ++r) {
        const int at = mesh.coordinate(MeshDim::kPipeline, r);
        if (at == e) groups.push_back({r, mesh.rank_with(r, MeshDim::kPipeline, next)});
        if (at != e && at != next) groups.push_back({r});
      }
      dist::SplitOptions split;
      split.peer_memory = false;  // point-to-point transfers go to Gloo whatever the transport
      split.recorded = true;
      auto group = dist::split_group(
          context, groups,
          fmt::format("pipeline_link_{}_{}", e, forward ? "activations" : "gradients"), split);
      if (me_ != e && me_ != next) continue;
      if (nccl) form_nccl_link(*group, forward);
      (forward ? link.forward : link.backward) = std::move(group);
    }
    links_.push_back(std::move(link));
  }
}

PipelineLinks::~PipelineLinks() = default;

std::pair<c10d::ProcessGroup*, int> PipelineLinks::route(int peer, bool sending,
                                                         bool forward) const {
  // An edge runs the way activations go: it starts at this rank where this rank sends
  // activations or receives gradients.
  const bool starts_here = sending == forward;
  const int from = starts_here ? me_ : peer, to = starts_here ? peer : me_;
  DDPX_CHECK(from >= 0 && static_cast<size_t>(from) < links_.size() && (from + 1) % stages_ == to,
             ErrorKind::kInternal, "no pipeline link carries {} from pipeline rank {} to {}",
             forward ? "activations" : "gradients", sending ? me_ : peer, sending ? peer : me_);
  const auto& group = forward ? links_[static_cast<size_t>(from)].forward
                              : links_[static_cast<size_t>(from)].backward;
  DDPX_CHECK(group && group->distributed(), ErrorKind::kInternal,
             "pipeline rank {} is not on the link from {} to {}", me_, from, to);
  return {group->process_group().get(), starts_here ? 1 : 0};
}

c10::intrusive_ptr<c10d::Work> PipelineLinks::send(std::vector<at::Tensor>& tensors, int peer,
                                                   bool forward) {
  auto [group, rank] = route(peer, /*sending=*/true, forward);
  return group->send(tensors, rank, kLinkTag);
}

c10::intrusive_ptr<c10d::Work> PipelineLinks::recv(std::vector<at::Tensor>& tensors, int peer,
                                                   bool forward) {
  auto [group, rank] = route(peer, /*sending=*/false, forward);
  return group->recv(tensors, rank, kLinkTag);
}

}  // namespace ddpx::parallel
