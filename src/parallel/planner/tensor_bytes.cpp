// Counting CPU tensor bytes at the allocator (see tensor_bytes.h).
#include "parallel/planner/tensor_bytes.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace ddpx::parallel {
namespace {

// Wraps the allocator that was current when it was installed, keeping each allocation's size by
// its address. Allocations stay "simple" (data pointer = context, one raw deleter), as libtorch's
// raw_allocate() callers need: the deleter looks the size up, subtracts it and hands the pointer
// to the inner allocator's raw deleter.
class CountingAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::DataPtr inner = base_->allocate(n);
    void* data = inner.get();
    const c10::Device device = inner.device();
    DDPX_CHECK(inner.get_context() == data && inner.get_deleter() == base_deleter_,
               ErrorKind::kInternal, "CpuTensorBytes: libtorch's CPU allocator is not simple");
    inner.release_context();
    if (data != nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      sizes_[data] = {n, thread_tag};
      current_ += static_cast<int64_t>(n);
      peak_ = std::max(peak_, current_);
      if (thread_tag >= 0) {
        Count& c = tags_[thread_tag];
        c.current += static_cast<int64_t>(n);
        c.peak = std::max(c.peak, c.current);
      }
    }
    return {data, data, &CountingAllocator::release, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::release; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }

  bool set_base(c10::Allocator* base) {
    base_ = base;
    base_deleter_ = base->raw_deleter();
    return base_deleter_ != nullptr;
  }
  int64_t current() {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  int64_t peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
    for (auto& [tag, c] : tags_) c.peak = c.current;
  }
  int64_t tag_current(int tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    return tags_[tag].current;
  }
  int64_t tag_peak(int tag) {
    std::lock_guard<std::mutex> lock(mutex_);
    return tags_[tag].peak;
  }

  void add(int64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
  }

  static thread_local int thread_tag;

 private:
  static void release(void* ptr);

  c10::Allocator* base_ = nullptr;
  c10::DeleterFnPtr base_deleter_ = nullptr;
  struct Count {
    int64_t current = 0, peak = 0;
  };
  struct Allocation {
    size_t bytes = 0;
    int tag = -1;
  };
  std::mutex mutex_;
  std::unordered_map<void*, Allocation> sizes_;
  std::unordered_map<int, Count> tags_;
  int64_t current_ = 0;
  int64_t peak_ = 0;
};

thread_local int CountingAllocator::thread_tag = -1;

// Never destroyed: storages allocated through it may outlive any scope.
CountingAllocator& counting() {
  static auto* allocator = new CountingAllocator();
  return *allocator;
}

void CountingAllocator::release(void* ptr) {
  if (ptr == nullptr) return;
  CountingAllocator& self = counting();
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    const auto it = self.sizes_.find(ptr);
    if (it != self.sizes_.end()) {
      self.current_ -= static_cast<int64_t>(it->second.bytes);
      if (it->second.tag >= 0) self.tags_[it->second.tag].current -= it->second.bytes;
      self.sizes_.erase(it);
    }
  }
  self.base_deleter_(ptr);
}

bool installed = false;
constexpr uint8_t kPriority = 255;  // above the default CPU allocator's registration

}  // namespace

CpuTensorBytes::CpuTensorBytes() {
  DDPX_CHECK(!installed, ErrorKind::kInternal, "CpuTensorBytes: one counter at a time");
  previous_ = c10::GetCPUAllocator();
  DDPX_CHECK(counting().set_base(previous_), ErrorKind::kInternal,
             "CpuTensorBytes: libtorch's CPU allocator has no raw deleter");
  c10::SetCPUAllocator(&counting(), kPriority);
  DDPX_CHECK(c10::GetCPUAllocator() == &counting(), ErrorKind::kInternal,
             "CpuTensorBytes: libtorch kept its CPU allocator");
  installed = true;
  counting().reset_peak();
}

CpuTensorBytes::~CpuTensorBytes() {
  c10::SetCPUAllocator(previous_, kPriority);
  installed = false;
}

int64_t CpuTensorBytes::current() const { return counting().current(); }
int64_t CpuTensorBytes::peak() const { return counting().peak(); }
void CpuTensorBytes::reset_peak() { counting().reset_peak(); }
int64_t CpuTensorBytes::tag_current(int tag) const { return counting().tag_current(tag); }
int64_t CpuTensorBytes::tag_peak(int tag) const { return counting().tag_peak(tag); }
void CpuTensorBytes::tag_thread(int tag) { CountingAllocator::thread_tag = tag; }

void CpuTensorBytes::count_outside(int64_t bytes) { counting().add(bytes); }

}  // namespace ddpx::parallel
