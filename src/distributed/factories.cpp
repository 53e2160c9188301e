// c10d construction (see factories.h).
//
// Gloo's headers: PyTorch's wheel ships ProcessGroupGloo.hpp but not the Gloo headers it
// includes, so they come from Debian's libgloo-dev. ddpx only passes Gloo's objects through as
// opaque pointers (a transport device made by libtorch's own createDeviceFor*, handed back in the
// options), and links the Gloo inside libtorch; the class layout it relies on is c10d's, whose
// members are all pointers to Gloo types. GLOO_STORE_HAS_STORE_V2 stays undefined: Debian's
// Gloo predates that store interface, and libtorch's GlooStore objects are built inside libtorch.
#include "distributed/factories.h"

#include <torch/cuda.h>

#include <cstdint>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "distributed/gpu_library.h"
#include "distributed/net.h"
#include "distributed/shm_backend.h"

namespace ddpx::dist {
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

std::string first_line(const std::exception& e) {
  std::string what = e.what();
  return what.substr(0, what.find('\n'));
}

}  // namespace

std::shared_ptr<c10d::Store> make_tcp_store(const std::string& addr, int port, int rank,
                                            int world_size, bool host,
                                            std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = host;
  options.numWorkers = static_cast<std::size_t>(world_size);
  // join_rendezvous() waits for the ranks and names the missing ones; TCPStore would only
  // say that not all of them came.
  options.waitWorkers = false;
  options.timeout = timeout;
  // Rank 0 listens on MASTER_ADDR only, not on every interface (net.h).
  if (host) options.masterListenFd = listen_on(addr, port);
  // The others wait until it does, quietly but for one line every kReportEvery (net.h: libtorch
  // would print a C++ backtrace per retry), then connect with what is left of the timeout.
  if (!host) {
    constexpr auto kReportEvery = std::chrono::seconds(30);
    const auto start = std::chrono::steady_clock::now();
    auto failure =
        wait_for_listener(addr, port, start + timeout, kReportEvery, [&](const std::string& why) {
          auto gone = std::chrono::steady_clock::now() - start;
          log::warn(
              "the rendezvous at {}:{} does not answer ({}); "
              "trying again for up to {} s more",
              addr, port, why,
              std::chrono::duration_cast<std::chrono::seconds>(timeout - gone).count());
        });
    DDPX_CHECK(!failure, ErrorKind::kDist,
               "rank {} could not reach the rendezvous at {}:{} within {} ms ({}); check that "
               "rank 0 is running, that MASTER_ADDR/MASTER_PORT point at it and that the port is "
               "reachable from this host (`nc -z {} {}` tells) (WORLD_SIZE={})",
               rank, addr, port, timeout.count(), failure.value_or(""), addr, port, world_size);
    options.timeout =
        std::max<std::chrono::milliseconds>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                start + timeout - std::chrono::steady_clock::now()),
                                            std::chrono::milliseconds(100));
  }
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::TCPStore>(addr, options);
    return share(std::move(store));
  } catch (const std::exception& e) {
    std::string what = first_line(e);
    if (host && (what.find("in use") != std::string::npos ||
                 what.find("EADDRINUSE") != std::string::npos)) {
      fail(ErrorKind::kDist,
           "rank 0 cannot host the rendezvous: port {} is already in use by another program "
           "(a stale job?); stop it (ss -ltnp | grep :{} shows who listens) or set MASTER_PORT "
           "to a free port for every rank (WORLD_SIZE={})",
           port, port, world_size);
    }
    if (host) {
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

std::shared_ptr<c10d::Store> make_prefix_store(const std::string& prefix,
                                               const std::shared_ptr<c10d::Store>& store) {
  return share(c10::intrusive_ptr<c10d::Store>(
      c10::make_intrusive<c10d::PrefixStore>(prefix, intrusive(store))));
}

std::shared_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                             std::chrono::milliseconds timeout) {
  try {
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(path, world_size);
    store->setTimeout(timeout);
    return share(std::move(store));
  } catch (const std::exception& e) {
    fail(ErrorKind::kDist,
         "cannot open the rendezvous file {} ({}); check that its folder exists "
         "and is writable",
         path, first_line(e));
  }
}

std::shared_ptr<c10d::Store> make_hash_store() {
  return share(c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<c10d::HashStore>()));
}

