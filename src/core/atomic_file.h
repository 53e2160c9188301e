// Atomic file writes: the bytes go to a temporary file in the same directory, are flushed
// and fsync'ed, then renamed over the target, and the directory is fsync'ed. A crash (even
// kill -9) at any point leaves either the old file or the new one, never a torn one.
// A failed write (disk full, permission) throws kIo and leaves the old file untouched. The file
// keeps the mode of the one it replaces; a new one gets 0666 less the umask, as open(2) gives.
#pragma once

#include <string>
#include <string_view>

namespace ddpx {

void write_file_atomic(const std::string& path, std::string_view bytes);
std::string read_file(const std::string& path);  // throws kIo naming the path

}  // namespace ddpx
