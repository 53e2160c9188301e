// ddpx's one exception type. Library code throws ddpx::Error; only cli/ turns it into a
// message and an exit code. A message is one line: what happened, what was expected, and
// what to do next (for data: the download command; for flags: the valid values).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ddpx {

enum class ErrorKind {
  kUsage,     // a bad flag or argument: exit code 2
  kData,      // a missing, truncated or corrupt input file
  kIo,        // the file system or network failed
  kDist,      // rendezvous, process group, collective
  kTimeout,   // something did not finish in time
  kInternal,  // a bug in ddpx
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

const char* error_kind_name(ErrorKind kind);

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ddpx

// DDPX_CHECK(cond, kind, "fmt", args...): throws ddpx::Error(kind, message) when cond is false.
#define DDPX_CHECK(cond, kind, ...)               \
  do {                                            \
    if (!(cond)) ::ddpx::fail(kind, __VA_ARGS__); \
  } while (false)
