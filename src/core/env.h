// Reading the process environment with validation: a malformed value is a usage error
// naming the variable, never a silent default.
#pragma once

#include <optional>
#include <string>

namespace ddpx::env {

std::optional<std::string> get(const char* name);
std::optional<long> get_int(const char* name);  // throws kUsage when set but not an integer
long get_int_or(const char* name, long fallback);
std::string get_or(const char* name, const std::string& fallback);

}  // namespace ddpx::env
