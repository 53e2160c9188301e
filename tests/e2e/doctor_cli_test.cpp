// `ddpx doctor` end to end. On this machine: the real CPU host (versions, cores, /dev/shm, the
// dataset, other jobs' reservations). For GPU hosts: the vendors' tools replaced on PATH by
// scripts that print outputs recorded on real machines (tests/fixtures/doctor/), with
// CUDA_VISIBLE_DEVICES= so libtorch sees no GPU wherever the test runs.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;
using test::shell_quote;

struct Doctor {
  int exit_code;
  nlohmann::json findings;
  std::string output;
  // The finding of (area, name), or null.
  nlohmann::json get(const std::string& area, const std::string& name) const {
    for (const auto& f : findings)
      if (f["area"] == area && f["name"] == name) return f;
    return nullptr;
  }
};

Doctor doctor(const std::string& env) {
  auto r = run_command(env + " " + test::ddpx_command("doctor --json"), 120);
  Doctor d{r.exit_code, nullptr, r.output};
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
  if (!j.is_discarded()) d.findings = j["findings"];
  return d;
}

// A folder of fake vendor tools: each prints a recorded output (topo for `nvidia-smi topo -m`,
// the NUMA nodes for `rocm-smi --showtoponuma`).
std::string fake_tools(const test::TempDir& dir, const std::map<std::string, std::string>& tools) {
  std::string fixtures = test::source_dir() + "/tests/fixtures/doctor/";
  for (const auto& [name, body] : tools) {
    std::string path = dir.file(name);
    std::string script = "#!/bin/sh\n";
    if (name == "nvidia-smi")
      script += "[ \"$1\" = topo ] && exec cat " +
                shell_quote(fixtures + "nvidia-smi-topo-pcie.txt") + "\n";
    if (name == "rocm-smi")
      script += "[ \"$1\" = --showtoponuma ] && exec cat " +
                shell_quote(fixtures + "rocm-smi-showtoponuma.txt") + "\n";
    script += "exec cat " + shell_quote(fixtures + body) + "\n";
    test::write_bytes(path, script);
    ::chmod(path.c_str(), 0755);
  }
  return "CUDA_VISIBLE_DEVICES= HIP_VISIBLE_DEVICES= PATH=" + shell_quote(dir.path()) + ":$PATH";
}

TEST(DoctorCliTest, ThisCpuHostPassesWithItsFacts) {
  test::TempDir dir;
  Doctor d = doctor("DDPX_JOBS_DIR=" + shell_quote(dir.file("jobs")));
  ASSERT_TRUE(d.findings.is_array()) << d.output;
  EXPECT_EQ(d.exit_code, 0) << d.output;
  EXPECT_NE(d.get("torch", "libtorch"), nullptr) << d.output;
  // The libtorch it names is the build's own (torch.__version__ of DDPX_PYTHON, without "+cpu").
  auto version = test::run_python("import torch; print(torch.__version__.split('+')[0], end='')");
  ASSERT_EQ(version.exit_code, 0) << version.output;
  EXPECT_EQ(d.get("torch", "libtorch")["value"].get<std::string>().rfind(version.output + " (", 0),
            0u)
      << version.output << "\n"
      << d.output;
  // "N usable of M online": M is this host's online CPUs, N at most that.
  ASSERT_NE(d.get("cpu", "cores"), nullptr) << d.output;
  std::smatch cores;
  const std::string cores_value = d.get("cpu", "cores")["value"].get<std::string>();
  ASSERT_TRUE(
      std::regex_match(cores_value, cores, std::regex(R"(([0-9]+) usable of ([0-9]+) online)")))
      << cores_value;
  EXPECT_EQ(std::stol(cores[2]), ::sysconf(_SC_NPROCESSORS_ONLN)) << cores_value;
  EXPECT_GE(std::stol(cores[1]), 1) << cores_value;
  EXPECT_LE(std::stol(cores[1]), std::stol(cores[2])) << cores_value;
  EXPECT_NE(d.get("memory", "/dev/shm"), nullptr);
  EXPECT_EQ(d.get("jobs", "reservations")["value"], "no other ddpx job on this host");
  auto text = run_command(test::ddpx_command("doctor"), 120);
  EXPECT_NE(text.output.find("doctor: "), std::string::npos) << text.output;
}

