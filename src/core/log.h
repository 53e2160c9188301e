// Rank-aware logging. By default only rank 0 prints (like torchrun jobs written with
// `if rank == 0: print(...)`); `set_log_all_ranks(true)` lets every rank print, each line
// prefixed with its rank. Results (the seed's epoch lines) go to stdout; diagnostics to stderr.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <string>

namespace ddpx::log {

void set_rank(int rank);
int rank();
void set_all_ranks(bool all);
bool enabled();  // does this rank print?

void write_line(std::FILE* stream, const std::string& line);

// A result line on stdout (rank 0 unless all ranks print).
template <typename... Args>
void out(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled()) write_line(stdout, fmt::format(format, std::forward<Args>(args)...));
}

// A diagnostic on stderr (rank 0 unless all ranks print).
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled()) write_line(stderr, fmt::format(format, std::forward<Args>(args)...));
}

// A warning from any rank, always printed, prefixed with the rank.
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  write_line(stderr, fmt::format("[rank {}] warning: {}", rank(),
                                 fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace ddpx::log
