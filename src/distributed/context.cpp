// init(): environment -> TCPStore rendezvous -> process group, and the Context's collectives.
#include "distributed/context.h"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/env.h"
#include "core/error.h"
#include "core/flight_recorder.h"
#include "core/log.h"
#include "distributed/abort_watch.h"
#include "distributed/bucket_policy.h"
#include "distributed/c10d/traced_backend.h"
#include "distributed/collectives.h"
#include "distributed/device.h"
#include "distributed/factories.h"
#include "distributed/net.h"
#include "distributed/rendezvous.h"
#include "distributed/shm_backend.h"
#include "distributed/trace_exchange.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

// A GPU that another job already fills: a clear line before this job fails or crawls.
void check_gpu_is_free(const torch::Device& device, int rank) {
  auto memory = device_memory(device);
  if (!memory) return;
  auto verdict = judge_busy_gpu(
      fmt::format("rank {}: GPU {} ({})", rank, device.str(), device_name(device)), *memory);
  if (!verdict) return;
  DDPX_CHECK(!verdict->fatal, ErrorKind::kUsage, "{}", verdict->message);
  log::warn("{}", verdict->message);
}

// Every collective of a backend is recorded (collective_trace.h) unless DDPX_TRACE=0 (to
// measure its cost; see docs/distributed.md). A collective still running `timeout` after it
// started, once its wait() has returned (NCCL), ends the job with the verdict.
c10::intrusive_ptr<c10d::Backend> traced(c10::intrusive_ptr<c10d::Backend> backend,
                                         const std::shared_ptr<trace::CollectiveTrace>& trace,
                                         std::chrono::milliseconds timeout) {
  if (!trace) return backend;
  return c10::make_intrusive<TracedBackend>(std::move(backend), trace, timeout);
}

}  // namespace

BackendChoice choose_backend(BackendChoice requested, const torch::Device& device,
                             bool nccl_available, bool shared_gpus) {
  if (requested == BackendChoice::kAuto) {
    return device.is_cuda() && nccl_available && !shared_gpus ? BackendChoice::kNccl
                                                              : BackendChoice::kGloo;
  }
  if (requested != BackendChoice::kNccl) return requested;
  DDPX_CHECK(device.is_cuda(), ErrorKind::kUsage,
             "--backend nccl reduces GPU tensors, and this run trains on the CPU (--device cpu, "
             "or no GPU visible); use --backend gloo (or auto), or --device cuda");
  DDPX_CHECK(nccl_available, ErrorKind::kUsage,
             "--backend nccl needs a CUDA build of ddpx with NCCL; use --backend gloo (or auto)");
  DDPX_CHECK(!shared_gpus, ErrorKind::kUsage,
             "--backend nccl: ranks of this job share a GPU (ddpx run --gpus lists one twice), "
             "which NCCL refuses (\"Duplicate GPU detected\"); use --backend gloo (or auto), or "
             "give each worker its own GPU");
  return requested;
}

Context::Context(WorldInfo world, std::shared_ptr<c10d::Store> store,
                 std::shared_ptr<c10d::ProcessGroup> group, Built built)
    : world_(std::move(world)),
      store_(std::move(store)),
      group_(std::move(group)),
      built_(std::move(built)) {}

// The group goes before the store: Gloo's pairs may still talk to the store on shutdown. It is
// shut down first, as destroy_process_group() does: NCCL releases its communicators there and
// warns at exit about a group destroyed without it.
Context::~Context() {
  if (group_) {
    try {
      group_->shutdown();
    } catch (const std::exception& e) {
      log::warn("shutting down the process group: {}", e.what());
    }
  }
  group_.reset();
  store_.reset();
}

PeerMemory* Context::peer_memory() const {
  return built_.shm != nullptr && built_.shm->arena() != nullptr ? built_.shm : nullptr;
}

