// An always-on record of one rank's recent collectives: a ring of the last kRing entries
// (sequence number, op, dtype, shape, the group it ran in, start and end time, state), kept in a
// small file mapped into memory when the job has a trace folder (DDPX_TRACE_DIR, set by `ddpx
// run`), else in process memory.
//
// Why a mapped file: recording costs a few stores and a clock read per collective (no system
// call, no store or network traffic), yet any process on the host can read the ring at any
// time, also when the rank is SIGSTOPped, hung inside a collective or dead. The rank that times
// out and the launcher read every rank's file to say who is behind (collective_report.h).
//
// Threads: begin() and end() may be called from any thread; readers in other processes may see
// a record being rewritten and skip it (each record is checked by its sequence number before
// and after the copy). Lives in trace/, torch-free, because both distributed/ (writes) and launch/
// (reads) use it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddpx::trace {

// Records kept per rank: a step of a 3-D layout with sequence parallelism, recomputed blocks and
// 4 micro-batches records over 100 (its tensor group's), and a hang's verdict wants the step.
constexpr int kRing = 256;
constexpr int kMaxDims = 6;  // shape dims recorded; more are summarised by numel

enum class State : uint32_t { kEmpty = 0, kPending = 1, kDone = 2, kFailed = 3 };

// What one collective moved: the op ("allreduce"), the first tensor's dtype and shape, and how
// many tensors it had.
struct Signature {
  std::string op;
  std::string dtype;           // "float", "double", "long", ...
  std::vector<int64_t> shape;  // of the first tensor
  int64_t tensors = 1;
  std::string text() const;  // "allreduce float[1024]", "allgather long[2] x2"
  // The logical bytes it moved: the first tensor's (shape times the dtype's size) times
  // `tensors`; 0 for a dtype not named here. For allgather_into_tensor and
  // reduce_scatter_tensor that is the whole gathered or scattered tensor.
  int64_t bytes() const;
  bool operator==(const Signature& o) const {
    return op == o.op && dtype == o.dtype && shape == o.shape && tensors == o.tensors;
  }
};

// A copy of one record, as read back.
struct Entry {
  uint64_t seq = 0;
  Signature sig;
  // The sub-group it ran in, by the name it was split under (dist::split_group: "tensor",
  // "pipeline_link_0_activations"); empty for the job's own group. Tells apart, say, a step's
  // data-parallel bytes from its tensor-parallel ones.
  std::string group;
  int64_t start_ns = 0;  // CLOCK_REALTIME, comparable between processes of one host
  int64_t end_ns = 0;    // 0 while pending
  State state = State::kEmpty;
};

// One rank's ring, as read back: entries in sequence order, oldest first.
struct Snapshot {
  int rank = -1;
  int world_size = 0;
  int pid = 0;          // on the rank's own host
  bool remote = false;  // a copy received from a rank on another node (rank<K>.remote)
  std::vector<Entry> entries;
};

// The writer, one per rank (owned by the traced process group).
class CollectiveTrace {
 public:
  // dir empty: an in-memory ring. Else `dir` is created if needed and the ring is the file
  // trace_path(dir, rank); failing to create it falls back to memory (tracing must never stop
  // a job).
  CollectiveTrace(const std::string& dir, int rank, int world_size);
  ~CollectiveTrace();
  CollectiveTrace(const CollectiveTrace&) = delete;
  CollectiveTrace& operator=(const CollectiveTrace&) = delete;

  // Records the start of a collective in `group` (Entry::group) and returns its sequence number
  // (1, 2, ...).
  uint64_t begin(const char* op, const char* dtype, const int64_t* shape, int ndim, int64_t tensors,
                 const char* group = "");
  // Marks collective `seq` done (ok) or failed; a no-op when the ring has moved past it.
  void end(uint64_t seq, bool ok);

  Snapshot snapshot() const;
  const std::string& dir() const { return dir_; }  // empty when in memory
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  // True the first time only: a failure's table is printed once per rank.
  bool claim_report() { return !reported_.exchange(true); }

  // The ring's bytes as they are now: what a rank sends to the other nodes on a failure.
  std::string bytes() const;

  // Multi-node jobs: a function that sends this rank's bytes to the other nodes' ranks and
  // writes theirs into dir() as rank<K>.remote (set by distributed/context). exchange() runs it
  // once.
  using Exchange = std::function<void(const std::string& mine)>;
  void set_exchange(Exchange exchange) { exchange_ = std::move(exchange); }
  void exchange();

  struct File;  // the mapped layout (collective_trace.cpp)

 private:
  std::string dir_;
  int rank_;
  int world_size_;
  std::atomic<bool> reported_{false};
  std::atomic<bool> exchanged_{false};
  Exchange exchange_;
  File* file_ = nullptr;
  bool mapped_ = false;
};

std::string trace_path(const std::string& dir, int rank);  // dir/rank<K>.trace
// Writes another node's rank's bytes (CollectiveTrace::bytes) as dir/rank<K>.remote.
void write_remote_trace(const std::string& dir, int rank, const std::string& bytes);

// Reads rank `rank`'s ring from `dir`; nullopt when the file is missing or not a trace.
std::optional<Snapshot> read_trace(const std::string& dir, int rank);

// Reads every rank<K>.trace in `dir` (ranks 0..world_size-1 when world_size > 0, else every
// file found), in rank order.
std::vector<Snapshot> read_traces(const std::string& dir, int world_size = 0);

}  // namespace ddpx::trace
