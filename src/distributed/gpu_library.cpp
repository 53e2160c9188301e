// Loading the GPU library (see gpu_library.h).
#include "distributed/gpu_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <vector>

#include "core/env.h"
#include "core/error.h"

namespace ddpx::dist {
namespace {

constexpr const char* kFileName = "libddpx-gpu.so";

struct State {
  bool tried = false;   // an automatic load was decided
  bool forced = false;  // a load whatever the machine was tried
  const gpu::Api* api = nullptr;
  std::string status = "not loaded yet";
  std::string error;  // set when a load was due and failed
};

// Function-local, so that the load before main finds them built whatever the order of static
// initialisation.
std::mutex& mutex() {
  static std::mutex m;
  return m;
}
State& state() {
  static State s;
  return s;
}

[[maybe_unused]] bool driver_present() {
  // Kept open: the CUDA runtime opens it again once libtorch asks.
  if (::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr) return true;
  struct stat st {};
  return ::stat("/dev/kfd", &st) == 0;
}

// Where the library may be: beside an installed ddpx-torch (bin/ and lib/), beside the program,
// in the build tree that made this program, in the prefix it installs to, then the loader's path.
[[maybe_unused]] std::vector<std::string> candidates() {
  std::vector<std::string> out;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path().parent_path() / "lib" / kFileName).string());
    out.push_back((exe.parent_path() / kFileName).string());
  }
#ifdef DDPX_GPU_LIBRARY_BUILT
  out.push_back(DDPX_GPU_LIBRARY_BUILT);
#endif
#ifdef DDPX_GPU_LIBRARY_INSTALLED
  out.push_back(DDPX_GPU_LIBRARY_INSTALLED);
#endif
  out.push_back(kFileName);
  return out;
}

// Under the mutex.
void load(bool force) {
  State& state = dist::state();
#ifndef DDPX_WITH_CUDA
  state.tried = state.forced = true;
  state.status = "not in this build (DDPX_WITH_CUDA=OFF: a CPU-only libtorch)";
  return;
#else
  if (!force) {
    state.tried = true;
    const std::string mode = env::get_or("DDPX_GPU_LIBRARY", "auto");
    if (mode == "0") {
      state.status = "not loaded: DDPX_GPU_LIBRARY=0";
      return;
    }
    if (mode != "1" && !driver_present()) {
      state.status = "not loaded: no GPU driver here (libcuda.so.1 does not load, no /dev/kfd)";
      return;
    }
  }
  state.forced = true;
  std::string tried;
  for (const auto& path : candidates()) {
    std::error_code ec;
    if (path.find('/') != std::string::npos && !std::filesystem::exists(path, ec)) continue;
    void* handle = ::dlopen(path.c_str(), RTLD_LAZY | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* why = ::dlerror();
      tried += fmt::format("; {}: {}", path, why != nullptr ? why : "dlopen failed");
      continue;
    }
    using Entry = const gpu::Api* (*)();
    auto entry = reinterpret_cast<Entry>(::dlsym(handle, "ddpx_gpu_api"));
    const gpu::Api* api = entry != nullptr ? entry() : nullptr;
    if (api == nullptr || api->version != gpu::kApiVersion) {
      tried += fmt::format("; {}: not this build's GPU library", path);
      continue;
    }
    state.api = api;
    state.status = "loaded from " + path;
    state.error.clear();
    return;
  }
  state.error = fmt::format(
      "the GPU library {} could not be loaded{}: rebuild or reinstall ddpx (it is built beside "
      "ddpx-torch), or set DDPX_GPU_LIBRARY=0 to run on the CPU without it",
      kFileName, tried.empty() ? " (not found)" : " (" + tried.substr(2) + ")");
  state.status = "not loaded: " + state.error;
#endif
}

// Every executable that links this loads the library before main (see gpu_library.h); a
// failure waits for the first call that needs the library.
[[maybe_unused]] const bool kLoadedAtStart = [] {
  try {
    gpu_api();
  } catch (...) {
  }
  return true;
}();

}  // namespace

const gpu::Api* gpu_api() {
  std::lock_guard<std::mutex> lock(mutex());
  State& state = dist::state();
  if (!state.tried) load(/*force=*/false);
  DDPX_CHECK(state.error.empty(), ErrorKind::kInternal, "{}", state.error);
  return state.api;
}

const gpu::Api* load_gpu_api() {
  std::lock_guard<std::mutex> lock(mutex());
  State& state = dist::state();
  if (!state.tried) load(/*force=*/false);
  if (state.api == nullptr && !state.forced) load(/*force=*/true);
  DDPX_CHECK(state.error.empty(), ErrorKind::kInternal, "{}", state.error);
  return state.api;
}

std::string gpu_library_status() {
  std::lock_guard<std::mutex> lock(mutex());
  State& state = dist::state();
  return state.status;
}

}  // namespace ddpx::dist
