// `ddpx container --cuda|--rocm|--cpu [--out DIR] [--base IMAGE:TAG]`: writes a Dockerfile and a
// README that build ddpx on the matching PyTorch image (src/launch/container.h). Torch-free.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "core/error.h"
#include "launch/container.h"

namespace ddpx::cli {

void add_container_command(CLI::App& app, int& exit_code) {
  struct Flags {
    bool cuda = false, rocm = false, cpu = false;
    std::string out, base;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "container",
      "Write a Dockerfile and README that build ddpx on the official PyTorch image for CUDA or "
      "ROCm (or Debian for CPU), with `ddpx doctor` as the health check and no SSH server");
  auto* cuda = cmd->add_flag("--cuda", f->cuda, "NVIDIA GPUs: pytorch/pytorch (CUDA 13.0)");
  auto* rocm = cmd->add_flag("--rocm", f->rocm, "AMD GPUs: rocm/pytorch (ROCm 6.4.1)");
  auto* cpu = cmd->add_flag("--cpu", f->cpu, "CPU only: Debian 12, like the development machine");
  cuda->excludes(rocm)->excludes(cpu);
  rocm->excludes(cpu);
  cmd->add_option("--out", f->out, "Folder for the files (default: container/<kind>)");
  cmd->add_option("--base", f->base, "Another base image, pinned as IMAGE:TAG");
  cmd->callback([f, &exit_code] {
    DDPX_CHECK(f->cuda || f->rocm || f->cpu, ErrorKind::kUsage,
               "ddpx container: choose one of --cuda, --rocm or --cpu");
    auto kind = f->cuda   ? launch::ContainerKind::kCuda
                : f->rocm ? launch::ContainerKind::kRocm
                          : launch::ContainerKind::kCpu;
    std::string name = f->cuda ? "cuda" : f->rocm ? "rocm" : "cpu";
    std::string dir = f->out.empty() ? "container/" + name : f->out;
    for (const std::string& path : launch::write_container_files(kind, f->base, dir))
      std::printf("wrote %s\n", path.c_str());
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
