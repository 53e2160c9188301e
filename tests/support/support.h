// Shared test helpers: temporary directories, running commands (the ddpx binary, Debian's
// python3 for reference data) with a time limit, and free loopback ports.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace ddpx::test {

// A fresh directory under /tmp, removed when the object goes out of scope.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // the exit status, or 128+signal when killed by a signal
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// Runs `/bin/sh -c command`, killing its process group after timeout_s.
CommandResult run_command(const std::string& command, int timeout_s = 300);

// Runs the build's Python (DDPX_PYTHON: the .venv with the pinned torch, torchvision and numpy)
// on a script text (reference data written by numpy, pickle, torch and torchvision).
CommandResult run_python(const std::string& script, int timeout_s = 300);
bool python_has_module(const std::string& module);

std::string ddpx_binary();                          // the built `ddpx`
std::string ddpx_command(const std::string& args);  // "<ddpx_binary> args"
inline std::string ddpx(const std::string& args) { return ddpx_command(args); }
inline bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}
// The number on the last "Accuracy on test dataset - X" line (a test failure and 0 if none).
double printed_test_accuracy(const std::string& output);
// The message of the ddpx::Error(kUsage) that `fn` throws (a test failure if it throws none).
std::string usage_error(const std::function<void()>& fn);
std::string python_binary();      // DDPX_PYTHON
std::string source_dir();         // the repository root
std::string fashion_mnist_dir();  // Debian's dataset-fashion-mnist folder
// GPT-2's tiktoken rank file that scripts/test-vocab put beside the test Python (a test failure
// naming the script when it is absent).
std::string gpt2_rank_file();
std::string shell_quote(const std::string& s);
int free_port();  // a TCP port free on 127.0.0.1 right now
// Every TempDir this process made (jobs_dir.cpp tells this test's job records by them).
const std::vector<std::string>& temp_dirs();
void write_bytes(const std::string& path, const std::string& bytes);

}  // namespace ddpx::test
