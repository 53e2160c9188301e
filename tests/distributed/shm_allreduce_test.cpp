// The shared-memory collectives: exact sums across chunk boundaries, dtypes and world sizes,
// in place for tensors in the arenas, broadcasts from any root,
// a clear timeout naming the rank that never arrived, nothing left in /dev/shm, and init()
// choosing it for a one-host job while other collectives still go through Gloo.
#include "distributed/shm/shm_allreduce.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <functional>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "core/error.h"
#include "distributed/context.h"
#include "shm_ranks.h"
#include "support/support.h"

namespace ddpx::dist {
namespace {

using test::run_shm_ranks;

// Segments this process created (named ddpx-<pid>-...): tests in other processes running at the
// same time have their own for a moment.
int ddpx_segments_in_dev_shm() {
  const std::string mine = "ddpx-" + std::to_string(::getpid()) + "-";
  int count = 0;
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(dir)) count += std::string(e->d_name).rfind(mine, 0) == 0;
    ::closedir(dir);
  }
  return count;
}

TEST(ShmAllreduceTest, SumsExactlyAcrossChunkBoundaries) {
  const int64_t per_chunk = ShmAllreduce::kChunkBytes / 4;
  for (int world : {2, 3}) {
    run_shm_ranks(world, [&](int rank, ShmAllreduce& shm) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{1000}, per_chunk, per_chunk + 1,
                        2 * per_chunk + 7}) {
        // Element i on rank r holds i % 97 + r: the sum is known exactly in float.
        torch::Tensor t = torch::arange(n, torch::kInt64).remainder(97).to(torch::kFloat32) + rank;
        shm.allreduce(t);
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

// Ranks that disagree on the element count, dtype or operation must not get sums of unrelated
// bytes (or a sum on one rank and an average on another):
// every rank throws, naming what each rank called (each case maps a fresh segment: after a
// mismatch the job is over).
TEST(ShmAllreduceTest, MismatchedCallsThrowOnEveryRankInsteadOfSummingWrongBytes) {
  struct Case {
    int64_t n0, n1;
    torch::ScalarType dtype1;
    bool average1;
    const char* expected;
  };
  for (const Case& c :
       {Case{1024, 10, torch::kFloat32, false, "rank 0 sum float[1024], rank 1 sum float[10]"},
        Case{0, 3, torch::kFloat32, false, "rank 0 sum float[0], rank 1 sum float[3]"},
        Case{8, 8, torch::kFloat64, false, "rank 0 sum float[8], rank 1 sum double[8]"},
        Case{8, 8, torch::kFloat32, true, "rank 0 sum float[8], rank 1 average float[8]"}}) {
    std::vector<std::string> errors(2);
    run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
      torch::Tensor t = rank == 0 ? torch::ones({c.n0}) : torch::ones({c.n1}, c.dtype1);
      try {
        shm.allreduce(t, rank == 1 && c.average1);
      } catch (const Error& e) {
        errors[rank] = e.what();
      }
    });
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_NE(errors[rank].find("mismatched collectives on shared memory"), std::string::npos)
          << errors[rank];
      EXPECT_NE(errors[rank].find(c.expected), std::string::npos) << errors[rank];
    }
  }
}

TEST(ShmAllreduceTest, Float64AndEveryRankGetsBitIdenticalResults) {
  std::vector<torch::Tensor> results(2);
  run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor t = rank_values(rank);
    shm.allreduce(t);
    results[rank] = t;
  });
  EXPECT_TRUE(torch::equal(results[0], results[1]));
  EXPECT_TRUE(torch::allclose(results[0], rank_values(0) + rank_values(1), 0, 1e-9));
}

// Tensors in the ranks' arenas (where DDP puts its gradient buckets) are reduced in place:
// exact sums and averages for 2 and 3 ranks, float32 and float64, with each rank's tensor at
// a different place in its arena; a call where one rank's tensor is in ordinary memory still
// gets the right answer (through the chunk slots).
TEST(ShmAllreduceTest, ArenaTensorsReduceInPlaceToExactSumsAndAverages) {
  const int64_t per_chunk = ShmAllreduce::kChunkBytes / 4;
  for (int world : {2, 3}) {
    run_shm_ranks(world, [&](int rank, ShmAllreduce& shm) {
      ASSERT_NE(shm.arena(), nullptr);
      std::vector<torch::Tensor> padding;  // a different offset on every rank
      for (int i = 0; i < rank; ++i)
        padding.push_back(shm.arena()->allocate(5000, torch::kFloat32));
      for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{1001}, per_chunk + 3}) {
        for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
          for (bool average : {false, true}) {
            for (bool rank1_in_arena : {true, false}) {
              torch::Tensor values = torch::arange(n, torch::kInt64).remainder(97).to(dtype);
              torch::Tensor t = rank == 1 && !rank1_in_arena ? torch::empty({n}, dtype)
                                                             : shm.arena()->allocate(n, dtype);
              ASSERT_TRUE(t.defined());
              t.copy_(values + rank);
              shm.allreduce(t, average);
              torch::Tensor expected = values * world + world * (world - 1) / 2;
              if (average) expected = expected * (1.0 / world);
              ASSERT_TRUE(torch::equal(t, expected.to(dtype)))
                  << "world " << world << " n " << n << " " << dtype << " average " << average
                  << " rank 1 in arena " << rank1_in_arena;
            }
          }
        }
      }
      EXPECT_EQ(shm.calls_in_place(), 4 * 2 * 2);  // the calls where every rank's was in its arena
    });
  }
}

