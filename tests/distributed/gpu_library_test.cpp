// The GPU library (distributed/gpu_library.h): built and linked in every CUDA build, loaded only
// where a GPU driver is. Checked on real processes, through the dynamic loader's own record of
// what it opened (LD_DEBUG=files): `ddpx train --help` opens no libtorch_cuda on a host without
// a driver, opens it with DDPX_GPU_LIBRARY=1; the library, loaded in this process, gives NCCL's
// version, and loaded late by `ddpx doctor`, it leaves libtorch's CUDA hooks answering.
#include "distributed/gpu_library.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <regex>

#include "support/support.h"

namespace ddpx::dist {
namespace {

// Whether libcuda.so.1 loads here (a GPU driver): the automatic load's condition.
bool driver_here() { return ::dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) != nullptr; }

// The libraries the loader opened for `ddpx train --help` (its lines "file=NAME [0];  ...").
std::string opened(const std::string& env) {
  auto r = test::run_command(env + " LD_DEBUG=files " + test::ddpx_command("train --help"), 60);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(GpuLibraryTest, AProcessOnTheCpuOpensNoCudaLibrary) {
#ifndef DDPX_WITH_CUDA
  GTEST_SKIP() << "a build without CUDA has no GPU library";
#endif
  if (driver_here()) GTEST_SKIP() << "this host has a GPU driver: ddpx loads the library here";
  const std::string automatic = opened("");
  EXPECT_TRUE(test::has(automatic, "libtorch_cpu.so")) << automatic;
  EXPECT_FALSE(test::has(automatic, "libtorch_cuda.so")) << automatic;
  EXPECT_FALSE(test::has(automatic, "libddpx-gpu.so")) << automatic;
  const std::string asked = opened("DDPX_GPU_LIBRARY=1");
  EXPECT_TRUE(test::has(asked, "libddpx-gpu.so")) << asked;
  EXPECT_TRUE(test::has(asked, "libtorch_cuda.so")) << asked;
  EXPECT_FALSE(test::has(opened("DDPX_GPU_LIBRARY=0"), "libtorch_cuda.so"));
}

TEST(GpuLibraryTest, LoadedWhateverTheMachineItAnswers) {
#ifndef DDPX_WITH_CUDA
  GTEST_SKIP() << "a build without CUDA has no GPU library";
#endif
  if (!driver_here()) EXPECT_EQ(gpu_api(), nullptr) << gpu_library_status();
  const gpu::Api* api = load_gpu_api();
  ASSERT_NE(api, nullptr) << gpu_library_status();
  EXPECT_EQ(api, gpu_api()) << "loaded once, then every caller has it";
  EXPECT_TRUE(test::has(gpu_library_status(), "loaded from ")) << gpu_library_status();
  EXPECT_TRUE(test::has(gpu_library_status(), "libddpx-gpu.so")) << gpu_library_status();
  EXPECT_FALSE(api->nccl_version().empty());
  // In ddpx-torch, which links libtorch's CPU part alone, `ddpx doctor` loads it after libtorch
  // started: libtorch's CUDA hooks are libtorch_cuda's then (the CPU-only stubs would throw).
  auto doctor = test::run_command(test::ddpx_command("doctor"), 120);
  EXPECT_EQ(doctor.exit_code, 0) << doctor.output;
  EXPECT_TRUE(std::regex_search(doctor.output, std::regex("gpu +library +loaded from \\S+/"
                                                          "libddpx-gpu\\.so")))
      << doctor.output;
  EXPECT_TRUE(std::regex_search(doctor.output,
                                std::regex("ok +gpu +runtime +CUDA [0-9]+\\.[0-9]+ \\(libtorch's")))
      << doctor.output;
}

}  // namespace
}  // namespace ddpx::dist