BucketPolicy Context::bucket_policy() const {
  BucketPolicy policy;
  ShmBackend* shm = built_.shm;
  if (shm) {
    policy.allocate = [shm](int64_t numel, c10::ScalarType dtype) {
      return shm->allocate_bucket(numel, dtype);
    };
  }
  // CUDA tensors: NCCL averages natively (ncclAvg) in every float dtype. CPU tensors: the
  // shared-memory transport in float32/64; Gloo pre-divides, then sums.
  const bool nccl = built_.backend.rfind("nccl", 0) == 0;
  policy.averages = [nccl, shm](c10::ScalarType dtype, c10::DeviceType device) {
    if (device == c10::DeviceType::CUDA) return nccl && c10::isFloatingType(dtype);
    return shm != nullptr && device == c10::DeviceType::CPU && ShmBackend::averages(dtype);
  };
  return policy;
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
  dist::barrier(*group_);  // not group_->barrier(): see collectives.h
}

std::vector<std::string> Context::gather_text(const std::string& text) {
  constexpr int64_t kWidth = 256;
  // One row a rank, zero elsewhere: a sum gathers them (a CPU collective every backend has).
  torch::Tensor rows = torch::zeros({world_size(), kWidth}, torch::kInt32);
  const int64_t n = std::min<int64_t>(static_cast<int64_t>(text.size()), kWidth - 1);
  auto mine = rows.accessor<int32_t, 2>();
  for (int64_t i = 0; i < n; ++i) mine[rank()][i] = static_cast<uint8_t>(text[i]);
  all_reduce_sum(rows);
  std::vector<std::string> texts;
  auto a = rows.accessor<int32_t, 2>();
  for (int64_t r = 0; r < world_size(); ++r) {
    std::string row;
    for (int64_t i = 0; i < kWidth && a[r][i] != 0; ++i) row.push_back(static_cast<char>(a[r][i]));
    texts.push_back(std::move(row));
  }
  return texts;
}

std::shared_ptr<Context> init(const InitOptions& options) { return init(detect_world(), options); }

