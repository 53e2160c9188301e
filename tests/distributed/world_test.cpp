// detect_world() on torchrun's, Slurm's and Open MPI's variables, and Slurm node lists.
#include "distributed/world.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "core/error.h"
#include "support/support.h"

namespace ddpx::dist {
namespace {

// Clears every launcher variable for the test's duration and restores them afterwards.
class LauncherEnv {
 public:
  LauncherEnv() {
    for (const char* name : kNames) {
      if (const char* v = std::getenv(name)) saved_[name] = v;
      ::unsetenv(name);
    }
  }
  ~LauncherEnv() {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : saved_) ::setenv(name.c_str(), value.c_str(), 1);
  }
  void set(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

 private:
  static constexpr const char* kNames[] = {"RANK",
                                           "LOCAL_RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "SLURM_PROCID",
                                           "SLURM_LOCALID",
                                           "SLURM_NTASKS",
                                           "SLURM_NTASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_NODEID",
                                           "SLURM_JOB_NODELIST",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE"};
  std::map<std::string, std::string> saved_;
};

TEST(WorldTest, NoLauncherMeansOneProcess) {
  LauncherEnv env;
  WorldInfo w = detect_world();
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.source, "none");
}

TEST(WorldTest, ReadsTorchrunContract) {
  LauncherEnv env;
  env.set("RANK", "5");
  env.set("LOCAL_RANK", "1");
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_WORLD_SIZE", "4");
  env.set("MASTER_ADDR", "10.0.0.7");
  env.set("MASTER_PORT", "29611");
  WorldInfo w = detect_world();
  EXPECT_EQ(w.source, "torchrun");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "10.0.0.7");
  EXPECT_EQ(w.master_port, 29611);
}

TEST(WorldTest, TorchrunRankOutsideWorldNamesVariables) {
  LauncherEnv env;
  env.set("RANK", "2");
  env.set("WORLD_SIZE", "2");
  std::string message = test::usage_error([] { detect_world(); });
  EXPECT_NE(message.find("RANK=2"), std::string::npos) << message;
  EXPECT_NE(message.find("WORLD_SIZE=2"), std::string::npos) << message;
}

TEST(WorldTest, TorchrunMissingWorldSizeNamesIt) {
  LauncherEnv env;
  env.set("RANK", "0");
  std::string message = test::usage_error([] { detect_world(); });
  EXPECT_NE(message.find("WORLD_SIZE"), std::string::npos) << message;
}

TEST(WorldTest, NonNumericPortIsAnError) {
  LauncherEnv env;
  env.set("RANK", "0");
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_PORT", "http");
  std::string message = test::usage_error([] { detect_world(); });
  EXPECT_NE(message.find("MASTER_PORT"), std::string::npos) << message;
}

TEST(WorldTest, ReadsSlurmWithMasterFromNodeList) {
  LauncherEnv env;
  env.set("SLURM_PROCID", "6");
  env.set("SLURM_LOCALID", "2");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_TASKS_PER_NODE", "4(x2)");
  env.set("SLURM_JOB_NODELIST", "node[07-08],gpu5");
  WorldInfo w = detect_world();
  EXPECT_EQ(w.source, "slurm");
  EXPECT_EQ(w.rank, 6);
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.master_addr, "node07");
}

// A step smaller than its job (`srun -n1` inside `--ntasks-per-node=2`): the step's layout,
// not the job's request, is the local world; on uneven nodes ("4(x2),3") each node its own.
TEST(WorldTest, SlurmLocalWorldIsThisNodesEntryOfTheStepLayout) {
  LauncherEnv env;
  env.set("SLURM_PROCID", "0");
  env.set("SLURM_LOCALID", "0");
  env.set("SLURM_NTASKS", "1");
  env.set("SLURM_NTASKS_PER_NODE", "2");
  env.set("SLURM_TASKS_PER_NODE", "2");
  env.set("SLURM_STEP_TASKS_PER_NODE", "1");
  EXPECT_EQ(detect_world().local_world_size, 1);

  env.set("SLURM_PROCID", "9");
  env.set("SLURM_LOCALID", "1");
  env.set("SLURM_NTASKS", "11");
  env.set("SLURM_NODEID", "2");
  env.set("SLURM_STEP_TASKS_PER_NODE", "4(x2),3");
  EXPECT_EQ(detect_world().local_world_size, 3);
  env.set("SLURM_NODEID", "1");
  env.set("SLURM_PROCID", "5");
  EXPECT_EQ(detect_world().local_world_size, 4);

  env.set("SLURM_STEP_TASKS_PER_NODE", "4(x2");
  std::string message = test::usage_error([] { detect_world(); });
  EXPECT_NE(message.find("SLURM_STEP_TASKS_PER_NODE='4(x2'"), std::string::npos) << message;
}

TEST(WorldTest, TorchrunWinsOverSlurm) {
  LauncherEnv env;
  env.set("SLURM_PROCID", "3");
  env.set("SLURM_NTASKS", "4");
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  EXPECT_EQ(detect_world().source, "torchrun");
}

TEST(WorldTest, ReadsOpenMpi) {
  LauncherEnv env;
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  WorldInfo w = detect_world();
  EXPECT_EQ(w.source, "mpi");
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.world_size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 2);
}

TEST(WorldTest, OpenMpiWithoutSizeNamesVariable) {
  LauncherEnv env;
  env.set("OMPI_COMM_WORLD_RANK", "0");
  std::string message = test::usage_error([] { detect_world(); });
  EXPECT_NE(message.find("OMPI_COMM_WORLD_SIZE"), std::string::npos) << message;
}

TEST(SlurmNodeListTest, FirstHostOfRangesAndLists) {
  EXPECT_EQ(first_slurm_host("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(first_slurm_host("gpu5,node[01-04]"), "gpu5");
  EXPECT_EQ(first_slurm_host("node7"), "node7");
  EXPECT_EQ(first_slurm_host("rack-a[3,5]"), "rack-a3");
  EXPECT_EQ(first_slurm_host("n[009-010]-ib,x1"), "n009-ib");
}

TEST(SlurmNodeListTest, MalformedListsAreErrors) {
  for (const char* bad : {"node[01-04", "", "node[]", "node]01["}) {
    std::string message = test::usage_error([&] { first_slurm_host(bad); });
    EXPECT_NE(message.find("SLURM_JOB_NODELIST"), std::string::npos) << bad << ": " << message;
  }
}

}  // namespace
}  // namespace ddpx::dist
