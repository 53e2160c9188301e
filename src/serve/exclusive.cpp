#include "serve/exclusive.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace ddpx::serve {
namespace {

// The socket inodes listening on `port` in /proc/net/tcp and tcp6 ("sl local rem st ... inode";
// local is HEXADDR:HEXPORT, st 0A is LISTEN).
std::vector<std::string> listening_inodes(int port) {
  std::vector<std::string> inodes;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, skip, inode;
      fields >> slot >> local >> remote >> state;
      // tx_queue:rx_queue, tr:tm->when, retrnsmt, uid, timeout; then the inode.
      for (int i = 0; i < 5; ++i) fields >> skip;
      fields >> inode;
      size_t colon = local.rfind(':');
      if (state != "0A" || colon == std::string::npos || inode.empty()) continue;
      if (std::stoi(local.substr(colon + 1), nullptr, 16) == port) inodes.push_back(inode);
    }
  }
  return inodes;
}

}  // namespace

StateLock::StateLock(const std::string& state_dir) {
  std::string path = state_dir + "/ddpx-serve.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  DDPX_CHECK(fd_ >= 0, ErrorKind::kIo, "--state {}: cannot open {}: {}", state_dir, path,
             std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    std::ifstream in(path);
    std::string pid;
    in >> pid;
    ::close(fd_);
    fd_ = -1;
    DDPX_CHECK(error == EWOULDBLOCK, ErrorKind::kIo, "--state {}: cannot lock {}: {}", state_dir,
               path, std::strerror(error));
    fail(ErrorKind::kUsage,
         "--state {}: another `ddpx serve` ({}) already serves this folder; use that one, stop "
         "it, or give another --state",
         state_dir, pid.empty() ? std::string("pid unknown") : "pid " + pid);
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) < 0) {
    // The lock holds without the pid; a refused second service then says "pid unknown".
  }
}

StateLock::~StateLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::string port_listener(int port) {
  std::vector<std::string> inodes = listening_inodes(port);
  if (inodes.empty()) return "";
  std::error_code ec;
  for (const auto& process : std::filesystem::directory_iterator("/proc", ec)) {
    std::string pid = process.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code fd_ec;
    for (const auto& fd : std::filesystem::directory_iterator(process.path() / "fd", fd_ec)) {
      std::error_code link_ec;
      std::string target = std::filesystem::read_symlink(fd.path(), link_ec).string();
      for (const std::string& inode : inodes) {
        if (target != "socket:[" + inode + "]") continue;
        std::ifstream comm(process.path() / "comm");
        std::string name;
        std::getline(comm, name);
        return "pid " + pid + (name.empty() ? "" : " (" + name + ")");
      }
    }
  }
  return "";
}

void exclusive_socket_options(int fd) {
  int yes = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
}

}  // namespace ddpx::serve
