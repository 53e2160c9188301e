// The collective record of a real Gloo job: its group records every collective, and a queued one
// is pending until it has run (trace/ alone is tested in tests/trace/).
#include "distributed/c10d/traced_backend.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "distributed/factories.h"
#include "queued_backend.h"
#include "ranks.h"
#include "trace/collective_trace.h"

namespace ddpx::trace {
namespace {

using test::error_text;

TEST(CollectiveTraceTest, AGlooJobRecordsEveryCollectiveOfItsGroup) {
  std::vector<Snapshot> seen(2);
  auto errors = test::run_ranks(2, [&](int rank, dist::Context& context) {
    auto t = torch::ones({3, 4});
    context.all_reduce_sum(t);
    auto b = torch::zeros({5}, torch::kLong);
    context.broadcast(b, 0);
    context.barrier();
    ASSERT_NE(context.trace(), nullptr) << "the job's group is traced";
    seen[rank] = context.trace()->snapshot();
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(seen[rank].entries.size(), 3u) << "rank " << rank;
    EXPECT_EQ(seen[rank].entries[0].sig.text(), "allreduce float[3,4]");
    EXPECT_EQ(seen[rank].entries[1].sig.text(), "broadcast long[5]");
    EXPECT_EQ(seen[rank].entries[2].sig.op, "barrier");
    for (const auto& e : seen[rank].entries) {
      EXPECT_EQ(e.state, State::kDone) << e.sig.text();
      EXPECT_GE(e.end_ns, e.start_ns);
    }
  }
}

// A collective whose wait() returns before it has run (NCCL's, here Gloo's through
// queued_backend.h) is pending in the record until it has run, then done: the record no
// longer calls a queued collective done, and a hung one shows as waiting.
TEST(CollectiveTraceTest, AQueuedCollectiveIsPendingUntilItHasRun) {
  using namespace std::chrono_literals;
  const int port = test::free_port();
  std::vector<std::string> errors(2);
  std::atomic<bool> late{false};
  State after_wait = State::kEmpty, after_run = State::kEmpty;
  float sum = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        auto store = dist::make_tcp_store("127.0.0.1", port, rank, 2, rank == 0, 20s);
        auto trace = std::make_shared<CollectiveTrace>("", rank, 2);
        auto group = test::queued_group(store, rank, 2, 20s, trace,
                                        [&](const dist::CompletionWatch::Late&) { late = true; });
        if (rank == 1) std::this_thread::sleep_for(500ms);  // joins the all-reduce late
        std::vector<at::Tensor> tensors{torch::ones({8})};
        auto work = group->allreduce(tensors);
        work->wait();
        if (rank == 0) after_wait = trace->snapshot().entries.back().state;
        // The host waiting for the device, then for the watch's next poll.
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (trace->snapshot().entries.back().state == State::kPending &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(5ms);
        }
        if (rank == 0) {
          after_run = trace->snapshot().entries.back().state;
          sum = tensors[0][0].item<float>();
        }
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) EXPECT_EQ(errors[rank], "") << "rank " << rank;
  EXPECT_EQ(after_wait, State::kPending) << "wait() returned, the all-reduce had not run";
  EXPECT_EQ(after_run, State::kDone);
  EXPECT_EQ(sum, 2.0f);
  EXPECT_FALSE(late.load()) << "completed well within the timeout";
}

}  // namespace
}  // namespace ddpx::trace
