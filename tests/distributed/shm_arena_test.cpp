// ShmArena: tensors in a rank's share of the shared segment. Allocations do not overlap, come
// zero-filled (also after a previous owner wrote into the range), freed ranges merge so that a
// large block fits again, and a request /dev/shm cannot hold is an undefined tensor (the
// reducer then uses ordinary memory), not a SIGBUS later.
#include "distributed/shm/shm_arena.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <string>

namespace ddpx::dist {
namespace {

// A sparse, already unlinked file of `bytes` in /dev/shm, mapped.
std::shared_ptr<ShmMapping> map_segment(size_t bytes) {
  std::string name = "/ddpx-arena-test-" + std::to_string(::getpid());
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  ::shm_unlink(name.c_str());
  void* base = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) == 0)
    base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    ::close(fd);
    return nullptr;
  }
  return std::make_shared<ShmMapping>(base, bytes, fd);
}

TEST(ShmArenaTest, AllocationsAreDisjointZeroedAndComeBackZeroed) {
  constexpr size_t kPage = ShmArena::kAlignment;
  auto mapping = map_segment(64 * kPage);
  ASSERT_NE(mapping, nullptr);
  auto arena = std::make_shared<ShmArena>(mapping, 8 * kPage, 32 * kPage);
  torch::Tensor a = arena->allocate(1000, torch::kFloat32);
  torch::Tensor b = arena->allocate(3, torch::kFloat64);
  ASSERT_TRUE(a.defined() && b.defined());
  EXPECT_TRUE(torch::equal(a, torch::zeros({1000})));
  EXPECT_TRUE(arena->locate(a.data_ptr(), 4000).has_value());
  EXPECT_FALSE(arena->locate(a.data_ptr(), 40 * kPage).has_value());  // runs past the arena
  EXPECT_FALSE(arena->locate(mapping->at(0), 4).has_value());         // before it
  auto begin = [](const torch::Tensor& t) { return static_cast<char*>(t.data_ptr()); };
  EXPECT_TRUE(begin(a) + 4000 <= begin(b) || begin(b) + 24 <= begin(a));
  EXPECT_EQ(arena->bytes_in_use(), 2 * kPage);  // whole pages

  a.fill_(7);
  void* where = a.data_ptr();
  a = torch::Tensor();  // the last reference: the range goes back
  EXPECT_EQ(arena->bytes_in_use(), kPage);
  torch::Tensor again = arena->allocate(1000, torch::kFloat32);
  EXPECT_EQ(again.data_ptr(), where);  // first fit
  EXPECT_TRUE(torch::equal(again, torch::zeros({1000})));
}

TEST(ShmArenaTest, FreedNeighboursMergeAndAFullArenaSaysSo) {
  constexpr size_t kPage = ShmArena::kAlignment;
  auto mapping = map_segment(4 * kPage);
  ASSERT_NE(mapping, nullptr);
  auto arena = std::make_shared<ShmArena>(mapping, 0, 4 * kPage);
  const int64_t page_floats = kPage / 4;
  std::vector<torch::Tensor> pages;
  for (int i = 0; i < 4; ++i) pages.push_back(arena->allocate(page_floats, torch::kFloat32));
  for (const auto& p : pages) ASSERT_TRUE(p.defined());
  EXPECT_FALSE(arena->allocate(1, torch::kFloat32).defined());  // full
  pages[1] = pages[2] = torch::Tensor();
  torch::Tensor two = arena->allocate(2 * page_floats, torch::kFloat32);  // needs the merge
  EXPECT_TRUE(two.defined());
  pages.clear();
  two = torch::Tensor();
  EXPECT_EQ(arena->bytes_in_use(), 0u);
  EXPECT_TRUE(arena->allocate(4 * page_floats, torch::kFloat32).defined());
}

TEST(ShmArenaTest, MoreThanDevShmHoldsIsAnUndefinedTensor) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const size_t capacity = static_cast<size_t>(fs.f_blocks) * fs.f_frsize;
  const size_t bytes = capacity + (size_t{1} << 30);  // sparse: costs address space only
  auto mapping = map_segment(bytes);
  ASSERT_NE(mapping, nullptr);
  auto arena = std::make_shared<ShmArena>(mapping, 0, bytes);
  EXPECT_FALSE(arena->allocate(static_cast<int64_t>(bytes / 4) - 1024, torch::kFloat32).defined());
  EXPECT_EQ(arena->bytes_in_use(), 0u);
  EXPECT_TRUE(arena->allocate(1024, torch::kFloat32).defined());  // and it still works
}

}  // namespace
}  // namespace ddpx::dist
