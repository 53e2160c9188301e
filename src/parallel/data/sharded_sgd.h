// Splits an SGD step across the ranks of a group whose transport lets ranks share memory
// (dist::PeerMemory: ranks on one host). Every parameter and its momentum buffer live once, in
// the memory published by the rank that owns them (a split balanced by size, the same on every
// rank), and every rank's model and optimizer use that one copy. Each rank
// updates only what it owns, in one fused pass (sgd_kernel.h, libtorch's SGD bit for bit),
// between two barriers. So every rank ends the step with the parameters and optimizer state of
// an unsharded step, bit for bit, for half of the optimizer's work and memory traffic per rank
// (with 2 ranks) and one copy of the weights and momentum per host instead of one per rank:
// ZeRO-1's savings, with the state whole on every rank, so checkpoints, --resume and anything
// reading .grad or the momentum see nothing different.
//
// That memory stays until the group is gone (a peer may still read it after this rank lets go);
// it is not freed with the optimizer.
//
// Use: create it after the checkpoint (if any) is loaded and the model is wrapped in
// DistributedDataParallel, then call step() where optimizer.step() was called; the other
// calls (zero_grad, learning-rate changes, save) go to the optimizer as before. Never call the
// optimizer's own step() afterwards: every rank would update the shared copy.
//
// Contract: create() and step() are collective. create() returns null on every rank when it
// does not apply: no peer memory (Context::peer_memory()), no room in it, an optimizer
// that is not torch::optim::SGD, dampening other than 0, parameters that are not float32/64, or
// DDPX_SHARDED_STEP=0 in the environment.
// step() throws ddpx::Error(kUsage) when a parameter or momentum buffer was replaced since
// create() (a checkpoint loaded afterwards, set_data): create it again after such a change.
#pragma once

#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "optim/sgd_kernel.h"

namespace c10d {
class ProcessGroup;
class Work;
}  // namespace c10d

namespace ddpx::dist {
class PeerMemory;
class PeerSteps;
}  // namespace ddpx::dist

namespace ddpx::parallel {

class DistributedDataParallel;

class ShardedSgd {
 public:
  // `memory` is the group's peer memory (Context::peer_memory()), or null.
  static std::unique_ptr<ShardedSgd> create(torch::optim::SGD& sgd,
                                            std::shared_ptr<c10d::ProcessGroup> group,
                                            dist::PeerMemory* memory);
  void step();

  // Moves the step into backward: from the next synchronised backward through `ddp` on, each
  // full gradient bucket is averaged and stepped in one pass (PeerSteps::reduce_apply,
  // sgd_update_mean), rank r taking part r of every bucket, while backward goes on with the
  // rest of the model. When backward() returns, the parameters and momentum are those of
  // averaging and then stepping, bit for bit with two ranks, and step() only checks that that
  // backward synchronised. But .grad then holds this rank's own gradient, not the average: use
  // it only where the step follows backward directly (no clipping or scaling in between), and
  // set the learning rate before backward. It also assumes backward reads no parameter after
  // that parameter's gradient is complete (true unless a parameter is used detached).
  // Collective; returns false on every rank, changing nothing, when a parameter of `ddp` is not
  // one of this optimizer's, or DDPX_STEP_IN_BACKWARD=0. Keep this object alive while `ddp`
  // runs backward.
  bool step_in_backward(DistributedDataParallel& ddp);
  bool in_backward() const { return in_backward_; }

  // Which rank keeps params()[i] (in the order of the optimizer's parameter groups), and
  // updates it when the step is not in backward.
  const std::vector<int>& owners() const { return owners_; }

 private:
  struct Held {
    torch::Tensor param;     // the optimizer's parameter, its data now in its owner's memory
    torch::Tensor momentum;  // its momentum buffer there too, or undefined (momentum 0)
    int owner = 0;
    size_t group = 0;  // its parameter group in the optimizer
  };
  ShardedSgd(torch::optim::SGD& sgd, std::shared_ptr<c10d::ProcessGroup> group,
             dist::PeerMemory& memory, std::vector<Held> held);
  struct Piece {         // one parameter's slice of a gradient bucket
    size_t held = 0;     // index into held_
    int64_t offset = 0;  // where its gradient starts in the bucket (elements)
    int64_t numel = 0;
  };
  void check_unchanged() const;
  // Elements [lo, lo + n) of a bucket laid out as `pieces`: averaged gradient -> step.
  void apply(const std::vector<Piece>& pieces, int64_t lo, int64_t n,
             const std::vector<const void*>& sources);
  void step_on_comm_thread(dist::PeerSteps& steps);
  // `op` on the transport's thread, recorded in the collective record as `name` with `tensor`'s
  // signature (undefined: none) when the group has one, as its other collectives are.
  c10::intrusive_ptr<c10d::Work> submit(const char* name, const torch::Tensor& tensor,
                                        std::function<void(dist::PeerSteps&)> op);
  void step_owned();  // the parameters this rank owns (the step after backward)
  optim::SgdHyper hyper(const Held& h) const;  // its group's settings now (the lr may have changed)

  torch::optim::SGD& sgd_;
  std::shared_ptr<c10d::ProcessGroup> group_;  // keeps `memory_` alive
  dist::PeerMemory& memory_;
  std::vector<Held> held_;
  std::vector<int> owners_;
  std::vector<const void*> data_;  // where each param and momentum buffer was put
  bool in_backward_ = false;
  std::atomic<int64_t> buckets_applied_{0};  // since the last step()
};

}  // namespace ddpx::parallel
