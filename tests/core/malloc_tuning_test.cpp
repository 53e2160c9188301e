// tune_malloc(): memory freed at the end of a step is reused by the next one instead of going
// back to the kernel and being faulted in again page by page (the cost it removes from every
// training step).
#include "core/malloc_tuning.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace ddpx {
namespace {

long minor_faults() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Page faults of the 4th "step" (allocate blocks of 1..8 MiB, fill them, free them), in a
// fresh child process: glibc's malloc state is per process, and this one's is not fresh.
long faults_in_fourth_step(bool tuned) {
  int fds[2];
  if (::pipe(fds) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    if (tuned && !tune_malloc()) ::_exit(1);
    long faults = 0;
    for (int step = 0; step < 4; ++step) {
      long before = minor_faults();
      char* blocks[8];
      for (int i = 0; i < 8; ++i) {
        size_t bytes = size_t(i + 1) << 20;
        blocks[i] = static_cast<char*>(std::malloc(bytes));
        std::memset(blocks[i], 1, bytes);
        asm volatile("" : : "r"(blocks[i]) : "memory");  // the fill must happen
      }
      for (char* block : blocks) std::free(block);
      faults = minor_faults() - before;
    }
    ssize_t written = ::write(fds[1], &faults, sizeof(faults));
    ::_exit(written == sizeof(faults) ? 0 : 1);
  }
  ::close(fds[1]);
  long faults = -1;
  if (::read(fds[0], &faults, sizeof(faults)) != sizeof(faults)) faults = -1;
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return faults;
}

TEST(MallocTuningTest, FreedBlocksAreReusedWithoutPageFaults) {
  ASSERT_EQ(std::getenv("MALLOC_MMAP_THRESHOLD_"), nullptr) << "the test needs glibc's defaults";
  ASSERT_EQ(std::getenv("GLIBC_TUNABLES"), nullptr) << "the test needs glibc's defaults";
  // glibc's defaults: 36 MiB (9216 pages) faulted in again at every step.
  EXPECT_GT(faults_in_fourth_step(false), 5000);
  EXPECT_LT(faults_in_fourth_step(true), 100);
}

TEST(MallocTuningTest, LeavesTheUsersSettingAlone) {
  ::setenv("DDPX_MALLOC", "system", 1);
  EXPECT_FALSE(tune_malloc());
  ::unsetenv("DDPX_MALLOC");
  ::setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1", 1);
  EXPECT_FALSE(tune_malloc());
  ::unsetenv("GLIBC_TUNABLES");
}

}  // namespace
}  // namespace ddpx
