#include "support/support.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <stdexcept>

#include "core/error.h"

namespace ddpx::test {
namespace {

std::vector<std::string>& temp_dir_list() {
  static std::vector<std::string> dirs;
  return dirs;
}

std::mutex& temp_dirs_mutex() {
  static std::mutex mutex;
  return mutex;
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = "/tmp/ddpx_test_XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
  std::lock_guard<std::mutex> lock(temp_dirs_mutex());
  temp_dir_list().push_back(path_);
}

const std::vector<std::string>& temp_dirs() { return temp_dir_list(); }

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

CommandResult run_command(const std::string& command, int timeout_s) {
  CommandResult result;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) throw std::runtime_error("pipe failed");
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::dup2(pipe_fds[1], 1);
    ::dup2(pipe_fds[1], 2);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::setpgid(pid, pid);
  ::close(pipe_fds[1]);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  char buffer[4096];
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(std::min<long>(left, 1000)));
    if (ready > 0) {
      ssize_t n = ::read(pipe_fds[0], buffer, sizeof(buffer));
      if (n <= 0) break;
      result.output.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  if (result.timed_out) {
    // A hang is never what a test wants, also where it expects a failure (exit_code != 0): the
    // kill's 137 would pass there.
    result.exit_code = kTimedOut;
    constexpr size_t kTail = 4000;
    const size_t from = result.output.size() > kTail ? result.output.size() - kTail : 0;
    ADD_FAILURE() << "still running after its time limit of " << timeout_s
                  << " s, killed: " << command << "\n... its output's end:\n"
                  << result.output.substr(from);
  }
  return result;
}

CommandResult run_python(const std::string& script, int timeout_s) {
  TempDir dir;
  std::string path = dir.file("script.py");
  write_bytes(path, script);
  return run_command(std::string(DDPX_PYTHON) + " " + path, timeout_s);
}

bool python_has_module(const std::string& module) {
  return run_command(std::string(DDPX_PYTHON) + " -c 'import " + module + "'", 120).exit_code == 0;
}

std::string ddpx_binary() { return DDPX_BINARY; }

std::string ddpx_command(const std::string& args) { return ddpx_binary() + " " + args; }

double printed_test_accuracy(const std::string& output) {
  static const std::regex line(R"(Accuracy on test dataset - ([0-9.]+))");
  double last = 0;
  bool found = false;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    last = std::stod((*it)[1]);
    found = true;
  }
  EXPECT_TRUE(found) << "no test accuracy line in:\n" << output;
  return last;
}

std::vector<double> numbers_after(const std::string& output, const std::string& label) {
  std::vector<double> out;
  const std::regex re(label + R"( - ([0-9.]+))");
  for (std::sregex_iterator it(output.begin(), output.end(), re), end; it != end; ++it)
    out.push_back(std::stod((*it)[1]));
  return out;
}

std::string usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "expected a ddpx::Error";
  return "";
}
bool test_tools_required() {
  const char* value = std::getenv("DDPX_REQUIRE_TEST_TOOLS");
  return value != nullptr && std::string(value) == "1";
}

::testing::TestPartResult::Type missing_tool_outcome() {
  return test_tools_required() ? ::testing::TestPartResult::kFatalFailure
                               : ::testing::TestPartResult::kSkip;
}

const char* missing_tool_summary() {
  return test_tools_required()
             ? "Failed: a tool this test needs is missing, and DDPX_REQUIRE_TEST_TOOLS=1 (CI) "
               "wants every one installed (scripts/bootstrap --tests, scripts/python-env --tests)"
             : "";  // as GTEST_SKIP's: the reason alone
}

std::string python_binary() { return DDPX_PYTHON; }

void make_image_fixture(const std::string& dir, const std::string& args) {
  const CommandResult r =
      run_command(std::string(DDPX_PYTHON) + " " + shell_quote(source_dir()) +
                      "/tests/support/make_image_fixture.py " + shell_quote(dir) + " " + args,
                  120);
  ASSERT_EQ(r.exit_code, 0) << "make_image_fixture.py failed (scikit-image from "
                               "scripts/requirements.txt, cjpeg from libjpeg-turbo-progs):\n"
                            << r.output;
}
PhotoFolder::PhotoFolder(int per_class) : root_(dir_.file("folder")) {
  make_image_fixture(dir_.path(), "--only folder --per_class " + std::to_string(per_class));
}
std::string source_dir() { return DDPX_SOURCE_DIR; }
std::string fashion_mnist_dir() { return "/usr/share/datasets/fashion-mnist"; }

std::string gpt2_rank_file() {
  static const std::string path = [] {
    auto r = run_command(std::string("bash ") + DDPX_SOURCE_DIR + "/scripts/test-vocab " +
                             DDPX_PYTHON + " --offline 2>&1",
                         60);
    std::string out = r.output;
    while (!out.empty() && out.back() == '\n') out.pop_back();
    EXPECT_EQ(r.exit_code, 0) << out;
    return r.exit_code == 0 ? out : std::string();
  }();
  return path;
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace ddpx::test
