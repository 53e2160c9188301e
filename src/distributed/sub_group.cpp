// split_group(): one group of the partition, built like the job's (see sub_group.h).
#include "distributed/sub_group.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "distributed/c10d/traced_backend.h"
#include "distributed/factories.h"
#include "distributed/shm_backend.h"

namespace ddpx::dist {

std::shared_ptr<Context> split_group(const Context& parent,
                                     const std::vector<std::vector<int>>& groups,
                                     const std::string& name, const SplitOptions& options) {
  const int me = parent.rank();
  int index = -1, rank = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].size(); ++i) {
      if (groups[g][i] != me) continue;
      DDPX_CHECK(index < 0, ErrorKind::kInternal, "split {}: rank {} is in two groups", name, me);
      index = static_cast<int>(g);
      rank = static_cast<int>(i);
    }
  }
  DDPX_CHECK(index >= 0, ErrorKind::kInternal, "split {}: rank {} is in none of the groups {}",
             name, me, groups);
  const std::vector<int>& members = groups[static_cast<size_t>(index)];
  WorldInfo world = parent.world();
  world.rank = rank;
  world.world_size = static_cast<int>(members.size());
  world.local_rank = rank;
  world.local_world_size = parent.world().local_world_size == parent.world_size()
                               ? world.world_size
                               : std::min(world.world_size, parent.world().local_world_size);
  Built built;
  built.device = parent.device();
  built.options = parent.built().options;
  built.gloo_host = parent.built().gloo_host;
  if (members.size() == 1 || !parent.distributed()) {
    built.backend = "none";
    return std::make_shared<Context>(world, nullptr, nullptr, std::move(built));
  }
  auto store = make_prefix_store(fmt::format("ddpx/split/{}/{}/", name, index), parent.store());
  const auto timeout = built.options.timeout;
  const bool recorded = options.recorded && parent.trace();
  if (recorded) built.trace = parent.trace();
  c10::intrusive_ptr<c10d::Backend> cpu =
      make_gloo_backend(store, rank, world.world_size, timeout, built.gloo_host);
  if (parent.shm() && options.peer_memory) {
    if (auto shm = make_shm_backend(store, cpu, rank, world.world_size, timeout)) {
      built.shm = shm.get();
      cpu = std::move(shm);
    }
  }
  built.backend = cpu->getBackendName();
  c10::intrusive_ptr<c10d::Backend> cuda;
  if (parent.built().nccl) {
    // Recorded, ddpx's watch ends a late NCCL transfer before PyTorch's watchdog (context.cpp).
    cuda = make_nccl_backend(store, rank, world.world_size,
                             recorded ? timeout + kInnerTimeoutMargin : timeout);
    if (recorded) {
      cuda = c10::make_intrusive<TracedBackend>(std::move(cuda), built.trace, timeout,
                                                CompletionWatch::OnLate{}, name);
    }
    built.backend = "nccl/" + built.backend;
    built.nccl = true;
  }
  if (recorded) {
    cpu = c10::make_intrusive<TracedBackend>(std::move(cpu), built.trace, timeout,
                                             CompletionWatch::OnLate{}, name);
  }
  auto group = make_process_group(store, rank, world.world_size, std::move(cpu), std::move(cuda));
  return std::make_shared<Context>(world, std::move(store), std::move(group), std::move(built));
}

}  // namespace ddpx::dist
