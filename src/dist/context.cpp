// init(): environment -> TCPStore rendezvous -> process group, and the Context's collectives.
#include "dist/context.h"

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/c10d_compat.h"
#include "core/collective_trace.h"
#include "dist/collectives.h"
#include "dist/rendezvous.h"

namespace ddpx::dist {
namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string choose_backend(const std::string& requested) {
  if (requested == "auto") return compat::nccl_available() ? "nccl" : "gloo";
  DDPX_CHECK(requested == "gloo" || requested == "nccl", ErrorKind::kUsage,
             "--backend '{}' is not a backend; valid values: auto, gloo, nccl", requested);
  DDPX_CHECK(requested != "nccl" || compat::nccl_available(), ErrorKind::kUsage,
             "--backend nccl needs a CUDA build of libtorch and a visible GPU, and this process "
             "has neither; use --backend gloo (or auto)");
  return requested;
}

}  // namespace

Context::Context(WorldInfo world, std::shared_ptr<c10d::Store> store,
                 std::shared_ptr<c10d::ProcessGroup> group, std::string backend)
    : world_(std::move(world)),
      store_(std::move(store)),
      group_(std::move(group)),
      backend_(std::move(backend)) {}

// The group goes before the store: Gloo's pairs may still talk to the store on shutdown.
Context::~Context() {
  group_.reset();
  store_.reset();
}

void Context::all_reduce_sum(torch::Tensor& tensor) {
  if (!group_) return;
  dist::all_reduce_sum(*group_, tensor, "all_reduce_sum");
}

void Context::broadcast(torch::Tensor& tensor, int root) {
  if (!group_) return;
  DDPX_CHECK(root >= 0 && root < world_size(), ErrorKind::kInternal,
             "broadcast root {} is outside the world of {} ranks", root, world_size());
  std::vector<torch::Tensor> tensors{tensor};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  wait_work(group_->broadcast(tensors, options), "broadcast");
}

void Context::barrier() {
  if (!group_) return;
  wait_work(group_->barrier(), "barrier");
}

std::shared_ptr<Context> init(const InitOptions& options) { return init(detect_world(), options); }

std::shared_ptr<Context> init(const WorldInfo& world, const InitOptions& options) {
  const std::string backend = choose_backend(options.backend);
  log::set_rank(world.rank);
  if (world.world_size == 1) {
    return std::make_shared<Context>(world, nullptr, nullptr, "none");
  }
  // `ddpx run` on one node hands its workers a rendezvous file (no listening socket at all);
  // torchrun-style jobs and multi-node jobs meet at MASTER_ADDR:MASTER_PORT.
  auto store_file = env::get("DDPX_STORE_FILE");
  const bool use_file = store_file && world.local_world_size == world.world_size;
  std::shared_ptr<c10d::Store> store;
  if (use_file) {
    store = compat::make_file_store(*store_file, world.world_size, options.timeout);
    join_rendezvous(*store, world, options.timeout, "the file " + *store_file);
  } else {
    store = rendezvous_with_deadline(
        [world, timeout = options.timeout] {
          return compat::make_tcp_store(world.master_addr, world.master_port, world.rank,
                                        world.world_size, timeout);
        },
        world, options.timeout, world.master_addr + ":" + std::to_string(world.master_port));
  }
  std::shared_ptr<c10d::ProcessGroup> group;
  if (backend == "nccl") {
    group = compat::make_nccl_group(store, world.rank, world.world_size, options.timeout);
  } else {
    // One node: every peer is local, so loopback works even when the hostname does not resolve.
    const bool one_node =
        is_loopback(world.master_addr) || world.local_world_size == world.world_size;
    group = compat::make_gloo_group(store, world.rank, world.world_size, options.timeout,
                                    one_node ? "127.0.0.1" : "");
    DDPX_CHECK(options.transport == "auto" || options.transport == "shm" ||
                   options.transport == "gloo",
               ErrorKind::kUsage, "--transport '{}' is not one of auto, shm, gloo",
               options.transport);
    if (options.transport != "gloo") {
      if (auto shm = compat::make_shm_group(store, group, world.rank, world.world_size,
                                            options.timeout)) {
        group = std::move(shm);
      } else {
        DDPX_CHECK(options.transport != "shm", ErrorKind::kUsage,
                   "--transport shm: the ranks are not all on one host (or /dev/shm is full); "
                   "use --transport auto or gloo");
      }
    }
  }
  // Every collective of the job's group is recorded (collective_trace.h); DDPX_TRACE_DIR puts
  // the record where the other ranks and the launcher can read it.
  // DDPX_TRACE=0 turns it off (to measure its cost; see docs/distributed.md).
  if (env::get_or("DDPX_TRACE", "1") != "0") {
    auto trace = std::make_shared<trace::CollectiveTrace>(env::get_or("DDPX_TRACE_DIR", ""),
                                                          world.rank, world.world_size);
    group = compat::make_traced_group(std::move(group), std::move(trace));
  }
  std::string name = compat::backend_name(*group);
  log::info("joined {} ranks via {}:{} ({}, {})", world.world_size, world.master_addr,
            world.master_port, name, world.source);
  return std::make_shared<Context>(world, std::move(store), std::move(group), name);
}

}  // namespace ddpx::dist
