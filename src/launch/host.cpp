#include "launch/host.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>

#include "core/env.h"
#include "core/error.h"
#include "core/subprocess.h"

namespace ddpx::launch {
namespace fs = std::filesystem;

namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(separator, start);
    if (end == std::string::npos) end = text.size();
    if (end > start) out.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// Counts entries of `dir` whose names match `pattern` (e.g. nvidia0, renderD128).
int count_devices(const char* dir, const std::regex& pattern) {
  std::error_code ec;
  int count = 0;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (std::regex_match(it->path().filename().string(), pattern)) ++count;
  }
  return count;
}

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// `nvidia-smi -L` prints one "GPU i: name (UUID: ...)" line per device.
int count_nvidia_smi_gpus() {
  std::string smi;
  try {
    smi = find_program("nvidia-smi");
  } catch (const Error&) {
    return 0;
  }
  ProgramOutput listing = run_program({smi, "-L"}, 30, ProgramStderr::kDropped);
  int count = 0;
  for (const std::string& line : split(listing.output, '\n')) {
    if (line.rfind("GPU ", 0) == 0) ++count;
  }
  return count;
}

std::vector<std::string> numbered(int count) {
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) ids.push_back(std::to_string(i));
  return ids;
}

}  // namespace

const char* visible_devices_variable(GpuVendor vendor) {
  return vendor == GpuVendor::kAmd ? "HIP_VISIBLE_DEVICES" : "CUDA_VISIBLE_DEVICES";
}

int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 ? static_cast<int>(online) : 1;
}

GpuInfo detect_gpus() {
  GpuInfo info;
  // Where the device nodes are: /dev, or DDPX_DEVICE_DIR (a container that mounts them
  // elsewhere; the tests, which lay out nvidia0, kfd and dri/renderD128 as plain files).
  std::string dev = env::get_or("DDPX_DEVICE_DIR", "/dev");
  int nvidia = count_devices(dev.c_str(), std::regex("nvidia[0-9]+"));
  if (nvidia == 0 && fs::exists(dev + "/nvidiactl")) nvidia = count_nvidia_smi_gpus();
  if (nvidia > 0) {
    info.vendor = GpuVendor::kNvidia;
    // A scheduler (Slurm, a container runtime) may already have narrowed the set: its ids win.
    auto visible = env::get("CUDA_VISIBLE_DEVICES");
    info.ids = visible ? split(*visible, ',') : numbered(nvidia);
    return info;
  }
  if (fs::exists(dev + "/kfd")) {
    int amd = count_devices((dev + "/dri").c_str(), std::regex("renderD[0-9]+"));
    if (amd > 0) {
      info.vendor = GpuVendor::kAmd;
      auto visible = env::get("HIP_VISIBLE_DEVICES");
      if (!visible) visible = env::get("ROCR_VISIBLE_DEVICES");
      info.ids = visible ? split(*visible, ',') : numbered(amd);
    }
  }
  return info;
}

std::string find_program(const std::string& name) {
  DDPX_CHECK(!name.empty(), ErrorKind::kUsage, "the program after `--` is empty");
  if (name.find('/') != std::string::npos) {
    DDPX_CHECK(is_executable_file(name), ErrorKind::kUsage,
               "'{}' is not an executable file; check the path and `chmod +x` it", name);
    return name;
  }
  std::string path = env::get_or("PATH", "/usr/local/bin:/usr/bin:/bin");
  for (const std::string& dir : split(path, ':')) {
    std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  fail(ErrorKind::kUsage,
       "program '{}' is neither a ddpx subcommand nor found on PATH; give its path "
       "(e.g. ./{})",
       name, name);
}

std::string self_executable() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  DDPX_CHECK(!ec, ErrorKind::kIo, "cannot read /proc/self/exe ({}); is /proc mounted?",
             ec.message());
  return exe.string();
}

}  // namespace ddpx::launch

namespace ddpx::launch {

void check_master_addr(const std::string& addr, bool this_node_hosts_it) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), nullptr, &hints, &found);
  DDPX_CHECK(rc == 0 && found, ErrorKind::kUsage,
             "--master_addr {} does not resolve ({}); give node 0's address or host name, "
             "reachable from every node",
             addr, ::gai_strerror(rc));
  bool local = false;
  for (addrinfo* a = found; a && !local; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EADDRINUSE;
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (!this_node_hosts_it || local) return;
  std::string mine;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text,
                  sizeof(text));
      mine += (mine.empty() ? "" : ", ") + std::string(text);
    }
    ::freeifaddrs(list);
  }
  fail(ErrorKind::kUsage,
       "--master_addr {} is not an address of this host, and node 0 (--node_rank 0) hosts the "
       "rendezvous there; run node 0 where that address lives or give one of: {}",
       addr, mine);
}

}  // namespace ddpx::launch
