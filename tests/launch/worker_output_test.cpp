// A worker's output: the log gets every byte, the console gets whole prefixed lines.
#include "launch/worker_output.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::launch {
namespace {

// Runs body with stdout redirected to a file; returns what it printed.
template <typename Body>
std::string capture_stdout(const std::string& path, Body body) {
  std::fflush(stdout);
  int saved = ::dup(STDOUT_FILENO);
  std::FILE* file = std::fopen(path.c_str(), "w");
  ::dup2(::fileno(file), STDOUT_FILENO);
  body();
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  std::fclose(file);
  return read_file(path);
}

TEST(WorkerOutputTest, PrefixedConsoleGetsWholeLinesAndLogGetsRawBytes) {
  test::TempDir dir;
  std::string log = dir.file("rank3.log");
  std::string console = capture_stdout(dir.file("console"), [&] {
    WorkerOutput output(log, /*console=*/true, "[rank 3] ");
    output.write(false, "one\ntw", 6);
    output.write(false, "o\nthree", 7);
    output.finish();
  });
  EXPECT_EQ(console, "[rank 3] one\n[rank 3] two\n[rank 3] three\n");
  EXPECT_EQ(read_file(log), "one\ntwo\nthree");
}

TEST(WorkerOutputTest, QuietWorkerWritesOnlyItsLogAndTailGivesLastLines) {
  test::TempDir dir;
  std::string log = dir.file("rank1.log");
  std::string console = capture_stdout(dir.file("console"), [&] {
    WorkerOutput output(log, /*console=*/false, "");
    for (int i = 0; i < 30; ++i) {
      std::string line = "line " + std::to_string(i) + "\n";
      output.write(i % 2 == 1, line.data(), line.size());
    }
    std::vector<std::string> tail = output.tail(20);
    ASSERT_EQ(tail.size(), 20u);
    EXPECT_EQ(tail.front(), "line 10");
    EXPECT_EQ(tail.back(), "line 29");
  });
  EXPECT_EQ(console, "");
}

TEST(WorkerOutputTest, UnwritableLogIsAnIoErrorNamingThePath) {
  try {
    WorkerOutput output("/nonexistent_ddpx_dir/rank0.log", false, "");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("/nonexistent_ddpx_dir/rank0.log"), std::string::npos);
  }
}

}  // namespace
}  // namespace ddpx::launch
