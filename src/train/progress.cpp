#include "train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace ddpx::train {

constexpr int kBarWidth = 30;

ProgressBar::ProgressBar(bool enabled, int64_t total)
    : enabled_(enabled && ::isatty(STDERR_FILENO) == 1), total_(total) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(int64_t done, double loss, double accuracy, double images_per_sec) {
  if (!enabled_ || total_ <= 0) return;
  int filled = static_cast<int>(kBarWidth * done / total_);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  std::string line = fmt::format("\r[{}] {}/{} loss {:.4f} acc {:.4f} {:.0f} img/s", bar, done,
                                 total_, loss, accuracy, images_per_sec);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (!drawn_) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace ddpx::train
