// Communication buffers a sharded plan reuses (see scratch_pool.h).
#include "parallel/sharded/scratch_pool.h"

#include "core/error.h"

namespace ddpx::parallel {

torch::Tensor ScratchPool::make(int64_t nbytes) const {
  if (allocate_) {
    // Peer memory hands out float32 tensors that the group reduces in place; viewed as bytes.
    auto t = allocate_((nbytes + 3) / 4, c10::kFloat);
    if (t.defined()) return t.view(torch::kByte).narrow(0, 0, nbytes);
  }
  return torch::empty({nbytes}, torch::kByte);
}

torch::Tensor ScratchPool::acquire(int64_t numel, c10::ScalarType dtype, c10::Device device) {
  if (!device.is_cpu()) return torch::empty({numel}, torch::TensorOptions(dtype).device(device));
  const int64_t size = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t nbytes = numel * size;
  Buffer* pick = nullptr;  // the smallest idle buffer that fits, else the largest idle one
  for (auto& b : buffers_) {
    if (b.busy) continue;
    const int64_t have = b.bytes.numel();
    if (pick == nullptr) {
      pick = &b;
      continue;
    }
    const int64_t best = pick->bytes.numel();
    const bool fits = have >= nbytes, best_fits = best >= nbytes;
    if ((fits && (!best_fits || have < best)) || (!fits && !best_fits && have > best)) pick = &b;
  }
  if (pick == nullptr) {
    buffers_.push_back(Buffer{});
    pick = &buffers_.back();
  }
  if (!pick->bytes.defined() || pick->bytes.numel() < nbytes) {
    pick->bytes = torch::Tensor();  // give the old memory back first
    pick->bytes = make(nbytes);
  }
  pick->busy = true;
  return pick->bytes.narrow(0, 0, nbytes).view(dtype);
}

void ScratchPool::release(const torch::Tensor& tensor) {
  if (!tensor.defined() || !tensor.device().is_cpu()) return;
  for (auto& b : buffers_) {
    if (b.busy && b.bytes.data_ptr() == tensor.data_ptr()) {
      b.busy = false;
      return;
    }
  }
  DDPX_CHECK(false, ErrorKind::kInternal, "a scratch buffer given back twice, or not the pool's");
}

int64_t ScratchPool::bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.bytes.defined() ? b.bytes.numel() : 0;
  return n;
}

}  // namespace ddpx::parallel
