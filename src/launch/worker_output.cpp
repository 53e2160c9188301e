#include "launch/worker_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace ddpx::launch {

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console closed or disk full: the job goes on without this copy
    done += static_cast<size_t>(n);
  }
}

WorkerOutput::WorkerOutput(std::string log_path, bool console, std::string prefix)
    : log_path_(std::move(log_path)), console_(console), prefix_(std::move(prefix)) {
  log_fd_ = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DDPX_CHECK(log_fd_ >= 0, ErrorKind::kIo, "cannot open worker log {}: {}; check --log_dir",
             log_path_, std::strerror(errno));
}

WorkerOutput::WorkerOutput(WorkerOutput&& other) noexcept
    : log_path_(std::move(other.log_path_)),
      log_fd_(other.log_fd_),
      console_(other.console_),
      prefix_(std::move(other.prefix_)) {
  partial_[0] = std::move(other.partial_[0]);
  partial_[1] = std::move(other.partial_[1]);
  other.log_fd_ = -1;
}

WorkerOutput::~WorkerOutput() {
  if (log_fd_ >= 0) ::close(log_fd_);
}

void WorkerOutput::write(bool is_stderr, const char* data, size_t size) {
  std::string text(data, size);
  write_all(log_fd_, text);
  if (!console_) return;
  if (prefix_.empty()) {  // pass bytes through as they come (progress bars redraw with \r)
    console_write(is_stderr, text);
    return;
  }
  std::string& partial = partial_[is_stderr ? 1 : 0];
  partial += text;
  size_t end = partial.rfind('\n');
  if (end == std::string::npos) return;
  std::string lines;
  size_t start = 0;
  while (start <= end) {
    size_t newline = partial.find('\n', start);
    lines += prefix_ + partial.substr(start, newline - start + 1);
    start = newline + 1;
  }
  partial.erase(0, end + 1);
  console_write(is_stderr, lines);
}

void WorkerOutput::finish() {
  for (int stream = 0; stream < 2; ++stream) {
    if (console_ && !partial_[stream].empty()) {
      console_write(stream == 1, prefix_ + partial_[stream] + "\n");
    }
    partial_[stream].clear();
  }
}

void WorkerOutput::console_write(bool is_stderr, const std::string& text) {
  write_all(is_stderr ? STDERR_FILENO : STDOUT_FILENO, text);
}

std::vector<std::string> WorkerOutput::tail(size_t count) const {
  constexpr off_t kTailBytes = 64 * 1024;  // enough for 20 long lines
  int fd = ::open(log_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  ::fstat(fd, &st);
  off_t start = std::max<off_t>(0, st.st_size - kTailBytes);
  std::string text(static_cast<size_t>(st.st_size - start), '\0');
  ssize_t n = ::pread(fd, text.data(), text.size(), start);
  ::close(fd);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t newline = text.find('\n', pos);
    if (newline == std::string::npos) newline = text.size();
    lines.push_back(text.substr(pos, newline - pos));
    pos = newline + 1;
  }
  if (start > 0 && !lines.empty()) lines.erase(lines.begin());  // a cut first line
  if (lines.size() > count) lines.erase(lines.begin(), lines.end() - static_cast<long>(count));
  return lines;
}

}  // namespace ddpx::launch
