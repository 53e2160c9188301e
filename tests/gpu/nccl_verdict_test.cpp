// NCCL's wait() returns before the collective has run: the collective record must keep such a
// collective pending until the GPU has run it, and ddpx's own timeout must notice one that is
// still pending (completion_watch.h). One GPU is enough: an NCCL group of one rank whose
// all-reduce is queued behind a kernel that spins for seconds on the same stream, as a
// collective waiting for a late peer would be. Label `gpu`: skips with a message without a GPU.
#include <ATen/cuda/Sleep.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "distributed/c10d/traced_backend.h"
#include "distributed/factories.h"
#include "support/support.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

using namespace std::chrono_literals;

TEST(NcclVerdictTest, AQueuedNcclCollectiveStaysPendingAndIsReportedLateAtTheTimeout) {
  if (torch::cuda::device_count() < 1)
    GTEST_SKIP() << "needs a visible GPU (an NCCL group of one rank), this process sees none";
  const auto timeout = 1500ms;
  auto store = make_tcp_store("127.0.0.1", test::free_port(), 0, 1, /*host=*/true, 30s);
  auto trace = std::make_shared<trace::CollectiveTrace>("", 0, 1);
  std::atomic<int> late_calls{0};
  std::atomic<bool> late_timed_out{false};
  std::atomic<uint64_t> late_seq{0};
  auto late_at = std::chrono::steady_clock::now();
  auto backend = c10::make_intrusive<TracedBackend>(
      make_nccl_backend(store, 0, 1, timeout + kInnerTimeoutMargin), trace, timeout,
      [&](const CompletionWatch::Late& late) {
        late_at = std::chrono::steady_clock::now();
        late_seq = late.seq;
        late_timed_out = late.timed_out();
        ++late_calls;
      });
  const torch::Device gpu(torch::kCUDA, 0);
  std::vector<at::Tensor> warm{torch::ones({16}, gpu)};
  backend->allreduce(warm, c10d::AllreduceOptions())->wait();  // creates the communicator
  torch::cuda::synchronize();

  // About 4-5 s of spinning on an H100's clock: the all-reduce behind it cannot start before.
  at::cuda::sleep(int64_t{8'000'000'000});
  std::vector<at::Tensor> tensors{torch::ones({1 << 20}, gpu)};
  const auto start = std::chrono::steady_clock::now();
  auto work = backend->allreduce(tensors, c10d::AllreduceOptions());
  work->wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << "NCCL's wait() does not block";
  EXPECT_EQ(trace->snapshot().entries.back().state, trace::State::kPending)
      << "wait() returned while the all-reduce was queued behind the sleep: not done yet";

  while (late_calls == 0 && std::chrono::steady_clock::now() - start < 10s)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(late_calls.load(), 1) << "the watch reports a collective pending past the timeout";
  EXPECT_TRUE(late_timed_out.load());
  EXPECT_EQ(late_seq.load(), 2u);
  const double after_s = std::chrono::duration<double>(late_at - start).count();
  EXPECT_GE(after_s, 1.4);
  EXPECT_LT(after_s, 3.0) << "at the timeout, not when PyTorch's watchdog would act";

  torch::cuda::synchronize();  // the sleep ends, the all-reduce runs
  const auto settled = std::chrono::steady_clock::now();
  while (trace->snapshot().entries.back().state == trace::State::kPending &&
         std::chrono::steady_clock::now() - settled < 2s)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(trace->snapshot().entries.back().state, trace::State::kDone);
  EXPECT_EQ(late_calls.load(), 1) << "reported once";
}

}  // namespace
}  // namespace ddpx::dist
