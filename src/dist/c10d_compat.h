// The one place where ddpx depends on how c10d's classes are laid out. libtorch 1.13 (Debian
// 12, built and tested here) has ProcessGroupGloo/NCCL deriving from ProcessGroup; libtorch
// 2.x makes them Backends that a ProcessGroup wraps. Everything else in dist/ uses only the
// collectives on c10d::ProcessGroup, which both versions share.
//
// c10d objects are c10::intrusive_ptr-owned; ddpx hands them around as std::shared_ptr whose
// deleter holds the intrusive reference, so c10d's internal intrusive_ptr uses stay valid.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <torch/types.h>

namespace c10d {
class ProcessGroup;
class Store;
}  // namespace c10d

namespace ddpx::trace {
class CollectiveTrace;
}

namespace ddpx::dist {
class ProcessGroupShm;
}

namespace ddpx::dist::compat {

// The rendezvous store: rank 0 hosts it on `port` and waits for `world_size` clients; the
// others connect to addr:port. Throws ddpx::Error(kDist) naming addr:port after `timeout`.
std::shared_ptr<c10d::Store> make_tcp_store(const std::string& addr, int port, int rank,
                                            int world_size, std::chrono::milliseconds timeout);

// A rendezvous store in a file every rank of one host can open (c10d::FileStore): no socket.
std::shared_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                             std::chrono::milliseconds timeout);

// A Gloo process group over TCP. `bind_host` is the address this rank's Gloo device binds
// (127.0.0.1 for single-node loopback jobs; empty means the interface in GLOO_SOCKET_IFNAME,
// else this host's resolved name).
std::shared_ptr<c10d::ProcessGroup> make_gloo_group(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout,
                                                    const std::string& bind_host);

// An NCCL process group; throws ddpx::Error(kUsage) on a libtorch built without CUDA/NCCL.
std::shared_ptr<c10d::ProcessGroup> make_nccl_group(const std::shared_ptr<c10d::Store>& store,
                                                    int rank, int world_size,
                                                    std::chrono::milliseconds timeout);

bool nccl_available();

// Wraps a Gloo group of ranks that share this host so that CPU float all-reduces go through
// shared memory (ProcessGroupShm). Collective over the store. Returns null on every rank when
// the ranks are not on one host, shared memory cannot be had, or this libtorch's c10d layout
// has no ProcessGroupShm (2.x): the caller keeps the Gloo group.
std::shared_ptr<c10d::ProcessGroup> make_shm_group(const std::shared_ptr<c10d::Store>& store,
                                                   std::shared_ptr<c10d::ProcessGroup> gloo,
                                                   int rank, int world_size,
                                                   std::chrono::milliseconds timeout);

// Wraps `group` so that every collective is recorded in `trace` (TracedProcessGroup). On
// libtorch 2.x, whose ProcessGroup layout that class does not follow, returns `group` as is.
std::shared_ptr<c10d::ProcessGroup> make_traced_group(
    std::shared_ptr<c10d::ProcessGroup> group, std::shared_ptr<trace::CollectiveTrace> trace);

// A zero-filled 1-d tensor for a gradient bucket that `group` all-reduces in place without
// copies: memory in the shared segment of "gloo+shm" (ShmArena). Undefined where the group
// has no such memory (other backends, libtorch 2.x), /dev/shm is full, or `dtype` is not
// float32/float64; the caller then allocates ordinary memory.
torch::Tensor allocate_bucket(c10d::ProcessGroup& group, int64_t numel, c10::ScalarType dtype);

// The shared-memory group inside `group` (under the recording wrapper), or null (other
// backends, libtorch 2.x).
ProcessGroupShm* shm_group(c10d::ProcessGroup& group);

// Whether `group` all-reduces `dtype` tensors with ReduceOp::AVG, averaging in the pass that
// sums ("gloo+shm" for float32/float64). The same answer on every rank of a group.
bool supports_average(c10d::ProcessGroup& group, c10::ScalarType dtype);

// Whether the group's backend can all-reduce bfloat16 tensors (Gloo in 1.13 cannot).
bool supports_bf16_allreduce(const c10d::ProcessGroup& group);

std::string backend_name(const c10d::ProcessGroup& group);

}  // namespace ddpx::dist::compat
