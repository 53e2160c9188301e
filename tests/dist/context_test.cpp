// init() and Context's collectives on real Gloo groups over 127.0.0.1, and the ways joining
// a job can fail: each must end in ddpx::Error within the timeout, never hang.
#include "dist/context.h"

#include <chrono>

#include <gtest/gtest.h>

#include "core/error.h"
#include "ranks.h"

namespace ddpx::dist {
namespace {

using test::error_text;
using test::run_ranks;

TEST(ContextTest, SingleProcessCollectivesAreIdentity) {
  InitOptions options;
  options.backend = "gloo";
  auto context = init(WorldInfo{}, options);
  EXPECT_FALSE(context->distributed());
  EXPECT_EQ(context->process_group(), nullptr);
  auto t = torch::tensor({1.5f, -2.0f});
  context->all_reduce_sum(t);
  context->broadcast(t, 0);
  context->barrier();
  EXPECT_TRUE(torch::equal(t, torch::tensor({1.5f, -2.0f})));
}

TEST(ContextTest, AllReduceSumSumsAndBroadcastCopiesFromRoot) {
  constexpr int kWorld = 3;
  std::vector<torch::Tensor> sums(kWorld), broadcasts(kWorld);
  auto errors = run_ranks(kWorld, [&](int rank, Context& context) {
    EXPECT_TRUE(context.distributed());
    EXPECT_EQ(context.backend(), "gloo+shm");  // one host: float sums through shared memory
    auto t = torch::tensor({double(rank + 1), 10.0 * rank});
    context.all_reduce_sum(t);
    sums[rank] = t;
    auto b = torch::full({4}, int64_t{rank}, torch::kLong);
    context.broadcast(b, /*root=*/2);
    broadcasts[rank] = b;
    context.barrier();
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(sums[r].defined());
    EXPECT_TRUE(torch::equal(sums[r], torch::tensor({6.0, 30.0}))) << sums[r];
    EXPECT_TRUE(torch::equal(broadcasts[r], torch::full({4}, int64_t{2}, torch::kLong)));
  }
}

TEST(ContextTest, NcclOnCpuBuildIsAUsageError) {
  InitOptions options;
  options.backend = "nccl";
  try {
    init(test::loopback_world(0, 2, test::free_port()), options);
    FAIL() << "expected an error: this libtorch has no NCCL";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("gloo"), std::string::npos) << e.what();
  }
}

TEST(ContextTest, UnknownBackendListsValidOnes) {
  InitOptions options;
  options.backend = "mpi";
  try {
    init(WorldInfo{}, options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("auto, gloo, nccl"), std::string::npos) << e.what();
  }
}

TEST(ContextTest, UnreachableMasterFailsNamingAddressWithinTimeout) {
  const int port = test::free_port();  // nobody listens here
  InitOptions options;
  options.backend = "gloo";
  options.timeout = std::chrono::milliseconds(1500);
  const auto start = std::chrono::steady_clock::now();
  try {
    init(test::loopback_world(1, 2, port), options);
    FAIL() << "expected a rendezvous error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDist);
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
  // Not a speed check: it must give up rather than hang (generous bound).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

TEST(ContextTest, WrongWorldSizeFailsOnEveryRankInsteadOfHanging) {
  // Two ranks start, both believing the world has three: the third never comes.
  const auto start = std::chrono::steady_clock::now();
  const int port = test::free_port();
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        InitOptions options;
        options.backend = "gloo";
        options.timeout = std::chrono::milliseconds(1500);
        init(test::loopback_world(rank, 3, port), options);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_TRUE(errors[rank]) << "rank " << rank << " joined a world that cannot form";
    try {
      std::rethrow_exception(errors[rank]);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kDist) << e.what();
      EXPECT_NE(std::string(e.what()).find("3"), std::string::npos) << e.what();
    }
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
}

}  // namespace
}  // namespace ddpx::dist