// Broadcast copies the root's bytes into every rank's tensor, any dtype and size (across chunk
// boundaries, and empty), from every root; ranks that disagree on the root throw.
TEST(ShmAllreduceTest, BroadcastCopiesTheRootsBytesFromAnyRoot) {
  const int64_t chunk = ShmAllreduce::kChunkBytes;
  for (int world : {2, 3}) {
    run_shm_ranks(world, [&](int rank, ShmAllreduce& shm) {
      for (int root = 0; root < world; ++root) {
        for (auto dtype : {torch::kUInt8, torch::kInt64, torch::kFloat32}) {
          for (int64_t bytes : {int64_t{0}, int64_t{40}, chunk, 2 * chunk + 8}) {
            const int64_t n = bytes / static_cast<int64_t>(c10::elementSize(dtype));
            auto values = [&](int r) {
              return (torch::arange(n, torch::kInt64) * 7 + r).remainder(251).to(dtype);
            };
            torch::Tensor t = values(rank);
            shm.broadcast(t, root);
            ASSERT_TRUE(torch::equal(t, values(root)))
                << "world " << world << " root " << root << " " << dtype << " bytes " << bytes;
          }
        }
      }
    });
  }
  std::vector<std::string> errors(2);
  run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor t = torch::ones({4});
    try {
      shm.broadcast(t, rank);  // each rank names itself the root
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("rank 0 broadcast from 0 bytes[16], rank 1 broadcast from 1 bytes[16]"),
              std::string::npos)
        << e;
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
    shm->allreduce(t);
  } catch (const Error& e) {
    error = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(error.find("rank(s) 1"), std::string::npos) << error;
}

TEST(ShmAllreduceTest, LeavesNothingInDevShm) {
  int before = ddpx_segments_in_dev_shm();
  run_shm_ranks(2, [](int rank, ShmAllreduce& shm) {
    torch::Tensor t = torch::ones({100});
    shm.allreduce(t);
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

namespace ddpx::dist {
namespace {

// init() over real TCPStore + Gloo on loopback picks shared memory for a one-host job, and
// the wrapped group still sums correctly and still does every other collective through Gloo.
std::vector<std::shared_ptr<Context>> join(int world_size, Transport transport) {
  int port = test::free_port();
  std::vector<std::shared_ptr<Context>> contexts(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      WorldInfo world;
      world.rank = world.local_rank = rank;
      world.world_size = world.local_world_size = world_size;
      world.master_addr = "127.0.0.1";
      world.master_port = port;
      InitOptions options;
      options.transport = transport;
      options.timeout = std::chrono::seconds(20);
      contexts[rank] = init(world, options);
    });
  }
  for (auto& t : threads) t.join();
  return contexts;
}

TEST(ShmBackendTest, OneHostJobUsesSharedMemoryAndStaysCorrect) {
  auto contexts = join(2, Transport::kAuto);
  ASSERT_EQ(contexts[0]->backend(), "gloo+shm");
  ASSERT_NE(contexts[0]->shm(), nullptr);
  std::vector<std::thread> threads;
  std::vector<torch::Tensor> sums(2), broadcasts(2);
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      torch::Tensor t = torch::full({5000}, rank + 1.0f);
      contexts[rank]->all_reduce_sum(t);  // shared memory
      torch::Tensor b = torch::full({3}, rank * 10.0f);
      contexts[rank]->broadcast(b, 1);  // shared memory
      torch::Tensor i = torch::full({4}, int64_t{rank + 1});
      contexts[rank]->all_reduce_sum(i);  // int64 sum: Gloo
      sums[rank] = t;
      broadcasts[rank] = torch::cat({b, i.to(torch::kFloat32)});
      contexts[rank]->barrier();
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(sums[rank].eq(3.0f).all().item<bool>());
    EXPECT_TRUE(torch::equal(broadcasts[rank],
                             torch::tensor({10.0f, 10.0f, 10.0f, 3.0f, 3.0f, 3.0f, 3.0f})));
  }
}

TEST(ShmBackendTest, TransportGlooKeepsPlainGloo) {
  auto contexts = join(2, Transport::kGloo);
  EXPECT_EQ(contexts[0]->backend(), "gloo");
  EXPECT_EQ(contexts[0]->shm(), nullptr);
}

}  // namespace
}  // namespace ddpx::dist
