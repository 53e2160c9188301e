// run_thread_ranks(): see thread_ranks.h.
#include "distributed/thread_ranks.h"

#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/flight_recorder.h"
#include "distributed/context.h"
#include "distributed/factories.h"

namespace ddpx::dist {

void run_thread_ranks(int world_size, const std::function<void(Context&)>& fn,
                      std::chrono::milliseconds timeout) {
  DDPX_CHECK(world_size >= 1, ErrorKind::kInternal, "thread ranks: a world of {} ranks",
             world_size);
  // Before the ranks' groups exist: torch 2.11's recorder races when two groups start at once.
  disable_flight_recorder();
  auto store = make_hash_store();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world_size));
  for (int rank = 0; rank < world_size; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        WorldInfo world;
        world.rank = world.local_rank = rank;
        world.world_size = world.local_world_size = world_size;
        world.source = "threads";
        Built built;
        built.options.timeout = timeout;
        built.gloo_host = "127.0.0.1";
        auto cpu = make_gloo_backend(store, rank, world_size, timeout, built.gloo_host);
        built.backend = cpu->getBackendName();
        auto group = make_process_group(store, rank, world_size, std::move(cpu), nullptr);
        Context context(world, store, std::move(group), std::move(built));
        fn(context);
      } catch (...) {
        errors[static_cast<size_t>(rank)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace ddpx::dist
