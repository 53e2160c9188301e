// The shared-memory all-reduce: exact sums across chunk boundaries, dtypes and world sizes,
// a clear timeout naming the rank that never arrived, and nothing left in /dev/shm.
#include <gtest/gtest.h>

#include <dirent.h>

#include <functional>
#include <thread>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "core/error.h"
#include "dist/shm_allreduce.h"

namespace ddpx::dist {
namespace {

// Runs fn(rank, shm) on world_size threads, each with its own mapping of one segment.
void run_ranks(int world_size, const std::function<void(int, ShmAllreduce&)>& fn,
               std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto shm = ShmAllreduce::create(*store, rank, world_size, timeout);
        if (!shm) throw std::runtime_error("no shared memory");
        fn(rank, *shm);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world_size; ++rank)
    EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

int ddpx_segments_in_dev_shm() {
  int count = 0;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) count += std::string(e->d_name).rfind("ddpx-", 0) == 0;
    ::closedir(dir);
  }
  return count;
}

TEST(ShmAllreduceTest, SumsExactlyAcrossChunkBoundaries) {
  const int64_t per_chunk = ShmAllreduce::kChunkBytes / 4;
  for (int world : {2, 3}) {
    run_ranks(world, [&](int rank, ShmAllreduce& shm) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{1000}, per_chunk,
                        per_chunk + 1, 2 * per_chunk + 7}) {
        // Element i on rank r holds i % 97 + r: the sum is known exactly in float.
        torch::Tensor t = torch::arange(n, torch::kInt64).remainder(97).to(torch::kFloat32) + rank;
        shm.allreduce_sum(t);
        torch::Tensor expected =
            torch::arange(n, torch::kInt64).remainder(97).to(torch::kFloat32) * world +
            world * (world - 1) / 2;
        ASSERT_TRUE(torch::equal(t, expected)) << "world " << world << " n " << n;
      }
    });
  }
}

// Inexact float64 values (no shared RNG between threads: torch's generator is global).
torch::Tensor rank_values(int rank) {
  return torch::sin(torch::arange(12345, torch::kFloat64) * (rank + 1.37)) * 1e3;
}

TEST(ShmAllreduceTest, Float64AndEveryRankGetsBitIdenticalResults) {
  std::vector<torch::Tensor> results(2);
  run_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor t = rank_values(rank);
    shm.allreduce_sum(t);
    results[rank] = t;
  });
  EXPECT_TRUE(torch::equal(results[0], results[1]));
  EXPECT_TRUE(torch::allclose(results[0], rank_values(0) + rank_values(1), 0, 1e-9));
}

TEST(ShmAllreduceTest, AMissingRankTimesOutNamingIt) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::string error;
  std::thread rank1([&] {
    auto shm = ShmAllreduce::create(*store, 1, 2, std::chrono::milliseconds(500));
    // Rank 1 joins but never calls the collective.
  });
  auto shm = ShmAllreduce::create(*store, 0, 2, std::chrono::milliseconds(500));
  rank1.join();
  ASSERT_NE(shm, nullptr);
  torch::Tensor t = torch::ones({10});
  auto start = std::chrono::steady_clock::now();
  try {
    shm->allreduce_sum(t);
  } catch (const Error& e) {
    error = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(error.find("rank(s) 1"), std::string::npos) << error;
}

TEST(ShmAllreduceTest, LeavesNothingInDevShm) {
  int before = ddpx_segments_in_dev_shm();
  run_ranks(2, [](int rank, ShmAllreduce& shm) {
    torch::Tensor t = torch::ones({100});
    shm.allreduce_sum(t);
  });
  EXPECT_EQ(ddpx_segments_in_dev_shm(), before);
}

TEST(ShmAllreduceTest, RefusesWhatItCannotReduce) {
  EXPECT_FALSE(ShmAllreduce::supports(torch::ones({4}, torch::kInt64)));
  EXPECT_FALSE(ShmAllreduce::supports(torch::ones({4, 4}).t()));
  EXPECT_TRUE(ShmAllreduce::supports(torch::ones({4, 4})));
}

}  // namespace
}  // namespace ddpx::dist
