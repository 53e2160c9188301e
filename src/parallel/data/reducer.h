// ddpx's gradient reducer, modelled on c10d's Reducer: parameters are packed into buckets
// (reverse registration order first, then the order gradients really became ready), each
// bucket one flat contiguous buffer whose slices *are* the parameters' .grad tensors. A post
// hook on every parameter's gradient accumulator counts the bucket down; a full bucket is
// all-reduced asynchronously, in bucket order on every rank (collectives must match across
// ranks), and averaged: by the group in the pass that sums where it can (ReduceOp::AVG; where
// the group's transport offers it, the buffer also lives in memory the ranks publish to each
// other, DdpOptions::buckets, and is reduced there without a copy), else by dividing before a
// sum. An autograd-engine callback queued by the first hook of a backward waits for all buckets
// before backward() returns.
//
// A caller that runs several backwards per synchronization (a pipeline stage: one a micro-batch)
// arms the hooks for its last backward only and finishes the synchronization itself
// (begin_iteration, arm_next_backward, finish): the buckets launch during that backward, and
// nothing waits at its end, so the reduction overlaps whatever the caller runs next.
//
// Not thread-safe against concurrent backward passes through the same model; a reducer
// belongs to one DistributedDataParallel and dies with it (its hooks are removed).
#pragma once

#include <torch/csrc/autograd/function.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "parallel/data/ddp.h"
#include "parallel/gradient_sync.h"

namespace ddpx::parallel {

// Which parameters go together: lists of parameter indices, in launch order. `order` is the
// order in which gradients are expected to become ready; the first bucket of each dtype holds
// at most about first_cap bytes, later ones about cap bytes (a bucket closes once it reaches
// its cap, so one big parameter makes one bucket).
std::vector<std::vector<size_t>> assign_buckets(const std::vector<torch::Tensor>& params,
                                                const std::vector<size_t>& order, int64_t first_cap,
                                                int64_t cap);

class Reducer : public GradientSync {
 public:
  // `params` are the parameters that require grad, `names` their names for error messages.
  Reducer(std::vector<torch::Tensor> params, std::vector<std::string> names,
          std::shared_ptr<c10d::ProcessGroup> group, DdpOptions options);
  ~Reducer() override;
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Called before every forward: rebuilds the buckets once after the first synchronized
  // backward (collective: all ranks together), points every .grad back at its bucket view
  // (zero_grad(set_to_none) or the user may have replaced it), and arms the hooks when the
  // coming backward should synchronize.
  void prepare_for_forward(bool require_sync);

  // Synchronization finished by the caller. begin_iteration() before the first backward of a
  // step: as prepare_for_forward (the rebuild, collective, when `require_sync`), the hooks
  // disarmed, so backwards accumulate into the buckets without communicating.
  // arm_next_backward() before the step's last backward: its hooks launch the buckets as they
  // fill, and no engine callback waits at its end. finish() launches the buckets that backward
  // left (parameters it gave no gradient count as their accumulated .grad, zero if none) and
  // waits for every one: each .grad then holds the average over the group. Call it on every
  // rank of the group, after the armed backward, before the gradients are read.
  void begin_iteration(bool require_sync) override;
  void arm_next_backward() override;
  void finish() override;
  // Buckets launched since the last begin_iteration or prepare_for_forward (in launch order: a
  // count below bucket_layout().size() means the rest are still to come).
  size_t buckets_launched() const;
  size_t launches() const override { return bucket_layout().size(); }
  size_t launched() const override { return buckets_launched(); }

  void set_comm_hook(CommHookFn hook);

  // Parameter indices per bucket, in launch order.
  std::vector<std::vector<size_t>> bucket_layout() const;

 private:
  struct Bucket {
    torch::Tensor buffer;              // flat, contiguous, one dtype
    std::vector<size_t> params;        // indices into params_
    std::vector<torch::Tensor> views;  // views[k] is params_[params[k]].grad
    size_t pending = 0;                // gradients not yet ready in this backward
    bool average = false;              // all-reduced with ReduceOp::AVG (no division pass)
    torch::Tensor comm;                // what is all-reduced: buffer or a compressed copy
    c10::intrusive_ptr<c10d::Work> work;
  };
  struct Slot {
    size_t bucket = 0;
    size_t index = 0;  // position within the bucket
  };

  void build_buckets(const std::vector<size_t>& order);
  torch::Tensor view_of(size_t param) const;
  void install_grad(size_t param);  // makes params_[param].grad the bucket view
  void on_grad_ready(size_t param);
  void mark_ready_locked(size_t param);
  void launch(Bucket& bucket);
  void finalize();
  void reset_iteration();
  void rebuild_from_ready_order();

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<c10d::ProcessGroup> group_;
  DdpOptions options_;
  CommHookFn hook_;  // replaces the built-in reduction when set

  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keeps hooks alive
  std::vector<uintptr_t> hook_keys_;

  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;

  mutable std::mutex mutex_;
  bool expect_hooks_ = false;
  bool callback_queued_ = false;
  bool waits_at_backward_end_ = true;  // false: armed by arm_next_backward, finished by finish()
  std::vector<bool> ready_;
  size_t next_bucket_ = 0;
  std::vector<size_t> ready_order_;  // recorded during the first synchronized backward
  bool rebuilt_ = false;
  bool rebuild_due_ = false;
};

}  // namespace ddpx::parallel
