// Version-dependent c10d construction (see c10d_compat.h). The 1.13 branch is built and
// tested here; the 2.x branch follows c10d 2.x's headers (Backend + ProcessGroup::setBackend)
// and is compiled only by users with a 2.x libtorch.
#include "dist/c10d_compat.h"

#include <cstdint>

#include <torch/version.h>

// Debian's TorchConfig.cmake does not export these defines; libtorch_cpu is built with Gloo.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#if defined(DDPX_WITH_CUDA) && !defined(USE_C10D_NCCL)
#define USE_C10D_NCCL
#endif

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>
#endif

#include "core/env.h"
#include "core/error.h"
#include "dist/process_group_shm.h"
#include "dist/traced_process_group.h"

#define DDPX_TORCH_2X (TORCH_VERSION_MAJOR >= 2)
#define DDPX_TORCH_AT_LEAST_2_6 \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 6))

namespace ddpx::dist::compat {
namespace {

// A shared_ptr view of an intrusive_ptr-owned object: the deleter owns the intrusive reference.
template <typename T>
std::shared_ptr<T> share(c10::intrusive_ptr<T> ptr) {
  T* raw = ptr.get();
  return std::shared_ptr<T>(raw, [keep = std::move(ptr)](T*) mutable { keep.reset(); });
}

// The reverse: a new intrusive reference to an object ddpx shares.
template <typename T>
c10::intrusive_ptr<T> intrusive(const std::shared_ptr<T>& ptr) {
  return c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(ptr.get());
}

#if DDPX_TORCH_2X
// 2.x: the backend is wrapped by a ProcessGroup that dispatches collectives to it.
std::shared_ptr<c10d::ProcessGroup> wrap_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int world_size,
                                                 c10::intrusive_ptr<c10d::Backend> backend,
                                                 c10d::ProcessGroup::BackendType type,
                                                 c10::DeviceType device,
                                                 const std::string& name,
                                                 std::chrono::milliseconds timeout) {
#if DDPX_TORCH_AT_LEAST_2_6
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size);
#else
  auto options = c10::make_intrusive<c10d::ProcessGroup::Options>(name, timeout);
  auto group = c10::make_intrusive<c10d::ProcessGroup>(store, rank, world_size, options);
#endif
  group->setBackend(device, type, backend);
  group->setDefaultBackend(type);
  return share(std::move(group));
}
#endif

}  // namespace

std::shared_ptr<c10d::Store> make_tcp_store(const std::string& addr, int port, int rank,
                                            int world_size, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = rank == 0;
  options.numWorkers = static_cast<std::size_t>(world_size);
  // join_rendezvous() waits for the ranks and names the missing ones; TCPStore would only
  // say that not all of them came.
  options.waitWorkers = false;
  options.timeout = timeout;
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(addr, options);
    return share(std::move(store));
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    if (rank == 0 && what.find("in use") != std::string::npos) {
      fail(ErrorKind::kDist,
           "rank 0 cannot host the rendezvous: port {} is already in use by another program "
           "(a stale job?); stop it (ss -ltnp | grep :{} shows who listens) or set MASTER_PORT "
           "to a free port for every rank (WORLD_SIZE={})",
           port, port, world_size);
    }
    if (rank == 0) {
      fail(ErrorKind::kDist,
           "rank 0 could not host the rendezvous on port {} within {} ms ({}); check that "
           "MASTER_PORT is free and that every rank uses MASTER_ADDR={} MASTER_PORT={} and "
           "WORLD_SIZE={}",
           port, timeout.count(), what, addr, port, world_size);
    }
    fail(ErrorKind::kDist,
         "rank {} could not reach the rendezvous at {}:{} within {} ms ({}); check that rank 0 "
         "is running, that MASTER_ADDR/MASTER_PORT point at it and that the port is reachable "
         "(WORLD_SIZE={})",
         rank, addr, port, timeout.count(), what, world_size);
  }
}

std::shared_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                             std::chrono::milliseconds timeout) {
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(path, world_size);
    store->setTimeout(timeout);
    return share(std::move(store));
  } catch (const std::exception& e) {
    std::string what = e.what();
    fail(ErrorKind::kDist, "cannot open the rendezvous file {} ({}); check that its folder exists "
         "and is writable", path, what.substr(0, what.find('\n')));
  }
}

