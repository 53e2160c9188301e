// Freeing and restoring a tensor's storage (see storage.h).
#include "parallel/storage.h"

#include <c10/core/DeviceGuard.h>

#include <set>

namespace ddpx::parallel {

void free_storage(const torch::Tensor& t) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, t.device()));
  storage->set_nbytes(0);
}

void own_storages(const std::vector<torch::Tensor>& params) {
  std::set<const void*> seen;
  for (auto p : params) {
    const bool owns = p.is_contiguous() && p.storage_offset() == 0 &&
                      p.storage().nbytes() == static_cast<size_t>(p.numel()) * p.element_size() &&
                      seen.insert(p.storage().unsafeGetStorageImpl()).second;
    if (owns) continue;
    torch::NoGradGuard no_grad;
    p.set_data(p.detach().clone(at::MemoryFormat::Contiguous));
    seen.insert(p.storage().unsafeGetStorageImpl());
  }
}

void materialize_storage(const torch::Tensor& t, size_t nbytes) {
  auto* storage = t.storage().unsafeGetStorageImpl();
  if (storage->data() != nullptr && storage->nbytes() == nbytes) return;
  c10::DeviceGuard device(t.device());
  at::Allocator* allocator = storage->allocator();
  if (allocator == nullptr) allocator = c10::GetAllocator(t.device().type());
  storage->set_data_ptr_noswap(allocator->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

void move_freed(const torch::Tensor& t, const torch::Device& device) {
  if (t.device() == device) return;
  torch::NoGradGuard no_grad;
  torch::Tensor moved = torch::empty({0}, t.options().device(device));  // a storage of 0 bytes
  moved.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides());
  moved.unsafeGetTensorImpl()->set_storage_offset(t.storage_offset());
  t.set_data(moved);
}

}  // namespace ddpx::parallel
