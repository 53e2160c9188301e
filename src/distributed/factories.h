// The one place that builds c10d objects: rendezvous stores, the Gloo and NCCL/RCCL backends,
// and the ProcessGroup that holds one backend per device type (libtorch 2.x's layout: CPU
// tensors go to the CPU backend, CUDA tensors to the CUDA one). Every failure is a
// ddpx::Error(kDist or kUsage) that says what to check.
//
// c10d objects are c10::intrusive_ptr-owned; ddpx hands stores and groups around as
// std::shared_ptr whose deleter holds the intrusive reference, so c10d's internal intrusive_ptr
// uses stay valid.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace ddpx::dist {

class ShmBackend;

// The rendezvous store: with `host` (rank 0, unless torchrun's agent already hosts one) this
// process serves it on `port`; the others connect to addr:port. Throws ddpx::Error(kDist) naming
// addr:port after `timeout`.
std::shared_ptr<c10d::Store> make_tcp_store(const std::string& addr, int port, int rank,
                                            int world_size, bool host,
                                            std::chrono::milliseconds timeout);

// `store` with every key under `prefix` (c10d::PrefixStore): one attempt's keys apart from an
// earlier attempt's in a store that outlives them (torchrun's agent store across restarts).
std::shared_ptr<c10d::Store> make_prefix_store(const std::string& prefix,
                                               const std::shared_ptr<c10d::Store>& store);

// A rendezvous store in a file every rank of one host can open (c10d::FileStore): no socket.
std::shared_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                             std::chrono::milliseconds timeout);

// An in-process store for a world of one (DDPX_FORCE_GROUP): no file, no socket.
std::shared_ptr<c10d::Store> make_hash_store();

// A Gloo backend over TCP. `bind_host` is the address this rank's Gloo device binds (127.0.0.1
// for single-node loopback jobs; empty means the interface in GLOO_SOCKET_IFNAME, else this
// host's resolved name).
c10::intrusive_ptr<c10d::Backend> make_gloo_backend(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_host);

// An NCCL (RCCL on ROCm) backend for CUDA tensors; throws ddpx::Error(kUsage) on a build
// without CUDA or where no GPU is visible.
c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout);

// Whether this build has NCCL compiled in and this process sees a GPU.
bool nccl_available();

// Wraps `gloo` so that CPU float all-reduces and broadcasts go through shared memory when every
// rank is on this host. Collective over the store. Null on every rank when the ranks are not on
// one host or shared memory cannot be had: the caller keeps `gloo`.
c10::intrusive_ptr<ShmBackend> make_shm_backend(const std::shared_ptr<c10d::Store>& store,
                                                c10::intrusive_ptr<c10d::Backend> gloo, int rank,
                                                int world_size, std::chrono::milliseconds timeout);

// The job's ProcessGroup: `cpu` for CPU tensors and, when not null, `cuda` for CUDA tensors
// (then also the default, which barrier() uses).
std::shared_ptr<c10d::ProcessGroup> make_process_group(const std::shared_ptr<c10d::Store>& store,
                                                       int rank, int world_size,
                                                       c10::intrusive_ptr<c10d::Backend> cpu,
                                                       c10::intrusive_ptr<c10d::Backend> cuda);

}  // namespace ddpx::dist
