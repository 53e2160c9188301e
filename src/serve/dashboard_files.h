// The dashboard's files (src/serve/dashboard/: its page, script and style), embedded into the
// binary at build time by cmake/embed_files.cmake, which generates their definition.
#pragma once

#include <cstddef>

namespace ddpx::serve {

struct EmbeddedFile {
  const char* name;  // the file name, e.g. "dashboard.js"; null in the last entry
  const unsigned char* data;
  size_t size;
};

extern const EmbeddedFile kDashboardFiles[];  // ends with {nullptr, nullptr, 0}

}  // namespace ddpx::serve
