// Shared test helpers: temporary directories, running commands (the ddpx binary, Debian's
// python3 for reference data) with a time limit, free loopback ports, and the skip of a test
// whose tool is missing (a failure where DDPX_REQUIRE_TEST_TOOLS=1).
#pragma once

#include <gtest/gtest.h>

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
  // The exit status, or 128+signal when killed by a signal; kTimedOut when run_command killed
  // it at its time limit.
  int exit_code = -1;
  bool timed_out = false;
  std::string output;  // stdout and stderr together
};

// The exit_code of a command killed at its time limit: no exit status a program can give, so
// that a test expecting a failure (`exit_code != 0`) or a signal's 137 cannot take a hang for it.
constexpr int kTimedOut = -1000;

// Runs `/bin/sh -c command`, killing its process group after timeout_s. A command still running
// then is a test failure (named with its command and the end of its output) and returns
// exit_code kTimedOut: no test expects a hang.
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
// Every number printed as "LABEL - X" in `output`, in order ("loss_train", "Loss on val dataset").
std::vector<double> numbers_after(const std::string& output, const std::string& label);
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
// Runs tests/support/make_image_fixture.py into `dir` (real photographs re-encoded by cjpeg and
// PIL: formats/, bad/, folder/), with `args` such as "--only folder"; a test failure if it fails.
void make_image_fixture(const std::string& dir, const std::string& args = "");

// A folder of real photographs in torchvision's ImageFolder layout, in a temporary directory of
// its own: make_image_fixture.py's folder/ (four classes of `per_class` crops of scikit-image's
// photos, JPEG by cjpeg and PNG by PIL). root() is the folder; file() names a path beside it.
class PhotoFolder {
 public:
  explicit PhotoFolder(int per_class);
  const std::string& root() const { return root_; }
  const std::string& path() const { return dir_.path(); }
  std::string file(const std::string& name) const { return dir_.file(name); }

 private:
  TempDir dir_;
  std::string root_;
};

// Whether a missing test tool is a failure rather than a skip: DDPX_REQUIRE_TEST_TOOLS=1 (CI's
// .ci/run, and scripts/test when CI=true), where scripts/bootstrap --tests and
// scripts/python-env --tests have installed every one, so a missing one is a broken set-up.
bool test_tools_required();
// The outcome and the first line of DDPX_SKIP_WITHOUT_TOOL's message.
::testing::TestPartResult::Type missing_tool_outcome();
const char* missing_tool_summary();

}  // namespace ddpx::test

// Inside a TEST (or a fixture's SetUp): when `present` is false, skips the test with the
// streamed reason, or fails it where test_tools_required(). For what the test set-up installs
// (a Python module of scripts/python-env --tests, torchrun, a Debian package of
// scripts/bootstrap --tests), not for what cannot exist here (a GPU, a Docker daemon: GTEST_SKIP).
//   DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torchvision")) << "needs torchvision ...";
#define DDPX_SKIP_WITHOUT_TOOL(present)                                                        \
  GTEST_AMBIGUOUS_ELSE_BLOCKER_                                                                \
  if (present)                                                                                 \
    ;                                                                                          \
  else                                                                                         \
    return ::testing::internal::AssertHelper(::ddpx::test::missing_tool_outcome(), __FILE__,   \
                                             __LINE__, ::ddpx::test::missing_tool_summary()) = \
               ::testing::Message()
