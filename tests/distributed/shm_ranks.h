// Test helper: runs one function per rank of a shared-memory transport (ShmAllreduce) on threads
// of this process, each rank with its own mapping of one segment, set up over an in-process
// store. Each rank's exception text is checked to be empty.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <vector>

#include "distributed/shm/shm_allreduce.h"

namespace ddpx::test {

inline void run_shm_ranks(int world_size, const std::function<void(int, dist::ShmAllreduce&)>& fn,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world_size);
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto shm = dist::ShmAllreduce::create(*store, rank, world_size, timeout);
        if (!shm) throw std::runtime_error("no shared memory");
        fn(rank, *shm);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < world_size; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
}

}  // namespace ddpx::test
