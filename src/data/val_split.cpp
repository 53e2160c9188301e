#include "data/val_split.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>

#include "core/error.h"

namespace ddpx::data {

namespace {
constexpr uint64_t kValSplitSeed = 0x5EED5EED;  // the hold-out does not move with --seed
}  // namespace

HeldOut hold_out(size_t n, double fraction) {
  DDPX_CHECK(n >= 2 && fraction > 0 && fraction < 1, ErrorKind::kInternal,
             "hold_out: {} samples, fraction {}: expected at least 2 and a fraction in (0, 1)", n,
             fraction);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng(kValSplitSeed);
  for (size_t i = n; i > 1; --i)  // Fisher-Yates with a portable draw
    std::swap(order[i - 1], order[rng() % i]);
  const size_t held = std::clamp<size_t>(static_cast<size_t>(n * fraction), 1, n - 1);
  HeldOut out;
  out.val.assign(order.begin(), order.begin() + held);
  out.train.assign(order.begin() + held, order.end());
  std::sort(out.val.begin(), out.val.end());
  std::sort(out.train.begin(), out.train.end());
  return out;
}

}  // namespace ddpx::data
