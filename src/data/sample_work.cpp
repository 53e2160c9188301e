// A batch's samples built by whichever threads help (see sample_work.h).
#include "data/sample_work.h"

#include <utility>

namespace ddpx::data {

SampleWork::SampleWork(int64_t count, std::function<void(int64_t)> build)
    : count_(count), build_(std::move(build)) {}

bool SampleWork::take_and_build() {
  const int64_t i = next_.fetch_add(1);
  if (i >= count_) return false;
  std::exception_ptr error;
  try {
    build_(i);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error && !error_) error_ = error;
    ++done_;
  }
  built_.notify_all();
  return true;
}

void SampleWork::help() {
  while (take_and_build()) {
  }
}

void SampleWork::finish() {
  help();
  std::unique_lock<std::mutex> lock(mutex_);
  built_.wait(lock, [&] { return done_ == count_; });
  if (error_) std::rethrow_exception(error_);
}

}  // namespace ddpx::data
