// A joined job: the rendezvous store and the process group, plus the few collectives the
// trainer needs on plain values. Created once per process by init(). With world size 1 there
// is no store and no process group, and every collective is the identity.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/types.h>

#include "dist/world.h"

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace ddpx::dist {

struct InitOptions {
  std::string backend = "auto";  // auto | gloo | nccl (auto: nccl when the device is a GPU)
  std::chrono::milliseconds timeout = std::chrono::minutes(30);  // collectives and rendezvous
  // auto | shm | gloo. auto and shm: when every rank is on this host, CPU float all-reduces
  // go through shared memory (ProcessGroupShm) and the rest through Gloo; shm insists on it.
  std::string transport = "auto";
};

class Context {
 public:
  // A joined job; init() builds one. With a null group the context is a lone process.
  Context(WorldInfo world, std::shared_ptr<c10d::Store> store,
          std::shared_ptr<c10d::ProcessGroup> group, std::string backend);
  ~Context();

  const WorldInfo& world() const { return world_; }
  int rank() const { return world_.rank; }
  int world_size() const { return world_.world_size; }
  bool distributed() const { return world_.world_size > 1; }
  const std::string& backend() const { return backend_; }

  // The process group (null when world size is 1).
  std::shared_ptr<c10d::ProcessGroup> process_group() const { return group_; }

  // Blocking collectives on CPU tensors, identity on one process. A failure or a timeout
  // throws ddpx::Error(kDist).
  void all_reduce_sum(torch::Tensor& tensor);  // in place
  void broadcast(torch::Tensor& tensor, int root = 0);
  void barrier();

 private:
  WorldInfo world_;
  std::shared_ptr<c10d::Store> store_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  std::string backend_ = "none";
};

// Joins the job described by the environment (detect_world()). Rendezvous failures end in
// ddpx::Error(kDist) within the timeout, naming the master address and what to check.
std::shared_ptr<Context> init(const InitOptions& options = {});

// Joins the job described by `world` (tests and launchers that know it without the
// environment). Rank 0 hosts the TCPStore on world.master_port; a single-node job binds Gloo
// to 127.0.0.1.
std::shared_ptr<Context> init(const WorldInfo& world, const InitOptions& options);

}  // namespace ddpx::dist
