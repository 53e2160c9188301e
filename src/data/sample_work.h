// The samples of one batch under construction, which more than one thread may build: a source
// whose samples are independent (an image folder's: each read, decoded and transformed alone,
// from its own stream) hands one out before it starts on them, and any thread that calls help()
// takes samples nobody has taken yet until none is left. The loader's consumer, waiting for the
// batch a worker is building, helps instead of sleeping: with one loader worker the first batch
// comes about twice as fast on two cores, and a loader-bound training loop gets the waiting
// thread's time. Whichever thread builds a sample, the batch is the same.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>

namespace ddpx::data {

class SampleWork {
 public:
  // `build(i)` makes sample i (0 <= i < count); it is called once per sample, from any thread,
  // and must touch only that sample's state.
  SampleWork(int64_t count, std::function<void(int64_t)> build);

  // Builds untaken samples until none is left. An error is kept for finish(), not thrown.
  void help();
  // The owner's: help(), then wait until every taken sample is built; rethrows the first error
  // any thread met. After it returns no thread calls `build` again.
  void finish();

 private:
  bool take_and_build();  // false: none left

  const int64_t count_;
  std::function<void(int64_t)> build_;
  std::atomic<int64_t> next_{0};
  std::mutex mutex_;
  std::condition_variable built_;
  int64_t done_ = 0;
  std::exception_ptr error_;
};

// Where a source publishes the SampleWork of a batch it starts, for other threads to help with.
using PublishWork = std::function<void(std::shared_ptr<SampleWork>)>;

}  // namespace ddpx::data
