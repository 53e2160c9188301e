// The GPU tools' parsers on outputs recorded on real machines (tests/fixtures/doctor/, sources
// in SOURCES.md there): 8x H100 nvidia-smi, H100/A100 NVLink and PCIe-only topologies, 8x
// MI300X rocm-smi in SPX and CPX modes (both table layouts), rocm-smi --showtoponuma, amd-smi
// static --partition.
#include "doctor/gpu_tools.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/support.h"

namespace ddpx::doctor {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(test::source_dir() + "/tests/fixtures/doctor/" + name);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << name;
  return text.str();
}

TEST(GpuToolsTest, NvidiaSmiTableGivesDriverGpusMemoryAndProcesses) {
  NvidiaSmi smi = parse_nvidia_smi(fixture("nvidia-smi.txt"));
  EXPECT_EQ(smi.driver, "570.124.06");
  EXPECT_EQ(smi.cuda, "12.8");
  ASSERT_EQ(smi.gpus.size(), 8u);
  EXPECT_EQ(smi.gpus[0].index, "0");
  EXPECT_EQ(smi.gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(smi.gpus[0].memory_used_mib, 5856);
  EXPECT_EQ(smi.gpus[0].memory_total_mib, 81559);
  EXPECT_EQ(smi.gpus[1].memory_used_mib, 1518);
  EXPECT_EQ(smi.gpus[7].index, "7");
  ASSERT_EQ(smi.processes.size(), 15u);
  EXPECT_EQ(smi.processes[0].gpu, "0");
  EXPECT_EQ(smi.processes[0].pid, "40006");
  EXPECT_EQ(smi.processes[0].name, "/usr/local/bin/python");
  EXPECT_EQ(smi.processes[14].gpu, "7");
}

TEST(GpuToolsTest, TopologyTellsNvlinkFromPcie) {
  Topology h100 = parse_nvidia_topology(fixture("nvidia-smi-topo.txt"));
  ASSERT_EQ(h100.gpus.size(), 8u);
  EXPECT_EQ(h100.links.size(), 28u);  // 8 choose 2
  EXPECT_TRUE(h100.all_nvlink());
  EXPECT_EQ(h100.links.at({0, 7}), "NV18");
  EXPECT_EQ(h100.summary(), "8 GPUs; GPU pairs by link: NV18 x28");
  Topology a100 = parse_nvidia_topology(fixture("nvidia-smi-topo-a100-p4d.txt"));
  EXPECT_TRUE(a100.all_nvlink());
  EXPECT_EQ(a100.links.at({2, 5}), "NV12");
  Topology pcie = parse_nvidia_topology(fixture("nvidia-smi-topo-pcie.txt"));
  ASSERT_EQ(pcie.gpus.size(), 4u);
  EXPECT_FALSE(pcie.all_nvlink());
  EXPECT_EQ(pcie.summary(), "4 GPUs; GPU pairs by link: NODE x6");
}

// Each GPU's NUMA node, from both vendors' tools: 8x H100 on two sockets, 4x L40S on one, and
// rocm-smi's 8 GPUs on two nodes (whose "Numa Affinity" lines are not the node).
TEST(GpuToolsTest, TopologyGivesEachGpusNumaNode) {
  Topology h100 = parse_nvidia_topology(fixture("nvidia-smi-topo.txt"));
  ASSERT_EQ(h100.numa_node.size(), 8u);
  EXPECT_EQ(h100.numa_node.at(3), "0");
  EXPECT_EQ(h100.numa_node.at(4), "1");
  EXPECT_EQ(h100.numa_summary(), "GPU 0-3 on NUMA node 0, GPU 4-7 on NUMA node 1");
  Topology pcie = parse_nvidia_topology(fixture("nvidia-smi-topo-pcie.txt"));
  EXPECT_EQ(pcie.numa_summary(), "GPU 0-3 on NUMA node 0") << "not the GPU NUMA ID column (N/A)";

  Topology amd = parse_rocm_smi_numa(fixture("rocm-smi-showtoponuma.txt"));
  ASSERT_EQ(amd.gpus.size(), 8u);
  EXPECT_TRUE(amd.links.empty());
  EXPECT_EQ(amd.numa_node.at(0), "0");
  EXPECT_EQ(amd.numa_node.at(7), "1");
  EXPECT_EQ(amd.numa_summary(), "GPU 0-3 on NUMA node 0, GPU 4-7 on NUMA node 1");
  // Neither tool's other outputs hold a NUMA placement.
  EXPECT_TRUE(parse_rocm_smi_numa(fixture("rocm-smi-mi300x.txt")).numa_node.empty());
}

// GPUs interleaved across nodes stay one entry per run, in GPU order.
TEST(GpuToolsTest, NumaSummaryGroupsRunsOfGpus) {
  Topology t;
  t.numa_node = {{0, "0"}, {1, "1"}, {2, "0"}, {3, "0"}, {5, "N/A"}};
  EXPECT_EQ(t.numa_summary(),
            "GPU 0 on NUMA node 0, GPU 1 on NUMA node 1, GPU 2-3 on NUMA node 0, GPU 5 on NUMA "
            "node N/A");
}

TEST(GpuToolsTest, RocmSmiGivesPartitionsInBothLayouts) {
  auto spx = parse_rocm_smi(fixture("rocm-smi-mi300x.txt"));
  ASSERT_EQ(spx.size(), 8u);
  for (const GpuRow& g : spx) {
    EXPECT_EQ(g.memory_partition, "NPS1") << g.index;
    EXPECT_EQ(g.compute_partition, "SPX") << g.index;
    EXPECT_EQ(g.name, "AMD Instinct MI300X") << g.index;
  }
  auto spx2 = parse_rocm_smi(fixture("rocm-smi-mi300x-spx-v2.txt"));
  ASSERT_EQ(spx2.size(), 8u);
  EXPECT_EQ(spx2[7].compute_partition, "SPX");
  auto cpx = parse_rocm_smi(fixture("rocm-smi-mi300x-cpx.txt"));
  ASSERT_EQ(cpx.size(), 63u);  // as published: one physical GPU shows 7 of its 8 partitions
  EXPECT_EQ(cpx[0].memory_partition, "NPS4");
  EXPECT_EQ(cpx[62].compute_partition, "CPX");
}

TEST(GpuToolsTest, AmdSmiStaticPartitionGivesEachGpusModes) {
  auto rows = parse_amd_smi_partitions(fixture("amd-smi-static-partition-mi300x-cpx-nps4.txt"));
  ASSERT_EQ(rows.size(), 64u);
  EXPECT_EQ(rows[0].index, "0");
  EXPECT_EQ(rows[0].compute_partition, "CPX");
  EXPECT_EQ(rows[63].memory_partition, "NPS4");
}

}  // namespace
}  // namespace ddpx::doctor
