// `ddpx container --cuda|--rocm|--cpu`: the seed's GPU Lab Builder as two files, a Dockerfile
// that builds ddpx on the matching official PyTorch image (pinned tag) with `ddpx doctor` as its
// health check and no SSH server, and a README with the build and run commands (the GPU passed
// with the runtime's own flags). The build context is the ddpx checkout.
#pragma once

#include <string>
#include <vector>

namespace ddpx::launch {

enum class ContainerKind { kCuda, kRocm, kCpu };

struct ContainerFiles {
  std::string dockerfile;
  std::string dockerignore;  // Dockerfile.dockerignore, which BuildKit reads beside it
  std::string readme;
};

// The pinned base image for a kind (base_override wins when not empty).
std::string container_base_image(ContainerKind kind);

ContainerFiles make_container_files(ContainerKind kind, const std::string& base_override);

// Writes the files into `dir` atomically; returns their paths.
std::vector<std::string> write_container_files(ContainerKind kind, const std::string& base_override,
                                               const std::string& dir);

}  // namespace ddpx::launch
