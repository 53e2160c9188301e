// libFuzzer target: unpacking an archive (io/archive.h, libarchive underneath) from bytes into
// a private temporary folder, emptied after every input. A ddpx::Error is a correct rejection;
// a crash, leak, sanitizer report, or any file written outside the destination is a bug.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/error.h"
#include "io/archive.h"

namespace fs = std::filesystem;

namespace {
fs::path root;  // holds dest/ (where entries may land) and nothing else
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string tmpl = (fs::temp_directory_path() / "ddpx-fuzz-archive-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  root = tmpl;
  std::atexit([] { fs::remove_all(root); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const fs::path dest = root / "dest";
  try {
    ddpx::io::extract_archive_bytes(bytes, "fuzz", dest.string(), 1 << 24);
  } catch (const ddpx::Error&) {
  }
  // Only dest/ may exist under root: an entry written beside it escaped the destination.
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path() != dest) std::abort();
  fs::remove_all(dest);
  return 0;
}