TEST(DoctorCliTest, NvidiaHostShowsDriverGpusProcessesAndPcieTopology) {
  test::TempDir dir;
  Doctor d = doctor(fake_tools(dir, {{"nvidia-smi", "nvidia-smi.txt"}}));
  ASSERT_TRUE(d.findings.is_array()) << d.output;
  EXPECT_EQ(d.get("gpu", "driver")["value"], "NVIDIA 570.124.06 (CUDA 12.8 or older runtimes)");
  auto gpu0 = d.get("gpu", "GPU 0");
  ASSERT_NE(gpu0, nullptr) << d.output;
  EXPECT_EQ(gpu0["value"], "NVIDIA H100 80GB HBM3, 5856/81559 MiB used, 0% busy, 8 process(es)");
  EXPECT_EQ(gpu0["verdict"], "warn") << "a GPU with other processes on it is not free";
  EXPECT_EQ(d.get("gpu", "topology")["value"], "4 GPUs; GPU pairs by link: NODE x6");
  EXPECT_EQ(d.get("gpu", "topology")["verdict"], "warn");
  ASSERT_NE(d.get("gpu", "NUMA"), nullptr) << d.output;
  EXPECT_EQ(d.get("gpu", "NUMA")["value"], "GPU 0-3 on NUMA node 0 (nvidia-smi topo -m)");
  // The tools list 8 GPUs that libtorch cannot use here: a failure with the reason.
  auto runtime = d.get("gpu", "runtime");
  ASSERT_NE(runtime, nullptr) << d.output;
  EXPECT_EQ(runtime["verdict"], "fail");
  EXPECT_EQ(runtime["value"], "nvidia-smi lists 8 GPU(s) but libtorch sees none");
  EXPECT_EQ(d.exit_code, 1);
}

TEST(DoctorCliTest, Mi300xPartitionsMustBeNps1AndSpx) {
  test::TempDir spx_dir;
  Doctor spx = doctor(fake_tools(spx_dir, {{"rocm-smi", "rocm-smi-mi300x.txt"}}));
  auto part = spx.get("gpu", "GPU 3 partition");
  ASSERT_NE(part, nullptr) << spx.output;
  EXPECT_EQ(part["value"], "NPS1, SPX (rocm-smi)");
  EXPECT_EQ(part["verdict"], "ok");
  EXPECT_EQ(spx.get("gpu", "GPU 3")["value"], "AMD Instinct MI300X, 0% busy (rocm-smi)");

  test::TempDir cpx_dir;
  Doctor cpx = doctor(fake_tools(cpx_dir, {{"rocm-smi", "rocm-smi-mi300x-cpx.txt"}}));
  auto bad = cpx.get("gpu", "GPU 0 partition");
  ASSERT_NE(bad, nullptr) << cpx.output;
  EXPECT_EQ(bad["verdict"], "fail");
  EXPECT_NE(bad["fix"].get<std::string>().find("--memory-partition NPS1"), std::string::npos);
  EXPECT_EQ(cpx.exit_code, 1);

  test::TempDir amd_dir;
  Doctor amd =
      doctor(fake_tools(amd_dir, {{"amd-smi", "amd-smi-static-partition-mi300x-cpx-nps4.txt"}}));
  auto from_amd = amd.get("gpu", "GPU 63 partition");
  ASSERT_NE(from_amd, nullptr) << amd.output;
  EXPECT_EQ(from_amd["value"], "NPS4, CPX (amd-smi)");
  EXPECT_EQ(from_amd["verdict"], "fail");
}

// The AMD topology: each GPU's NUMA node, as `rocm-smi --showtoponuma` prints it.
TEST(DoctorCliTest, AmdHostShowsEachGpusNumaNode) {
  test::TempDir dir;
  Doctor d = doctor(fake_tools(dir, {{"rocm-smi", "rocm-smi-mi300x.txt"}}));
  auto numa = d.get("gpu", "NUMA");
  ASSERT_NE(numa, nullptr) << d.output;
  EXPECT_EQ(numa["value"],
            "GPU 0-3 on NUMA node 0, GPU 4-7 on NUMA node 1 (rocm-smi --showtoponuma)");
  EXPECT_EQ(numa["verdict"], "ok");
  auto text = run_command(
      fake_tools(dir, {{"rocm-smi", "rocm-smi-mi300x.txt"}}) + " " + test::ddpx_command("doctor"),
      120);
  EXPECT_NE(text.output.find("GPU 0-3 on NUMA node 0, GPU 4-7 on NUMA node 1"), std::string::npos)
      << text.output;
}

TEST(DoctorCliTest, OtherJobsReservationsAreListed) {
  test::TempDir dir;
  std::string env = "DDPX_JOBS_DIR=" + shell_quote(dir.file("jobs"));
  auto r = run_command(env + " " + test::ddpx_command("shell 1 -- env ") + env + " " +
                           test::ddpx_command("doctor --json"),
                       120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1 job(s): "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("shell, port "), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddpx
