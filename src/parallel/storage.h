// Freeing a tensor's memory while the tensor, its shape and everything that refers to it (an
// optimizer, autograd, a module's parameter list) stay as they are: what FSDP does with
// `untyped_storage().resize_(0)`. A ZeRO-3 unit frees its gathered parameters after use; a
// pipeline rank frees the stages it does not run. Reading a freed tensor is an error until it is
// materialized again (and then filled: its old values are gone).
#pragma once

#include <torch/types.h>

#include <cstddef>
#include <vector>

namespace ddpx::parallel {

// Drops the memory of `t`'s storage (every view of it sees none).
void free_storage(const torch::Tensor& t);

// Gives each of `params` a storage of its own, contiguous from its start, where it shares one or
// is a slice of one (libtorch's own parameters own theirs): a clone set under the same tensor,
// so modules, optimizers and autograd still see the same parameter. What a plan that frees and
// refills parameters needs.
void own_storages(const std::vector<torch::Tensor>& params);

// Gives `t`'s storage `nbytes` of fresh, uninitialized memory on its device, unless it already
// holds that many.
void materialize_storage(const torch::Tensor& t, size_t nbytes);

// Moves a freed tensor to `device` without giving it memory: it keeps its identity (set_data),
// shape and strides, and materialize_storage() later allocates it there. A storage it shared is
// its own from then on, as after Module::to().
void move_freed(const torch::Tensor& t, const torch::Device& device);

}  // namespace ddpx::parallel
