// One unit of a sharded plan: a group of the model's parameters that are gathered, released
// and reduced together (a ResNet block, a ViT encoder block, a submodule a user names, or the
// root's own parameters), FSDP2's "FSDPParamGroup".
//
// The unit owns this rank's shards of its parameters, laid one after another in one flat
// buffer (shard_layout.h), and the flat buffer of their averaged gradients. A resident unit
// (ZeRO-1/2 where the group has peer memory, see the constructor) has no flat buffer: its
// parameters lie padded, one after another, in one buffer the ranks publish to each other, and
// each shard is this rank's rows of its parameter there, so a step updates the parameters' own rows
// and a gather copies only the peers' rows. The shards are the tensors the optimizer steps (leaves,
// requires_grad, each of shape (rows_per_rank, rest...)); their .grad() are slices of the gradient
// buffer after a synchronized backward.
//
// The model's own parameter tensors stay registered in the model, with their shapes, names and
// autograd identity; only their memory comes and goes. release() frees a parameter's storage
// (its bytes go back to the allocator; sizes and autograd's references stay), gather()
// re-allocates it and fills it from every rank's shards by one all-gather. Writes go through an
// alias of each storage with a version counter of its own, so autograd's saved-tensor checks
// never see a gathered parameter as modified in place: a parameter released after forward and
// gathered again before backward is the tensor autograd saved.
//
// Not thread-safe; every call that communicates is collective over the plan's group and must
// be made in the same order on every rank.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <vector>

#include "parallel/sharded/scratch_pool.h"
#include "parallel/sharded/shard_layout.h"
#include "parallel/sharded/shard_mode.h"

namespace ddpx::dist {
class PeerMemory;
}

namespace ddpx::parallel {

class ShardUnit {
 public:
  // `params`: the model's parameters of this unit (contiguous, storage of their own; the plan
  // makes them so), `names` their names in the model. `place`, if given, allocates the flat
  // shard buffer (CPU only): the group's peer memory (dist::PeerMemory), from which peers'
  // all-gathers read it in place. `scratch`, if given, lends the collectives' buffers (it must
  // outlive the unit). `resident`, with `place`: lay the parameters themselves there, padded (each
  // a view of that buffer from then on, set_data), the shards being this rank's rows of them; only
  // for units never released (ZeRO-1/2) whose gathers stay in full precision. Where `place` has no
  // room, the unit is laid out as without it.
  ShardUnit(std::string name, std::vector<torch::Tensor> params, std::vector<std::string> names,
            int rank, int world_size, const ScratchPool::Allocate& place = {},
            ScratchPool* scratch = nullptr, bool resident = false);

  const std::string& name() const { return name_; }
  const std::vector<torch::Tensor>& params() const { return params_; }
  const std::vector<std::string>& param_names() const { return names_; }
  const std::vector<torch::Tensor>& shards() const { return shards_; }
  const std::vector<ShardShape>& shapes() const { return shapes_; }
  // Elements of this rank's flat shard buffer (padding included): one rank's share of a gather.
  int64_t shard_numel() const { return total_; }
  int64_t param_bytes() const;  // the unit's parameters, unpadded, whole
  // The memory the parameters hold while gathered: param_bytes(), or a resident unit's whole
  // buffer (every rank's rows, padded).
  int64_t held_bytes() const;
  bool gathered() const { return gathered_; }
  bool resident() const { return resident_; }

  // Sets this rank's shards from the parameters as they are now (construction, load).
  void shard_from_params();
  // A parameter given another storage (libtorch's Module::load swaps it in with set_()) gets
  // its values copied back into the storage the unit manages, and that storage again.
  void restore_storage();

  // Starts the all-gather of the shards (prefetch); finish_gather() waits and fills the
  // parameters. gather() is both. A gathered unit is left as it is, unless `full_precision` asks
  // for the shards' own dtype and it was gathered in a lower one (set_gather_dtype()).
  void start_gather(c10d::ProcessGroup& group, bool full_precision = false);
  void finish_gather();
  void gather(c10d::ProcessGroup& group);
  bool gather_pending() const { return gather_work_ != nullptr; }

  // Low-precision all-gathers (FSDP's param_dtype): the shards (fp32, what the optimizer steps)
  // travel as `dtype`, half the bytes for bf16 and fp16, and the parameters hold the values
  // rounded to it until a full-precision gather (checkpoints, module()). Floating units only.
  void set_gather_dtype(c10::ScalarType dtype);
  c10::ScalarType gather_dtype() const { return gather_dtype_; }

  // Whether this rank's flat shard buffer (a resident unit: its parameters' buffer) lies in
  // `memory` (see the constructor's `place`).
  bool shards_in(const dist::PeerMemory& memory) const;
  // From now on, full-precision gathers go through `memory` as gather-and-apply
  // (dist::PeerSteps::gather_apply): each rank copies every rank's shards from where they lie
  // straight into its parameters, with no gathered buffer in between, recorded as the
  // all-gather it stands for. Every rank must call it alike (the plan decides collectively),
  // and only when shards_in(memory) holds on every rank.
  void gather_in_place(dist::PeerMemory* memory) { in_place_ = memory; }

