// The GPU figures of /api/v1/host and /metrics, read from nvidia-smi's CSV query output
// (its documented `--format=csv,noheader,nounits` form: one line a GPU, ", " between fields).
// This machine has no GPU; on one, the service reads the same lines from the real tool.
#include "serve/host_metrics.h"

#include <gtest/gtest.h>

namespace ddpx::serve {
namespace {

TEST(HostMetricsTest, NvidiaSmiCsvGivesEachGpusFigures) {
  auto gpus = parse_nvidia_smi_gpus(
      "0, 97, 71234, 81559, 63, 612.45\n"
      "1, 0, 4, 81559, 31, 69.12\n");
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_DOUBLE_EQ(gpus[0].utilization_pct, 97);
  EXPECT_DOUBLE_EQ(gpus[0].memory_used_mib, 71234);
  EXPECT_DOUBLE_EQ(gpus[0].memory_total_mib, 81559);
  EXPECT_DOUBLE_EQ(gpus[0].temperature_c, 63);
  EXPECT_DOUBLE_EQ(gpus[0].power_w, 612.45);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_DOUBLE_EQ(gpus[1].power_w, 69.12);
}

TEST(HostMetricsTest, FiguresAGpuDoesNotReportReadZero) {
  // Power is "[N/A]" on some boards (and in some containers), temperature on MIG slices.
  auto gpus = parse_nvidia_smi_gpus("3, 12, 2048, 15360, [N/A], [Not Supported]\n");
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].index, 3);
  EXPECT_DOUBLE_EQ(gpus[0].memory_used_mib, 2048);
  EXPECT_DOUBLE_EQ(gpus[0].temperature_c, 0);
  EXPECT_DOUBLE_EQ(gpus[0].power_w, 0);
}

TEST(HostMetricsTest, LinesThatAreNoGpuAreSkipped) {
  EXPECT_TRUE(parse_nvidia_smi_gpus("").empty());
  EXPECT_TRUE(parse_nvidia_smi_gpus("NVIDIA-SMI has failed because it couldn't communicate with "
                                    "the NVIDIA driver.\n")
                  .empty());
  EXPECT_EQ(parse_nvidia_smi_gpus("0, [N/A], 1, 2, 3, 4\n1, 5, 6, 7, 8, 9\n").size(), 1u);
}

}  // namespace
}  // namespace ddpx::serve
