// The --val_split hold-out that image folders and tar shards share (data/val_split.h): the
// fraction asked for, at least one sample on each side, disjoint and covering every sample, the
// same on every call (the held-out files do not move between runs).
#include "data/val_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace ddpx::data {
namespace {

TEST(ValSplitTest, HoldsOutTheFractionDisjointSortedAndTheSameEveryTime) {
  for (size_t n : {2, 3, 10, 97, 1000}) {
    for (double fraction : {0.01, 0.1, 0.25, 0.5, 0.99}) {
      const HeldOut a = hold_out(n, fraction);
      const size_t expected =
          std::clamp<size_t>(static_cast<size_t>(static_cast<double>(n) * fraction), 1, n - 1);
      EXPECT_EQ(a.val.size(), expected) << n << " " << fraction;
      EXPECT_EQ(a.train.size() + a.val.size(), n);
      EXPECT_TRUE(std::is_sorted(a.val.begin(), a.val.end()));
      EXPECT_TRUE(std::is_sorted(a.train.begin(), a.train.end()));
      std::vector<size_t> all = a.train;
      all.insert(all.end(), a.val.begin(), a.val.end());
      std::sort(all.begin(), all.end());
      std::vector<size_t> every(n);
      std::iota(every.begin(), every.end(), size_t{0});
      EXPECT_EQ(all, every) << "disjoint and covering, n " << n;
      const HeldOut b = hold_out(n, fraction);
      EXPECT_EQ(a.val, b.val);
    }
  }
  // Not the first samples: a shuffle (a folder's last class is not all held out).
  const HeldOut h = hold_out(100, 0.2);
  EXPECT_NE(h.val.back(), 19u);
}

}  // namespace
}  // namespace ddpx::data
