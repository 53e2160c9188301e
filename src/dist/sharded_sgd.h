// Splits an SGD step across the ranks of one host. Each rank updates only the parameters it
// owns (a split balanced by size, the same on every rank) with libtorch's own SGD, then writes
// their new values and momentum buffers straight into every peer's copies, which live in the
// group's shared memory. Every rank ends the step with the parameters and optimizer state of
// an unsharded step, bit for bit, for about half of the optimizer's work per rank (with 2
// ranks): ZeRO-1's saving in compute, with the state kept whole on every rank, so checkpoints,
// --resume and anything reading .grad or the momentum see nothing different.
//
// Use: create it after the checkpoint (if any) is loaded and the model is wrapped in
// DistributedDataParallel, then call step() where optimizer.step() was called; the other
// calls (zero_grad, learning-rate changes, save) go to the optimizer as before.
//
// Contract: create() and step() are collective. create() returns null on every rank when it
// does not apply: no shared-memory group ("gloo+shm"), no room in /dev/shm, an optimizer that
// is not torch::optim::SGD, dampening other than 0, parameters that are not float32/64, or
// DDPX_SHARDED_STEP=0 in the environment.
// step() throws ddpx::Error(kUsage) when a parameter or momentum buffer was replaced since
// create() (a checkpoint loaded afterwards, set_data): create it again after such a change.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/optim/sgd.h>
#include <torch/types.h>

namespace c10d {
class ProcessGroup;
}

namespace ddpx::dist {

class ProcessGroupShm;
class ShmAllreduce;

class ShardedSgd {
 public:
  static std::unique_ptr<ShardedSgd> create(torch::optim::SGD& sgd,
                                            std::shared_ptr<c10d::ProcessGroup> group);
  void step();

  // Which rank updates params()[i] (in the order of the optimizer's parameter groups).
  const std::vector<int>& owners() const { return owners_; }

 private:
  struct Held {
    torch::Tensor param;     // the optimizer's parameter, its data now in the arena
    torch::Tensor momentum;  // its momentum buffer in the arena, or undefined (momentum 0)
    int owner = 0;
  };
  ShardedSgd(torch::optim::SGD& sgd, std::shared_ptr<c10d::ProcessGroup> group,
             ProcessGroupShm& shm, std::vector<Held> held, std::vector<int64_t> offsets);
  void check_unchanged() const;
  void step_on_comm_thread(ShmAllreduce& shm);

  torch::optim::SGD& sgd_;
  std::shared_ptr<c10d::ProcessGroup> group_;  // keeps `shm_` alive
  ProcessGroupShm& shm_;
  std::vector<Held> held_;
  std::vector<int> owners_;
  std::vector<const void*> data_;  // where each param and momentum buffer was put
  // offsets_[(r * n + i) * 2 + k]: where rank r keeps param i (k 0) / its momentum (k 1),
  // from the start of rank r's arena; -1 for no momentum buffer.
  std::vector<int64_t> offsets_;
};

}  // namespace ddpx::dist
