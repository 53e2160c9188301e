// A one-line progress bar within an epoch, drawn on stderr only when stderr is a terminal:
// logs and pipes get the seed's epoch lines and nothing else.
#pragma once

#include <cstdint>
#include <string>

namespace ddpx::train {

class ProgressBar {
 public:
  ProgressBar(bool enabled, int64_t total);
  ~ProgressBar();
  void update(int64_t done, double loss, double accuracy, double images_per_sec);
  void finish();  // erases the bar so the next line starts clean

 private:
  bool enabled_;
  int64_t total_;
  bool drawn_ = false;
};

}  // namespace ddpx::train