  // Frees the parameters' storage (nothing is communicated).
  void release();
  // The shards changed (a step): the parameters, still allocated, are out of date until the
  // next gather() refills them.
  void mark_stale() { gathered_ = false; }

  // Starts the reduce-scatter of the parameters' gradients (a parameter without one counts as
  // zeros); `free_full` drops the parameters' whole gradients once copied into the collective's
  // input (ZeRO-2/3). finish_reduce() waits, frees the input, averages over the ranks, and points
  // each shard's .grad() at its slice. `group_averages`: the group reduces with ReduceOp::AVG
  // (dist::BucketPolicy::averages), averaging in the pass that sums; else SUM, then a division.
  void start_reduce(c10d::ProcessGroup& group, bool free_full, bool group_averages = false);
  void finish_reduce();
  bool reduce_pending() const { return reduce_work_ != nullptr; }

  // The deterministic mode's reduce (parallel/data/atoms.h), synchronous: every rank's
  // gradients are this rank's sum of its atoms; each rank is sent every rank's rows of its shard
  // (an all-to-all), sums them in the atoms' tree, in rank order, and divides by `atoms` (the
  // global batch's), so its shard holds the bits of the same slice of the deterministic
  // data-parallel plan's gradient. `free_full` as start_reduce().
  void reduce_in_tree(c10d::ProcessGroup& group, int64_t atoms, bool free_full);

  // Every rank's shards of `local` (one tensor per parameter, each of its shard's shape) put
  // back together into tensors of the parameters' shapes. Collective.
  std::vector<torch::Tensor> gather_full(c10d::ProcessGroup& group,
                                         const std::vector<torch::Tensor>& local);

 private:
  // The parameters' gradients (zeros for none) as the world_ rows of a reduce-scatter's input,
  // row q rank q's shards' layout.
  // `into`: world_ * shard_numel() elements to write them to (undefined: allocated).
  torch::Tensor pack_gradients(bool free_full, torch::Tensor into = {});
  torch::Tensor scratch(int64_t numel, c10::ScalarType dtype);
  void give_back(torch::Tensor& buffer);
  void materialize(size_t i);
  void start_gather_in_place(c10d::ProcessGroup& group);
  // What peers read in place: the flat shard buffer, or a resident unit's parameters' buffer.
  const torch::Tensor& published() const { return resident_ ? storage_ : flat_; }
  // This rank's shards as one contiguous buffer in `dtype` (a resident unit packs a copy).
  torch::Tensor local_flat(c10::ScalarType dtype) const;
  // Where parameter i's padded rows start in a resident unit's buffer, in elements.
  int64_t resident_offset(size_t i) const { return world_ * offsets_[i]; }
  void copy_out(const torch::Tensor& gathered);

  std::string name_;
  int rank_, world_;
  std::vector<torch::Tensor> params_, aliases_;  // aliases_: same storage, own version counter
  std::vector<std::string> names_;
  std::vector<ShardShape> shapes_;
  std::vector<int64_t> offsets_;  // each parameter's start in the flat buffers
  std::vector<size_t> nbytes_;    // each parameter's storage size when gathered
  torch::Tensor flat_;            // this rank's shards, one after another (not resident)
  torch::Tensor storage_;         // resident: every parameter's padded rows, in peer memory
  bool resident_ = false;
  int64_t total_ = 0;        // elements of one rank's shards, padding included
  c10::ScalarType dtype_;    // the parameters' (and shards') dtype
  torch::Tensor grad_flat_;  // their averaged gradients
  std::vector<torch::Tensor> shards_, shard_grads_;
  bool gathered_ = true;          // the parameters hold their values (at construction they do)
  bool gathered_full_ = true;     // ... in the shards' own precision
  c10::ScalarType gather_dtype_;  // what all-gathers send (flat_'s by default)
  bool pending_full_ = true;      // the gather under way is in full precision
  bool reduce_averaged_ = false;  // the reduce under way averages (no division afterwards)
  ScratchPool* scratch_ = nullptr;
  dist::PeerMemory* in_place_ = nullptr;  // gather_in_place()

  torch::Tensor gather_buffer_, gather_input_, reduce_input_;
  c10::intrusive_ptr<c10d::Work> gather_work_, reduce_work_;
};

// Whether the units of a plan under `mode` that gathers in `gather_dtype` (Undefined: the
// shards' own) keep their parameters resident (the constructor's `resident`): ZeRO-1/2 in full
// precision where the group has peer memory `memory`, unless DDPX_GATHER_IN_PLACE=0.
bool keeps_resident(ShardMode mode, c10::ScalarType gather_dtype, const dist::PeerMemory* memory);

// Where every rank's `units` lie in `memory` (shards_in), has them gather in place from then
// on (gather_in_place) and returns true. One rank may have lacked room: the ranks agree first,
// so every rank returns alike. Collective over `group` (of `world_size` ranks) unless `memory`
// is null or DDPX_GATHER_IN_PLACE=0 (then false on every rank).
bool gather_in_place_if_shared(std::vector<ShardUnit>& units, c10d::ProcessGroup& group,
                               int world_size, dist::PeerMemory* memory);

}  // namespace ddpx::parallel
