// The atoms of the deterministic mode (--deterministic): what makes a step's gradient and
// BatchNorm statistics the same bits on any world size. Two plans run them: the deterministic
// data-parallel plan (deterministic_plan.h), which all-gathers the ranks' sums, and the sharded
// plan (sharded_plan.h), which sends each rank the sums of its shard (ZeRO-1/2/3).
//
// - A rank's batch is cut into atoms of a fixed number of samples; each atom runs its own
//   forward and backward, its dropout drawn from a stream of (seed, step, global atom index).
// - The atoms' gradients are summed in one fixed binary tree (tree_sum(): [0, A) = [0, A/2) +
//   [A/2, A), down to single atoms). With a power-of-two world size and the same number of
//   atoms on every rank, a rank's run of atoms is a whole subtree, so the ranks' sums, summed
//   again by tree_sum() in rank order and divided by the global atom count, are the bits one
//   process gets. Sums are elementwise: a slice of the tree's sum is the tree's sum of the
//   slices, which is what lets a sharded plan sum only its shard.
// - BatchNorm normalizes each atom by the atom's statistics; the running statistics replay the
//   atoms in order (each atom's mean and variance recorded with momentum 1, gathered, folded
//   into the step's starting statistics with the layers' momentum).
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "parallel/plan.h"

namespace ddpx::parallel {

// The sum of `parts` in the fixed binary tree (see above): the same bits for the same parts
// however they were computed.
torch::Tensor tree_sum(const std::vector<torch::Tensor>& parts);

// Throws ddpx::Error(kUsage), before any collective, unless `world_size` is a power of two and
// `atom` at least 1.
void check_atoms(int world_size, int64_t atom);

class Atoms {
 public:
  // `params`: the parameters that train, in the model's order (the flat gradient's layout).
  // Throws kUsage for a BatchNorm whose statistics cannot be replayed (no momentum).
  Atoms(torch::nn::Module& model, std::vector<torch::Tensor> params, int64_t atom, uint64_t seed,
        const std::string& model_name);
  ~Atoms();

  int64_t atom() const { return atom_; }
  int norm_layers() const;

  // This rank's atoms of `batch`, each its own forward and backward (through the batch's
  // contexts), after `zero_grad` clears the parameters' gradients: their gradients' tree sum,
  // flat, fp32, in params' order. Every rank holds as many atoms, rank r's the r-th run of the
  // global batch (the dropout streams are keyed by the global atom and the step's
  // number: the batch's (MicroBatch::step), else the runs counted so far. Fills `result` (every
  // atom's output, their mean loss). Throws kUsage naming `rank` when the batch is not a whole
  // number of atoms.
  torch::Tensor run(torch::nn::AnyModule& model, const MicroBatch& batch, int rank,
                    const std::function<void()>& zero_grad, MicroBatchResult& result);

  // Sets the parameters' gradients from a flat tensor in params' order.
  void set_gradient(const torch::Tensor& flat);

  // The BatchNorm layers' running statistics after the global batch: this rank's atoms'
  // statistics all-gathered over `group` (null: one process) and replayed. Collective where
  // the model has BatchNorm layers.
  void replay_norms(c10d::ProcessGroup* group);

 private:
  struct Norms;

  torch::Tensor subtree(torch::nn::AnyModule& model, const MicroBatch& batch, int64_t lo,
                        int64_t hi, MicroBatchResult& result, std::vector<torch::Tensor>& losses);
  torch::Tensor flat_gradient();

  std::vector<torch::Tensor> params_;
  int64_t atom_;
  uint64_t seed_;
  std::unique_ptr<Norms> norms_;
  // The run under way: the global index of its first atom, its step and the gradients' reset.
  int64_t first_atom_ = 0, step_ = 0;
  int64_t runs_ = 0;  // run() calls so far: the step where the batch does not say it
  const std::function<void()>* zero_grad_ = nullptr;
};

// Every rank's `local` (the same size on each), in rank order: an all-gather over `group`;
// {local} when `group` is null. `what` names it in a timeout's error.
std::vector<torch::Tensor> gather_ranks(c10d::ProcessGroup* group, const torch::Tensor& local,
                                        const char* what);

}  // namespace ddpx::parallel
