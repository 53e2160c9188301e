#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace ddpx {
namespace {

void fsync_directory(const std::filesystem::path& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// The mode a new file gets from open(2): 0666 less the umask, read from /proc so that no
// thread's umask(2) call races another's (Linux 4.7+; else the usual 022).
mode_t new_file_mode() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Umask:", 0) == 0)
      return 0666 & ~static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  return 0644;
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  fs::path target(path);
  fs::path dir = target.parent_path();
  std::string tmp_template = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  int fd = ::mkstemp(tmp_template.data());
  DDPX_CHECK(fd >= 0, ErrorKind::kIo, "cannot create a temporary file beside {}: {}", path,
             std::strerror(errno));
  // mkstemp makes the file 0600: give it the mode it replaces, else a new file's (what
  // open(2) would), so that others read checkpoints, token files and indexes as before.
  struct stat old_file {};
  ::fchmod(fd, ::stat(path.c_str(), &old_file) == 0 ? (old_file.st_mode & 07777) : new_file_mode());
  const char* data = bytes.data();
  size_t left = bytes.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp_template.c_str());
      fail(ErrorKind::kIo, "writing {} failed: {} (the previous file is kept)", path,
           std::strerror(err));
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp_template.c_str());
    fail(ErrorKind::kIo, "flushing {} failed: {} (the previous file is kept)", path,
         std::strerror(err));
  }
  if (::rename(tmp_template.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp_template.c_str());
    fail(ErrorKind::kIo, "renaming {} into place failed: {}", path, std::strerror(err));
  }
  fsync_directory(dir);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in.good(), ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  DDPX_CHECK(!in.bad(), ErrorKind::kIo, "reading {} failed", path);
  return buffer.str();
}

}  // namespace ddpx