std::shared_ptr<Context> init(const WorldInfo& world, const InitOptions& options) {
  disable_flight_recorder();  // before the first process group (flight_recorder.h)
  log::set_rank(world.rank);
  Built built;
  built.options = options;
  built.device = select_device(options.device, world);
  // `ddpx run --gpus 0,0,1,1` tells every worker that GPUs are shared (launch/plan.h).
  const BackendChoice backend = choose_backend(options.backend, built.device, nccl_available(),
                                               env::get_or("DDPX_SHARED_GPUS", "0") == "1");
  check_gpu_is_free(built.device, world.rank);
  const bool force_group = options.force_group || env::get_or("DDPX_FORCE_GROUP", "0") == "1";
  if (world.world_size == 1 && !force_group) {
    return std::make_shared<Context>(world, nullptr, nullptr, std::move(built));
  }
  // `ddpx run` on one node hands its workers a rendezvous file (no listening socket at all);
  // torchrun-style jobs and multi-node jobs meet at MASTER_ADDR:MASTER_PORT; a forced world of
  // one keeps its store in memory.
  auto store_file = env::get("DDPX_STORE_FILE");
  const bool use_file = store_file && world.local_world_size == world.world_size;
  std::shared_ptr<c10d::Store> store;
  if (world.world_size == 1 && !use_file) {
    store = make_hash_store();
  } else if (use_file) {
    store = make_file_store(*store_file, world.world_size, options.timeout);
    join_rendezvous(*store, world, options.timeout, "the file " + *store_file);
  } else {
    // A MASTER_ADDR that does not resolve fails here, at once, not after the store's retries.
    if (!is_loopback(world.master_addr)) local_address_towards(world.master_addr);
    // Under torchrun the agent serves the store on MASTER_PORT and every worker is its client;
    // each restart of the workers gets keys of its own in it.
    const bool agent_store = env::get_or("TORCHELASTIC_USE_AGENT_STORE", "") == "True";
    const auto attempt = env::get("TORCHELASTIC_RESTART_COUNT");
    store = rendezvous_with_deadline(
        [world, agent_store, attempt, timeout = options.timeout] {
          auto tcp = make_tcp_store(world.master_addr, world.master_port, world.rank,
                                    world.world_size, world.rank == 0 && !agent_store, timeout);
          return attempt ? make_prefix_store("ddpx/attempt" + *attempt + "/", tcp) : tcp;
        },
        world, options.timeout, world.master_addr + ":" + std::to_string(world.master_port));
  }
  // DDPX_TRACE_DIR puts the record where the other ranks and the launcher can read it.
  if (env::get_or("DDPX_TRACE", "1") != "0") {
    built.trace = std::make_shared<trace::CollectiveTrace>(env::get_or("DDPX_TRACE_DIR", ""),
                                                           world.rank, world.world_size);
  }
  if (built.trace && world.local_world_size < world.world_size)
    install_trace_exchange(*built.trace, store);
  // CPU tensors: Gloo, through shared memory when every rank is on this host. Always there, as
  // in PyTorch's "cpu:gloo,cuda:nccl": metrics and checks reduce CPU tensors in NCCL jobs too.
  // One node: every peer is local, so loopback works even when the hostname does not resolve.
  // Several: the address that reaches MASTER_ADDR, unless GLOO_SOCKET_IFNAME names interfaces
  // (the host name may resolve to 127.0.1.1, which no other node reaches).
  // A rank that fails while the group forms ends the others at once (abort_watch.h).
  c10::intrusive_ptr<c10d::Backend> cpu, cuda;
  AbortWatch watch(store, world.rank);
  try {
    const bool one_node =
        is_loopback(world.master_addr) || world.local_world_size == world.world_size;
    std::string gloo_host = one_node ? "127.0.0.1"
                            : env::get("GLOO_SOCKET_IFNAME")
                                ? ""
                                : local_address_towards(world.master_addr);
    cpu = make_gloo_backend(store, world.rank, world.world_size, options.timeout, gloo_host);
    built.gloo_host = gloo_host;
    if (options.transport != Transport::kGloo) {
      if (auto shm = make_shm_backend(store, cpu, world.rank, world.world_size, options.timeout)) {
        built.shm = shm.get();
        cpu = std::move(shm);
      } else {
        DDPX_CHECK(options.transport != Transport::kShm, ErrorKind::kUsage,
                   "--transport shm: the ranks are not all on one host (or /dev/shm is full); "
                   "use --transport auto or gloo");
      }
    }
    built.backend = cpu->getBackendName();
    if (backend == BackendChoice::kNccl) {
      // With the record on, ddpx watches NCCL's collectives itself (traced_backend.h) and
      // PyTorch's watchdog, which would SIGABRT the rank without a verdict, comes later.
      const std::chrono::milliseconds nccl_timeout =
          built.trace ? options.timeout + kInnerTimeoutMargin : options.timeout;
      cuda = traced(make_nccl_backend(store, world.rank, world.world_size, nccl_timeout),
                    built.trace, options.timeout);
      built.backend = "nccl/" + built.backend;
      built.nccl = true;
    }
  } catch (const std::exception& e) {
    watch.stop();
    AbortWatch::announce(*store, world.rank, e.what());
    throw;
  }
  watch.stop();
  auto group =
      make_process_group(store, world.rank, world.world_size,
                         traced(std::move(cpu), built.trace, options.timeout), std::move(cuda));
  if (world.world_size == 1) {
    log::info("a process group of one rank, forced ({})", built.backend);
  } else {
    log::info("joined {} ranks via {}:{} ({}, {})", world.world_size, world.master_addr,
              world.master_port, built.backend, world.source);
  }
  return std::make_shared<Context>(world, std::move(store), std::move(group), std::move(built));
}

}  // namespace ddpx::dist