c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_host) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    if (!bind_host.empty()) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(bind_host));
    } else if (auto ifnames = env::get("GLOO_SOCKET_IFNAME")) {
      // PyTorch's form: one interface, or a comma-separated list (one device each).
      size_t start = 0;
      while (start <= ifnames->size()) {
        size_t end = std::min(ifnames->find(',', start), ifnames->size());
        std::string name = ifnames->substr(start, end - start);
        if (!name.empty())
          options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
        start = end + 1;
      }
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
  } catch (const std::exception& e) {
    fail(ErrorKind::kDist,
         "rank {}: could not open a Gloo device on '{}' ({}); set GLOO_SOCKET_IFNAME to a "
         "network interface that reaches the other hosts",
         rank, bind_host.empty() ? env::get_or("GLOO_SOCKET_IFNAME", "this host") : bind_host,
         first_line(e));
  }
  options->threads = 2;
  try {
    return c10::make_intrusive<c10d::ProcessGroupGloo>(intrusive(store), rank, world_size, options);
  } catch (const std::exception& e) {
    fail(ErrorKind::kDist,
         "rank {}: the Gloo process group of {} ranks did not form within {} ms ({}); check "
         "that every rank was started with the same WORLD_SIZE and that the hosts reach each "
         "other",
         rank, world_size, timeout.count(), first_line(e));
  }
}

bool nccl_available() { return gpu_api() != nullptr && torch::cuda::is_available(); }

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout) {
  const gpu::Api* gpu = gpu_api();
#ifndef DDPX_WITH_CUDA
  fail(ErrorKind::kUsage,
       "--backend nccl: this ddpx was built without CUDA/NCCL (DDPX_WITH_CUDA=OFF or a CPU-only "
       "torch); use --backend gloo, or rebuild ddpx against PyTorch's CUDA wheel");
#endif
  DDPX_CHECK(gpu != nullptr && torch::cuda::is_available(), ErrorKind::kUsage,
             "rank {}: --backend nccl needs a CUDA GPU but none is visible (CUDA_VISIBLE_DEVICES="
             "'{}'; the GPU library: {}); use --backend gloo, or run where a GPU is visible",
             rank, env::get_or("CUDA_VISIBLE_DEVICES", ""), gpu_library_status());
  try {
    return gpu->make_nccl(intrusive(store), rank, world_size, timeout);
  } catch (const std::exception& e) {
    fail(ErrorKind::kDist, "rank {}: the NCCL process group of {} ranks could not be made ({})",
         rank, world_size, first_line(e));
  }
}

c10::intrusive_ptr<ShmBackend> make_shm_backend(const std::shared_ptr<c10d::Store>& store,
                                                c10::intrusive_ptr<c10d::Backend> gloo, int rank,
                                                int world_size, std::chrono::milliseconds timeout) {
  auto shm = ShmAllreduce::create(*store, rank, world_size, timeout);
  if (!shm) return {};
  return c10::make_intrusive<ShmBackend>(std::move(gloo), std::move(shm));
}

std::shared_ptr<c10d::ProcessGroup> make_process_group(const std::shared_ptr<c10d::Store>& store,
                                                       int rank, int world_size,
                                                       c10::intrusive_ptr<c10d::Backend> cpu,
                                                       c10::intrusive_ptr<c10d::Backend> cuda) {
  using Type = c10d::ProcessGroup::BackendType;
  auto group = c10::make_intrusive<c10d::ProcessGroup>(intrusive(store), rank, world_size);
  group->setBackend(c10::DeviceType::CPU, Type::GLOO, cpu);
  if (cuda) {
    group->setBackend(c10::DeviceType::CUDA, Type::NCCL, std::move(cuda));
    group->setDefaultBackend(Type::NCCL);
  } else {
    // Gloo also reduces CUDA tensors (through host memory): ranks sharing one GPU, where NCCL
    // refuses two ranks on a device.
    group->setBackend(c10::DeviceType::CUDA, Type::GLOO, cpu);
    group->setDefaultBackend(Type::GLOO);
  }
  return share(std::move(group));
}

}  // namespace ddpx::dist
