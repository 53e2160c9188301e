#include "distributed/shm/shm_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace ddpx::dist {

ShmMapping::~ShmMapping() {
  ::munmap(base, bytes);
  if (fd >= 0) ::close(fd);
}

ShmArena::ShmArena(std::shared_ptr<ShmMapping> mapping, size_t offset, size_t bytes)
    : mapping_(std::move(mapping)), offset_(offset), bytes_(bytes / kAlignment * kAlignment) {
  if (bytes_ > 0) free_.emplace(0, bytes_);
}

torch::Tensor ShmArena::allocate(int64_t numel, c10::ScalarType dtype, bool peers_map_it) {
  const size_t wanted = static_cast<size_t>(numel) * c10::elementSize(dtype);
  const size_t length = std::max<size_t>((wanted + kAlignment - 1) / kAlignment, 1) * kAlignment;
  size_t at = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.begin();
    while (it != free_.end() && it->second < length) ++it;  // first fit
    if (it == free_.end()) return {};
    at = it->first;
    // Reserve the pages now: a full /dev/shm is a fallback here, not a SIGBUS on first touch.
    if (::posix_fallocate(mapping_->fd, static_cast<off_t>(offset_ + at),
                          static_cast<off_t>(length)) != 0)
      return {};
    if (it->second > length) free_.emplace(at + length, it->second - length);
    free_.erase(it);
    in_use_ += length;
  }
  auto self = shared_from_this();
  const Counter counter = counter_.load();
  if (counter != nullptr) counter(static_cast<int64_t>(wanted));
  if (peers_map_it)
    return torch::from_blob(
        mapping_->at(offset_ + at), {numel},
        [self, counter, wanted](void*) {
          if (counter != nullptr) counter(-static_cast<int64_t>(wanted));
        },
        torch::TensorOptions().dtype(dtype));
  return torch::from_blob(
      mapping_->at(offset_ + at), {numel},
      [self, at, length, counter, wanted](void*) {
        if (counter != nullptr) counter(-static_cast<int64_t>(wanted));
        self->release(at, length);
      },
      torch::TensorOptions().dtype(dtype));
}

void ShmArena::release(size_t offset, size_t length) {
  // Free ranges always read as zeros: punched out (pages back to the system), else cleared.
  if (::fallocate(mapping_->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  static_cast<off_t>(offset_ + offset), static_cast<off_t>(length)) != 0)
    std::memset(mapping_->at(offset_ + offset), 0, length);
  std::lock_guard<std::mutex> lock(mutex_);
  in_use_ -= length;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return;
    }
  }
  free_.emplace(offset, length);
}

std::optional<size_t> ShmArena::locate(const void* data, size_t bytes) const {
  const char* begin = mapping_->at(offset_);
  const char* p = static_cast<const char*>(data);
  if (p < begin || p + bytes > begin + bytes_) return std::nullopt;
  return static_cast<size_t>(p - begin);
}

size_t ShmArena::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

}  // namespace ddpx::dist
