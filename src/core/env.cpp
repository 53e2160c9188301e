#include "core/env.h"

#include <cstdlib>

#include "core/error.h"

namespace ddpx::env {

std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<long> get_int(const char* name) {
  auto value = get(name);
  if (!value) return std::nullopt;
  char* end = nullptr;
  long parsed = std::strtol(value->c_str(), &end, 10);
  DDPX_CHECK(end != nullptr && *end == '\0', ErrorKind::kUsage,
             "environment variable {}='{}' is not an integer; unset it or give a whole number",
             name, *value);
  return parsed;
}

long get_int_or(const char* name, long fallback) { return get_int(name).value_or(fallback); }

std::string get_or(const char* name, const std::string& fallback) {
  return get(name).value_or(fallback);
}

}  // namespace ddpx::env
