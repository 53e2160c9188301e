#include "launch/container.h"

#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"

namespace ddpx::launch {
namespace {

const char* kind_name(ContainerKind kind) {
  switch (kind) {
    case ContainerKind::kCuda:
      return "cuda";
    case ContainerKind::kRocm:
      return "rocm";
    case ContainerKind::kCpu:
      return "cpu";
  }
  return "?";
}

// How `docker run` hands the devices over: NVIDIA's container toolkit, or ROCm's device files.
std::string run_flags(ContainerKind kind) {
  switch (kind) {
    case ContainerKind::kCuda:
      return "--gpus all --ipc=host --shm-size 16g";
    case ContainerKind::kRocm:
      return "--device=/dev/kfd --device=/dev/dri --group-add video --ipc=host --shm-size 16g "
             "--security-opt seccomp=unconfined";
    case ContainerKind::kCpu:
      return "--ipc=host --shm-size 4g";
  }
  return "";
}

}  // namespace

std::string container_base_image(ContainerKind kind) {
  switch (kind) {
    case ContainerKind::kCuda:  // the PyTorch release the GPU checks run on (2.11, CUDA 13.0)
      return "pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel";
    case ContainerKind::kRocm:  // AMD's PyTorch image for MI300X (ROCm 6.4.1, PyTorch 2.6)
      return "rocm/pytorch:rocm6.4.1_ubuntu24.04_py3.12_pytorch_release_2.6.0";
    case ContainerKind::kCpu:  // the machine ddpx is developed and tested on
      return "debian:12.11";
  }
  return "";
}

ContainerFiles make_container_files(ContainerKind kind, const std::string& base_override) {
  std::string base = base_override.empty() ? container_base_image(kind) : base_override;
  DDPX_CHECK(base.find(':') != std::string::npos && base.substr(base.rfind(':')) != ":latest",
             ErrorKind::kUsage,
             "--base {}: pin a tag (image:tag), not latest, so the image builds the same "
             "tomorrow",
             base);
  std::string name = kind_name(kind);
  bool has_torch = kind != ContainerKind::kCpu;
  ContainerFiles f;
  f.dockerfile = "# syntax=docker/dockerfile:1\n";
  f.dockerfile += fmt::format("# ddpx on {} (written by `ddpx container --{}`).\n", base, name);
  f.dockerfile += "# Build from the ddpx checkout: docker build -f container/" + name +
                  "/Dockerfile -t ddpx:" + name + " .\n";
  f.dockerfile += "FROM " + base + "\n";
  f.dockerfile += "ENV DEBIAN_FRONTEND=noninteractive\n";
  f.dockerfile += "WORKDIR /opt/ddpx\n";
  f.dockerfile += "COPY . /opt/ddpx\n";
  if (has_torch) {
    // The image's own PyTorch provides libtorch; bootstrap adds the build tools and libraries.
    f.dockerfile +=
        "RUN scripts/bootstrap && DDPX_PYTHON=\"$(command -v python3)\" scripts/build \\\n"
        "    && rm -rf /var/lib/apt/lists/*\n";
  } else {
    f.dockerfile +=
        "RUN apt-get update && apt-get install -y --no-install-recommends sudo ca-certificates \\\n"
        "    && scripts/bootstrap && scripts/build && rm -rf /var/lib/apt/lists/*\n";
  }
  f.dockerfile += "ENV PATH=/opt/ddpx/build/src:$PATH\n";
  f.dockerfile +=
      "# No SSH server: use `docker exec -it CONTAINER bash` or `ddpx shell N` inside.\n";
  f.dockerfile += "HEALTHCHECK --interval=5m --timeout=60s CMD [\"ddpx\", \"doctor\"]\n";
  f.dockerfile += "ENTRYPOINT [\"ddpx\"]\n";
  f.dockerfile += "CMD [\"doctor\"]\n";

  f.dockerignore = "build\nbuild-*\n.venv\nlog\n*.pt\n.git\n";

  std::string flags = run_flags(kind);
  f.readme = fmt::format("# ddpx in a container ({})\n\n", name);
  f.readme +=
      fmt::format("Base image: `{}` (pinned). Written by `ddpx container --{}`.\n\n", base, name);
  f.readme += "Build it from the ddpx checkout (the build context is the repository):\n\n";
  f.readme +=
      fmt::format("```\ndocker build -f container/{}/Dockerfile -t ddpx:{} .\n```\n\n", name, name);
  f.readme += "Check the host and the devices the container sees (also its health check):\n\n";
  f.readme += fmt::format("```\ndocker run --rm {} ddpx:{} doctor\n```\n\n", flags, name);
  f.readme += "Train with one worker per device:\n\n";
  f.readme += fmt::format(
      "```\ndocker run --rm {} -v \"$PWD/log:/opt/ddpx/log\" ddpx:{} \\\n"
      "  run 2 -- train --model resnet18 --dataset fashion-mnist --num_epochs 1\n```\n\n",
      flags, name);
  f.readme +=
      "There is no SSH server and no password: for an interactive session use\n"
      "`docker run -it ... --entrypoint bash ddpx:" +
      name +
      "` and `ddpx shell N` inside.\n"
      "`--ipc=host` (or a large `--shm-size`) matters: ddpx's shared-memory transport and the\n"
      "data loader use /dev/shm.\n";
  return f;
}

std::vector<std::string> write_container_files(ContainerKind kind, const std::string& base_override,
                                               const std::string& dir) {
  ContainerFiles f = make_container_files(kind, base_override);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  DDPX_CHECK(!ec, ErrorKind::kIo, "--out {}: cannot create it ({}); choose another folder", dir,
             ec.message());
  std::vector<std::string> paths = {dir + "/Dockerfile", dir + "/Dockerfile.dockerignore",
                                    dir + "/README.md"};
  write_file_atomic(paths[0], f.dockerfile);
  write_file_atomic(paths[1], f.dockerignore);
  write_file_atomic(paths[2], f.readme);
  return paths;
}

}  // namespace ddpx::launch
