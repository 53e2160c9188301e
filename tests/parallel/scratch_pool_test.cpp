// The sharded plan's pool of collective buffers (parallel/sharded/scratch_pool.h): a buffer
// given back is lent again (no fresh pages a step), two lent at once never overlap, a larger
// request grows a buffer rather than adding one, and a buffer given back twice is an error.
#include "parallel/sharded/scratch_pool.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace ddpx::parallel {
namespace {

TEST(ScratchPoolTest, ReusesBuffersAndNeverLendsOneTwice) {
  ScratchPool pool;
  auto a = pool.acquire(1000, torch::kFloat32, torch::kCPU);
  auto b = pool.acquire(1000, torch::kFloat32, torch::kCPU);
  ASSERT_EQ(a.numel(), 1000);
  EXPECT_EQ(a.scalar_type(), torch::kFloat32);
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  EXPECT_TRUE(a0 + 4000 <= b0 || b0 + 4000 <= a0) << "two buffers lent at once overlap";
  EXPECT_EQ(pool.buffers(), 2u);

  const void* where = a.data_ptr();
  pool.release(a);
  auto c = pool.acquire(500, torch::kBFloat16, torch::kCPU);  // fits in a's buffer
  EXPECT_EQ(c.data_ptr(), where);
  EXPECT_EQ(c.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(pool.buffers(), 2u);

  pool.release(b);
  auto d = pool.acquire(4000, torch::kFloat32, torch::kCPU);  // larger: b's buffer grows
  EXPECT_EQ(d.numel(), 4000);
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.bytes(), 4000 * 4 + 1000 * 4);
  d.fill_(1);  // the memory is really there
  EXPECT_EQ(d.sum().item<float>(), 4000);

  pool.release(d);
  EXPECT_THROW(pool.release(d), Error);
  pool.release(torch::Tensor());  // nothing: fine
}

TEST(ScratchPoolTest, TakesMemoryFromTheGroupsAllocatorWhenItHasSome) {
  int asked = 0;
  ScratchPool pool([&](int64_t numel, c10::ScalarType dtype) {
    ++asked;
    return torch::zeros({numel}, dtype);
  });
  auto a = pool.acquire(10, torch::kFloat64, torch::kCPU);
  EXPECT_EQ(asked, 1);
  EXPECT_EQ(a.numel(), 10);
  pool.release(a);
  pool.acquire(10, torch::kFloat64, torch::kCPU);
  EXPECT_EQ(asked, 1) << "a buffer given back is lent again, not allocated anew";
  ScratchPool none([](int64_t, c10::ScalarType) { return torch::Tensor(); });
  EXPECT_EQ(none.acquire(3, torch::kFloat32, torch::kCPU).numel(), 3)
      << "no room there: ordinary memory";
}

}  // namespace
}  // namespace ddpx::parallel
