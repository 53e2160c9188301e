// Test helper: runs one function per rank on threads of this process, each rank a real member
// of a Gloo group on 127.0.0.1 (rank 0 hosts the TCPStore). Exceptions are collected per rank
// so that the test thread can assert on them.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "distributed/context.h"
#include "support/support.h"

namespace ddpx::test {

inline dist::WorldInfo loopback_world(int rank, int world_size, int port) {
  dist::WorldInfo w;
  w.rank = rank;
  w.local_rank = rank;
  w.world_size = world_size;
  w.local_world_size = world_size;
  w.master_addr = "127.0.0.1";
  w.master_port = port;
  w.source = "test";
  return w;
}

// Runs fn(rank, context) on `world_size` threads; returns each rank's exception (or null).
// `transport`: for CPU tensors (kAuto: the shared-memory transport, all ranks being on this host).
inline std::vector<std::exception_ptr> run_ranks(
    int world_size, const std::function<void(int, dist::Context&)>& fn,
    std::chrono::milliseconds timeout = std::chrono::seconds(20),
    dist::Transport transport = dist::Transport::kAuto) {
  const int port = free_port();
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        dist::InitOptions options;
        options.device = dist::DeviceChoice::kCpu;
        options.backend = dist::BackendChoice::kGloo;
        options.timeout = timeout;
        options.transport = transport;
        auto context = dist::init(loopback_world(rank, world_size, port), options);
        fn(rank, *context);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string error_text(const std::exception_ptr& error) {
  if (!error) return "";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "unknown exception";
}

// Fails the test with every rank's message when any rank threw.
#define EXPECT_ALL_RANKS_OK(errors)                                                  \
  for (size_t r_ = 0; r_ < (errors).size(); ++r_) {                                  \
    EXPECT_FALSE((errors)[r_]) << "rank " << r_ << ": " << error_text((errors)[r_]); \
  }

}  // namespace ddpx::test
