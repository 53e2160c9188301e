// The service's GPU figures on AMD hosts: amd-smi's JSON (ROCm 6's array and ROCm 7's
// "gpu_data"), its partition modes, and rocm-smi's JSON where amd-smi is missing, read from the
// fixtures in tests/fixtures/serve/ (written after the documented formats: SOURCES.md says so);
// then a running service whose PATH has an `amd-smi` printing them shows them at /api/v1/host.
#include "serve/gpu_readings.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "serve/service.h"
#include "support/support.h"

namespace ddpx::serve {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(DDPX_SOURCE_DIR) + "/tests/fixtures/serve/" + name);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

TEST(GpuReadingsTest, AmdSmiMetricGivesEachMi300xsFigures) {
  auto gpus = parse_amd_smi_metric(fixture("amd-smi-metric-mi300x.json"));
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_EQ(gpus[0].vendor, "amd");
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_DOUBLE_EQ(gpus[0].utilization_pct, 100);
  EXPECT_DOUBLE_EQ(gpus[0].memory_used_mib, 154232);
  EXPECT_DOUBLE_EQ(gpus[0].memory_total_mib, 196592);
  EXPECT_DOUBLE_EQ(gpus[0].power_w, 739);
  EXPECT_DOUBLE_EQ(gpus[0].temperature_c, 78);  // the hotspot: an MI300X has no edge sensor
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_DOUBLE_EQ(gpus[1].utilization_pct, 0);
  EXPECT_DOUBLE_EQ(gpus[1].power_w, 141);

  add_amd_smi_partitions(fixture("amd-smi-static-partition-mi300x.json"), gpus);
  EXPECT_EQ(gpus[0].compute_partition, "SPX");
  EXPECT_EQ(gpus[1].memory_partition, "NPS1");
}

TEST(GpuReadingsTest, Rocm7sGpuDataAndAGpuAnsweringNaAreRead) {
  auto gpus = parse_amd_smi_metric(fixture("amd-smi-metric-mi300x-gpu-data.json"));
  ASSERT_EQ(gpus.size(), 2u);
  EXPECT_DOUBLE_EQ(gpus[0].memory_used_mib, 154232);
  EXPECT_EQ(gpus[1].index, 1);  // listed, with no figures
  EXPECT_DOUBLE_EQ(gpus[1].utilization_pct, 0);
  EXPECT_DOUBLE_EQ(gpus[1].memory_total_mib, 0);
}

TEST(GpuReadingsTest, RocmSmiJsonGivesTheSameFiguresInItsOwnUnits) {
  auto gpus = parse_rocm_smi_json(fixture("rocm-smi-mi300x.json"));
  ASSERT_EQ(gpus.size(), 2u);  // "system" is not a GPU
  EXPECT_EQ(gpus[0].vendor, "amd");
  EXPECT_DOUBLE_EQ(gpus[0].utilization_pct, 100);
  EXPECT_NEAR(gpus[0].memory_used_mib, 154232, 0.5);     // bytes / 2^20
  EXPECT_NEAR(gpus[0].memory_total_mib, 196288.5, 0.5);  // 205822885888 B
  EXPECT_DOUBLE_EQ(gpus[0].power_w, 739);
  EXPECT_DOUBLE_EQ(gpus[0].temperature_c, 78);
  EXPECT_EQ(gpus[0].compute_partition, "SPX");
  EXPECT_EQ(gpus[0].memory_partition, "NPS1");
  EXPECT_EQ(gpus[1].index, 1);
}

TEST(GpuReadingsTest, WhatIsNotTheToolsJsonGivesNoGpu) {
  for (const char* text : {"", "not json", "{}", "[]", "[{\"no_gpu_key\": 1}]", "ERROR: no GPU"}) {
    EXPECT_TRUE(parse_amd_smi_metric(text).empty()) << text;
    EXPECT_TRUE(parse_rocm_smi_json(text).empty()) << text;
  }
}

// The service on an AMD host: `amd-smi` on its PATH (a script printing the fixtures, as the real
// tool prints them; no nvidia-smi here) and /api/v1/host lists both GPUs with their partitions.
TEST(GpuReadingsTest, TheServiceShowsAnAmdHostsGpus) {
  test::TempDir dir;
  const std::string bin = dir.file("bin");
  ASSERT_EQ(test::run_command("mkdir -p " + test::shell_quote(bin)).exit_code, 0);
  const std::string fixtures = std::string(DDPX_SOURCE_DIR) + "/tests/fixtures/serve/";
  {
    std::ofstream smi(bin + "/amd-smi");
    smi << "#!/bin/sh\ncase \"$1\" in\n"
        << "  metric) exec cat '" << fixtures << "amd-smi-metric-mi300x.json' ;;\n"
        << "  static) exec cat '" << fixtures << "amd-smi-static-partition-mi300x.json' ;;\n"
        << "esac\nexit 2\n";
  }
  ::chmod((bin + "/amd-smi").c_str(), 0755);
  serve_testing::Service s(dir, "--slots 2", "PATH=" + bin + ":/usr/bin:/bin");
  std::string token = s.token("admin", /*admin=*/true);
  auto r = s.client().Get("/api/v1/host", {{"Authorization", "Bearer " + token}});
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  auto host = nlohmann::json::parse(r->body);
  ASSERT_EQ(host["gpus"].size(), 2u) << r->body;
  EXPECT_EQ(host["gpus"][0]["vendor"], "amd");
  EXPECT_EQ(host["gpus"][0]["compute_partition"], "SPX");
  EXPECT_EQ(host["gpus"][1]["memory_partition"], "NPS1");
  EXPECT_DOUBLE_EQ(host["gpus"][0]["power_w"].get<double>(), 739);
}

}  // namespace
}  // namespace ddpx::serve
