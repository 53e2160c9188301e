// The deterministic plan (--deterministic, plan.h): data parallelism whose weights are bitwise
// the same for one seed and one global batch on 1, 2, 4, ... processes.
//
// What differs between world sizes in ordinary data parallelism is the order of the sums: a
// rank's backward sums its local batch inside the kernels (a batch of 64 is not two of 32), and
// the all-reduce sums the ranks in the order of its ring or tree. Here neither depends on the
// world size:
// (atoms.h holds the atoms, which the sharded plan runs too.)
// - The global batch is cut into atoms of a fixed number of samples (--deterministic_atom), the
//   same on any world size; the sampler gives each rank a contiguous run of atoms (data/
//   sampler.h's block) and the loader augments each sample from its own stream. Every atom's
//   forward and backward runs alone, its dropout drawn from a stream of (seed, step, atom).
// - The atoms' gradients are summed in one fixed binary tree over the global batch's atoms
//   (halving: [0, A) = [0, A/2) + [A/2, A), down to single atoms). With a power-of-two world
//   size dividing the atom count, each rank's run is a whole subtree: a rank sums its own, the
//   ranks' sums are all-gathered (fp32, in rank order) and every rank adds them up the rest of
//   the tree, then divides by A. Every rank gets the same bits, and so does one process.
// - BatchNorm normalizes each atom by the atom's statistics (ghost batches of the atom's size,
//   on any world size; so --sync_bn is not needed and refused). The running statistics replay
//   the atoms in order: each atom's mean and variance are recorded (the layers run with
//   momentum 1 for it), all-gathered, and folded into the step's starting statistics, atom
//   after atom, with the layers' momentum.
// - Intra-op threads are fixed by the caller (--threads, else 1): a kernel may split a
//   reduction by thread count. On a GPU the caller also turns on PyTorch's deterministic
//   algorithms.
// The cost: atoms of a few samples run below a kernel's best batch size, and the all-gather
// sends world_size x the gradient a rank (a ring all-reduce sends about 2x). Gradient
// accumulation and hooks are refused (train/options.cpp); clipping, AMP, EMA and checkpoints
// work as in the data-parallel plan, whose state this plan saves and loads. With --shard the
// sharded plan runs the same atoms (sharded_plan.h) and ends with the same bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/data/atoms.h"
#include "parallel/plan.h"

namespace ddpx::dist {
class Context;
}

namespace ddpx::parallel {

struct DeterministicOptions {
  int64_t atom = 8;        // samples an atom
  uint64_t seed = 0;       // the dropout streams' seed (--seed)
  std::string model_name;  // for errors
};

class DeterministicPlan : public Plan {
 public:
  // Throws ddpx::Error(kUsage), before any collective, where the world size is not a power of
  // two. `context` must outlive the plan.
  DeterministicPlan(torch::nn::AnyModule model, dist::Context& context,
                    const OptimizerFactory& make_optimizer, DeterministicOptions options);
  ~DeterministicPlan() override;

  std::string describe() override;
  MicroBatchResult forward_backward(const MicroBatch& batch, bool sync) override;
  torch::Tensor clip_grad_norm(double max_norm) override;
  void step() override;
  void zero_grad() override;
  std::vector<torch::Tensor> parameters() override;
  void state_dict(torch::serialize::OutputArchive& model,
                  torch::serialize::OutputArchive& optimizer) override;
  void load_state_dict(torch::serialize::InputArchive& model,
                       torch::serialize::InputArchive& optimizer) override;
  torch::nn::AnyModule& module() override { return model_; }
  std::vector<HeldTensor> held_tensors() override;  // the whole model's
  const OptimizerFactory& optimizer_factory() const override { return make_optimizer_; }

  int norm_layers() const;

 private:
  void broadcast_once();  // rank 0's weights and buffers, at the first call after construction

  torch::nn::AnyModule model_;
  dist::Context& context_;
  DeterministicOptions options_;
  OptimizerFactory make_optimizer_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<Atoms> atoms_;
  bool broadcast_ = false;
};

}  // namespace ddpx::parallel