std::shared_ptr<c10d::ProcessGroup> make_gloo_group(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_host) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    if (!bind_host.empty()) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(bind_host));
    } else if (auto ifname = env::get("GLOO_SOCKET_IFNAME")) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(*ifname));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
  } catch (const std::exception& e) {
    fail(ErrorKind::kDist,
         "rank {}: could not open a Gloo device on '{}' ({}); set GLOO_SOCKET_IFNAME to a "
         "network interface that reaches the other hosts",
         rank, bind_host.empty() ? env::get_or("GLOO_SOCKET_IFNAME", "this host") : bind_host,
         std::string(e.what()).substr(0, std::string(e.what()).find('\n')));
  }
  options->threads = 2;
  try {
#if DDPX_TORCH_2X
    auto backend = c10::make_intrusive<c10d::ProcessGroupGloo>(intrusive(store), rank, world_size,
                                                               options);
    return wrap_backend(intrusive(store), rank, world_size, backend,
                        c10d::ProcessGroup::BackendType::GLOO, c10::DeviceType::CPU, "gloo",
                        timeout);
#else
    return share(c10::intrusive_ptr<c10d::ProcessGroup>(
        c10::make_intrusive<c10d::ProcessGroupGloo>(intrusive(store), rank, world_size, options)));
#endif
  } catch (const std::exception& e) {
    std::string what = e.what();
    fail(ErrorKind::kDist,
         "rank {}: the Gloo process group of {} ranks did not form within {} ms ({}); check "
         "that every rank was started with the same WORLD_SIZE and that the hosts reach each "
         "other",
         rank, world_size, timeout.count(), what.substr(0, what.find('\n')));
  }
}

bool nccl_available() {
#ifdef USE_C10D_NCCL
  return torch::cuda::is_available();
#else
  return false;
#endif
}

std::shared_ptr<c10d::ProcessGroup> make_shm_group(const std::shared_ptr<c10d::Store>& store,
                                                   std::shared_ptr<c10d::ProcessGroup> gloo,
                                                   int rank, int world_size,
                                                   std::chrono::milliseconds timeout) {
#ifdef DDPX_HAVE_SHM_GROUP
  auto shm = ShmAllreduce::create(*store, rank, world_size, timeout);
  if (!shm) return nullptr;
  return share(c10::intrusive_ptr<c10d::ProcessGroup>(
      c10::make_intrusive<ProcessGroupShm>(std::move(gloo), std::move(shm))));
#else
  return nullptr;
#endif
}

std::shared_ptr<c10d::ProcessGroup> make_nccl_group(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  DDPX_CHECK(torch::cuda::is_available(), ErrorKind::kUsage,
             "--backend nccl needs a CUDA GPU but none is visible; use --backend gloo");
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
#if DDPX_TORCH_2X
  auto backend =
      c10::make_intrusive<c10d::ProcessGroupNCCL>(intrusive(store), rank, world_size, options);
  return wrap_backend(intrusive(store), rank, world_size, backend,
                      c10d::ProcessGroup::BackendType::NCCL, c10::DeviceType::CUDA, "nccl",
                      timeout);
#else
  return share(c10::intrusive_ptr<c10d::ProcessGroup>(
      c10::make_intrusive<c10d::ProcessGroupNCCL>(intrusive(store), rank, world_size, options)));
#endif
#else
  fail(ErrorKind::kUsage,
       "--backend nccl: this libtorch was built without CUDA/NCCL (libtorch {}.{} CPU); use "
       "--backend gloo, or rebuild ddpx against a CUDA libtorch",
       TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR);
#endif
}

std::shared_ptr<c10d::ProcessGroup> make_traced_group(
    std::shared_ptr<c10d::ProcessGroup> group, std::shared_ptr<trace::CollectiveTrace> trace) {
#ifdef DDPX_HAVE_TRACED_GROUP
  return share(c10::intrusive_ptr<c10d::ProcessGroup>(
      c10::make_intrusive<TracedProcessGroup>(std::move(group), std::move(trace))));
#else
  return group;
#endif
}

#if defined(DDPX_HAVE_SHM_GROUP) && defined(DDPX_HAVE_TRACED_GROUP)
ProcessGroupShm* shm_group(c10d::ProcessGroup& group) {
  c10d::ProcessGroup* inner = &group;
  if (auto* traced = dynamic_cast<TracedProcessGroup*>(inner)) inner = &traced->inner();
  return dynamic_cast<ProcessGroupShm*>(inner);
}

torch::Tensor allocate_bucket(c10d::ProcessGroup& group, int64_t numel, c10::ScalarType dtype) {
  ProcessGroupShm* shm = shm_group(group);
  if (shm == nullptr || !shm->arena() || !supports_average(group, dtype)) return {};
  return shm->arena()->allocate(numel, dtype);
}

bool supports_average(c10d::ProcessGroup& group, c10::ScalarType dtype) {
  return shm_group(group) != nullptr && (dtype == torch::kFloat32 || dtype == torch::kFloat64);
}
#else
ProcessGroupShm* shm_group(c10d::ProcessGroup&) { return nullptr; }
torch::Tensor allocate_bucket(c10d::ProcessGroup&, int64_t, c10::ScalarType) { return {}; }
bool supports_average(c10d::ProcessGroup&, c10::ScalarType) { return false; }
#endif

bool supports_bf16_allreduce(const c10d::ProcessGroup& group) {
  // Gloo learned bfloat16 in libtorch 2.x; NCCL has it in every version ddpx supports.
  if (DDPX_TORCH_2X) return true;
  return backend_name(group).rfind("gloo", 0) != 0;  // "gloo" and "gloo+shm"
}

std::string backend_name(const c10d::ProcessGroup& group) { return group.getBackendName(); }

}  // namespace ddpx::dist::compat
