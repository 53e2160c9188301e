// Where one worker's output goes: all of it (stdout and stderr) into its log file, and, when
// the console shows this worker, the same bytes to the launcher's stdout or stderr, keeping
// the stream they came on. With a prefix ("[rank K] ") the console gets whole lines only; a
// partial line waits for its newline or for finish().
#pragma once

#include <string>
#include <vector>

namespace ddpx::launch {

class WorkerOutput {
 public:
  // Opens (appends to) log_path. console: does this worker's output reach the console?
  WorkerOutput(std::string log_path, bool console, std::string prefix);
  WorkerOutput(WorkerOutput&& other) noexcept;
  WorkerOutput& operator=(WorkerOutput&&) = delete;
  WorkerOutput(const WorkerOutput&) = delete;
  ~WorkerOutput();

  void write(bool is_stderr, const char* data, size_t size);
  void finish();  // flush partial console lines (end of the worker)
  const std::string& log_path() const { return log_path_; }
  bool console() const { return console_; }  // does the console show this worker's output?

  // The last `count` lines of the log file (for the failure report).
  std::vector<std::string> tail(size_t count) const;

 private:
  void console_write(bool is_stderr, const std::string& text);

  std::string log_path_;
  int log_fd_ = -1;
  bool console_;
  std::string prefix_;
  std::string partial_[2];  // per stream, a line not yet ended (prefix mode only)
};

// Writes all of `text` to fd, retrying short writes; a closed console (EPIPE) is ignored.
void write_all(int fd, const std::string& text);

}  // namespace ddpx::launch
