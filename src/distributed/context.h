// A joined job: the rendezvous store and the process group, what init() built (the shared-memory
// transport, if any, and the collective record), what the group's transport offers beyond
// collectives (peer_memory()), plus the few collectives the trainer needs on plain values. Created
// once per process by init(). With world size 1 there is no store and no process group, and every
// collective is the identity, unless the group is forced (InitOptions::force_group,
// DDPX_FORCE_GROUP=1): then a world of one builds its group as a larger world does, and DDP its
// reducer, so that one GPU runs every NCCL path of DDP.
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "distributed/choices.h"
#include "distributed/world.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace ddpx::trace {
class CollectiveTrace;
}

namespace ddpx::dist {

class PeerMemory;
class ShmBackend;
struct BucketPolicy;

struct InitOptions {
  DeviceChoice device = DeviceChoice::kAuto;     // device.h: the GPU of LOCAL_RANK, else CPU
  BackendChoice backend = BackendChoice::kAuto;  // kAuto: NCCL when training on a GPU
  std::chrono::milliseconds timeout = std::chrono::minutes(30);  // collectives and rendezvous
  Transport transport = Transport::kAuto;                        // for CPU tensors (choices.h)
  // Build the process group (and so DDP's reducer) at world size 1 too; also set by the
  // environment variable DDPX_FORCE_GROUP=1. A check of the distributed paths on one device,
  // not a speed-up: a world of one has nothing to average.
  bool force_group = false;
};

// What init() built besides the group.
struct Built {
  torch::Device device = torch::kCPU;  // where this rank trains (select_device)
  std::string backend = "none";        // "gloo", "gloo+shm", "nccl" (its CPU side after a '/')
  ShmBackend* shm = nullptr;           // the shared-memory transport, owned by the group
  std::shared_ptr<trace::CollectiveTrace> trace;  // the collective record, if on
  // How the group was built, for the groups split from it (sub_group.h).
  InitOptions options;
  std::string gloo_host;  // the address Gloo binds ("": GLOO_SOCKET_IFNAME's interface)
  bool nccl = false;      // an NCCL backend for CUDA tensors
};

class Context {
 public:
  // A joined job; init() builds one. With a null group the context is a lone process.
  Context(WorldInfo world, std::shared_ptr<c10d::Store> store,
          std::shared_ptr<c10d::ProcessGroup> group, Built built);
  ~Context();

  const WorldInfo& world() const { return world_; }
  int rank() const { return world_.rank; }
  int world_size() const { return world_.world_size; }
  // Whether there is a process group: more than one rank, or a forced group of one.
  bool distributed() const { return group_ != nullptr; }
  const std::string& backend() const { return built_.backend; }
  // The device this rank trains on, already made current.
  const torch::Device& device() const { return built_.device; }
  // The shared-memory transport of CPU tensors (null: Gloo, another host, or one process), for
  // distributed/ and the transport's benchmarks. It lives as long as process_group().
  ShmBackend* shm() const { return built_.shm; }
  // Memory the group's ranks publish to each other and the collective steps over it (see
  // peer_memory.h), or null where the transport offers none (NCCL, Gloo, several hosts, one
  // process, DDPX_SHM_ARENA=0): then the plain collectives. It lives as long as process_group().
  PeerMemory* peer_memory() const;
  // This rank's collective record (null with DDPX_TRACE=0 or one process).
  const std::shared_ptr<trace::CollectiveTrace>& trace() const { return built_.trace; }
  // Where DDP should put its gradient buckets and whether the group averages them itself.
  BucketPolicy bucket_policy() const;

  // The rendezvous store (null when world size is 1, unless forced).
  const std::shared_ptr<c10d::Store>& store() const { return store_; }
  const Built& built() const { return built_; }

  // The process group (null when world size is 1, unless forced).
  std::shared_ptr<c10d::ProcessGroup> process_group() const { return group_; }

  // Blocking collectives on CPU tensors, identity on one process. A failure or a timeout
  // throws ddpx::Error(kDist).
  void all_reduce_sum(torch::Tensor& tensor);  // in place
  void broadcast(torch::Tensor& tensor, int root = 0);
  void barrier();
  // Every rank's `text` (at most 255 bytes kept), indexed by rank; collective.
  std::vector<std::string> gather_text(const std::string& text);

 private:
  WorldInfo world_;
  std::shared_ptr<c10d::Store> store_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  Built built_;
};

// The backend for GPU tensors. kAuto: NCCL on a GPU where NCCL is available, unless ranks share
// a GPU (`shared_gpus`: DDPX_SHARED_GPUS=1, set by `ddpx run --gpus 0,0,1,1`), which NCCL
// refuses with "Duplicate GPU detected": then Gloo, which reduces CUDA tensors through host
// memory. Throws ddpx::Error(kUsage) for an explicit kNccl that cannot work.
BackendChoice choose_backend(BackendChoice requested, const torch::Device& device,
                             bool nccl_available, bool shared_gpus);

// Joins the job described by the environment (detect_world()). Rendezvous failures end in
// ddpx::Error(kDist) within the timeout, naming the master address and what to check.
std::shared_ptr<Context> init(const InitOptions& options = {});

// Joins the job described by `world` (tests and launchers that know it without the
// environment). Rank 0 hosts the TCPStore on world.master_port (or `ddpx run` hands a
// FileStore); a single-node job binds Gloo to 127.0.0.1.
std::shared_ptr<Context> init(const WorldInfo& world, const InitOptions& options);

}  // namespace ddpx::dist
