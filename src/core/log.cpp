#include "core/log.h"

#include <atomic>
#include <mutex>

namespace ddpx::log {
namespace {
std::atomic<int> g_rank{0};
std::atomic<bool> g_all{false};
std::mutex g_mutex;
}  // namespace

void set_rank(int rank) { g_rank = rank; }
int rank() { return g_rank; }
void set_all_ranks(bool all) { g_all = all; }
bool enabled() { return g_all || g_rank == 0; }

void write_line(std::FILE* stream, const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string whole = line + "\n";  // one write: lines of ranks sharing a pipe never interleave
  std::fwrite(whole.data(), 1, whole.size(), stream);
  std::fflush(stream);
}

}  // namespace ddpx::log
