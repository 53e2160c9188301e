// Every skipped test, with its reason, appended as one line to $DDPX_TEST_SKIP_LOG when that is
// set (scripts/test sets it): "Suite.Name<TAB>file:line: reason". The areas that run as one
// ctest test (`AREA.all`, --gtest_brief=1) print nothing of their skips, and ctest's own record
// keeps only the first kilobyte of a passing test's output; this line is how the test script's
// summary lists every skip of every binary.
//
// With $DDPX_ALL_SKIPPED_EXIT set (tests/CMakeLists.txt sets it to 77 for a suite run as one
// ctest test, whose SKIP_RETURN_CODE is 77), a binary whose every test was skipped, and none
// failed, exits with that code: ctest shows the suite as skipped, not passed.
//
// A listener, as in jobs_dir.cpp: it covers every test of every binary without each opting in.
// Each line is one write() to a file opened with O_APPEND, so the lines of tests that ctest runs
// at once do not interleave.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace ddpx::test {
namespace {

std::string one_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  for (char& c : text) {
    if (c == '\n' || c == '\t') c = ' ';
  }
  return text;
}

class SkipLog : public ::testing::EmptyTestEventListener {
  void OnTestEnd(const ::testing::TestInfo& info) override {
    const char* path = std::getenv("DDPX_TEST_SKIP_LOG");
    const ::testing::TestResult* result = info.result();
    if (path == nullptr || *path == '\0' || !result->Skipped()) return;
    std::string where = "no reason given";
    for (int i = 0; i < result->total_part_count(); ++i) {
      const ::testing::TestPartResult& part = result->GetTestPartResult(i);
      if (!part.skipped()) continue;
      std::string file = part.file_name() ? part.file_name() : "?";
      const std::string root = std::string(DDPX_SOURCE_DIR) + "/";
      if (file.rfind(root, 0) == 0) file = file.substr(root.size());
      where = file + ":" + std::to_string(part.line_number()) + ": " + one_line(part.message());
      break;
    }
    const std::string line =
        std::string(info.test_suite_name()) + "." + info.name() + "\t" + where + "\n";
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return;  // the summary misses a line; the test's own result stands
    [[maybe_unused]] ssize_t written = ::write(fd, line.data(), line.size());
    ::close(fd);
  }

  void OnTestProgramEnd(const ::testing::UnitTest& unit) override {
    const char* code = std::getenv("DDPX_ALL_SKIPPED_EXIT");
    if (code == nullptr || *code == '\0' || !unit.Passed() || unit.test_to_run_count() == 0 ||
        unit.skipped_test_count() != unit.test_to_run_count())
      return;
    std::fflush(nullptr);
    std::_Exit(std::atoi(code));
  }
};

const bool kSkipLogInstalled = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new SkipLog);
  return true;
}();

}  // namespace
}  // namespace ddpx::test
