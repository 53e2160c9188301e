// Ranks as threads of this process: `world_size` threads, each joined to a real Gloo group over
// 127.0.0.1 that meets in an in-process store (no file, no port to agree on), each running `fn`
// with its own Context. For measuring what one rank of a plan holds and does without launching
// workers (`ddpx plan` probes tensor parallelism this way); the ranks share the process's
// allocator, intra-op threads and autograd engine.
//
// Every thread runs to its end; the first rank's error (by rank) is rethrown after all have
// joined, as ddpx::Error. A rank that throws while the others wait in a collective ends them at
// `timeout`.
#pragma once

#include <chrono>
#include <functional>

namespace ddpx::dist {

class Context;

void run_thread_ranks(int world_size, const std::function<void(Context&)>& fn,
                      std::chrono::milliseconds timeout = std::chrono::minutes(5));

}  // namespace ddpx::dist
