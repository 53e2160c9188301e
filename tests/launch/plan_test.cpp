// The job plan without processes: the env contract per rank, the thread split, multi-node
// ranks, GPU assignment and program resolution.
#include "launch/plan.h"

#include <gtest/gtest.h>

#include <map>

#include "core/error.h"

namespace ddpx::launch {
namespace {

LaunchOptions options_for(int n, std::vector<std::string> command) {
  LaunchOptions o;
  o.nproc_per_node = n;
  o.command = std::move(command);
  o.self_subcommands = {"train", "bench", "run"};
  return o;
}

HostInfo cpu_host(int cores) {
  HostInfo host;
  host.cpu_count = cores;
  host.self_exe = "/opt/ddpx/bin/ddpx";
  return host;
}

std::map<std::string, std::string> env_of(const WorkerSpec& w) {
  return {w.env.begin(), w.env.end()};
}

TEST(PlanTest, EveryWorkerGetsTheEnvContract) {
  JobPlan plan = make_plan(options_for(3, {"train", "--epochs", "1"}), cpu_host(12), 23456);
  ASSERT_EQ(plan.workers.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    auto env = env_of(plan.workers[r]);
    EXPECT_EQ(env["RANK"], std::to_string(r));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], "23456");
    EXPECT_EQ(env["OMP_NUM_THREADS"], "4");  // 12 cores / 3 workers
    EXPECT_EQ(env["DDPX_THREADS"], "4");
    EXPECT_EQ(env["DDPX_RESTART_COUNT"], "0");
    EXPECT_EQ(env.count("CUDA_VISIBLE_DEVICES"), 0u) << "no GPU on this host: never faked";
  }
}

TEST(PlanTest, DdpxSubcommandRunsThisBinary) {
  JobPlan plan = make_plan(options_for(1, {"train", "--epochs", "1"}), cpu_host(2), 1);
  const WorkerSpec& w = plan.workers[0];
  EXPECT_EQ(w.path, "/opt/ddpx/bin/ddpx");
  EXPECT_EQ(w.argv, (std::vector<std::string>{"/opt/ddpx/bin/ddpx", "train", "--epochs", "1"}));
}

TEST(PlanTest, OtherProgramIsFoundOnPath) {
  JobPlan plan = make_plan(options_for(1, {"sh", "-c", "true"}), cpu_host(2), 1);
  const WorkerSpec& w = plan.workers[0];
  EXPECT_EQ(w.path.substr(w.path.size() - 3), "/sh");
  EXPECT_EQ(w.argv, (std::vector<std::string>{"sh", "-c", "true"}));
}

TEST(PlanTest, MissingProgramIsAUsageErrorNamingIt) {
  try {
    make_plan(options_for(2, {"no_such_program_ddpx_test"}), cpu_host(2), 1);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("no_such_program_ddpx_test"), std::string::npos);
  }
  EXPECT_THROW(make_plan(options_for(1, {"./not/here"}), cpu_host(2), 1), Error);
}

TEST(PlanTest, ThreadsSplitCoresAtLeastOneAndFlagOverrides) {
  EXPECT_EQ(make_plan(options_for(4, {"true"}), cpu_host(2), 1).threads_per_worker, 1);
  EXPECT_EQ(make_plan(options_for(3, {"true"}), cpu_host(16), 1).threads_per_worker, 5);
  LaunchOptions o = options_for(2, {"true"});
  o.threads_per_worker = 7;
  JobPlan plan = make_plan(o, cpu_host(2), 1);
  EXPECT_EQ(env_of(plan.workers[1])["OMP_NUM_THREADS"], "7");
  // OMP_NUM_THREADS set where `ddpx run` starts is kept (as torchrun keeps it); the flag wins.
  HostInfo inherited = cpu_host(16);
  inherited.inherited_threads = 3;
  EXPECT_EQ(make_plan(options_for(2, {"true"}), inherited, 1).threads_per_worker, 3);
  EXPECT_EQ(make_plan(o, inherited, 1).threads_per_worker, 7);
}

// More threads than cores and no GPU: one line saying so and what to run instead.
TEST(PlanTest, OversubscribedCoresGetANoteSayingWhatToChange) {
  const std::string workers =
      oversubscription_note(make_plan(options_for(8, {"true"}), cpu_host(2), 1), cpu_host(2));
  EXPECT_NE(workers.find("8 workers on 2 usable core(s) and no GPU"), std::string::npos) << workers;
  EXPECT_NE(workers.find("`ddpx run 2 ...`"), std::string::npos) << workers;
  EXPECT_EQ(workers.find('\n'), std::string::npos) << "one line";
  LaunchOptions o = options_for(2, {"true"});
  o.threads_per_worker = 4;
  const std::string threads = oversubscription_note(make_plan(o, cpu_host(2), 1), cpu_host(2));
  EXPECT_NE(threads.find("--threads_per_worker 1"), std::string::npos) << threads;
  // Within the cores, or GPUs doing the work: nothing to say.
  EXPECT_EQ(oversubscription_note(make_plan(options_for(2, {"true"}), cpu_host(2), 1), cpu_host(2)),
            "");
  EXPECT_EQ(
      oversubscription_note(make_plan(options_for(3, {"true"}), cpu_host(16), 1), cpu_host(16)),
      "");
  HostInfo gpus = cpu_host(2);
  gpus.gpus.vendor = GpuVendor::kNvidia;
  gpus.gpus.ids = {"0", "1", "2", "3"};
  EXPECT_EQ(oversubscription_note(make_plan(options_for(4, {"true"}), gpus, 1), gpus), "");
}

TEST(PlanTest, MultiNodeGlobalRanksFollowNodeRank) {
  LaunchOptions o = options_for(2, {"true"});
  o.nnodes = 3;
  o.node_rank = 2;
  o.master_addr = "10.0.0.1";
  o.master_port = 29500;
  JobPlan plan = make_plan(o, cpu_host(8), 29500);
  ASSERT_EQ(plan.workers.size(), 2u);
  EXPECT_EQ(env_of(plan.workers[0])["RANK"], "4");
  EXPECT_EQ(env_of(plan.workers[1])["RANK"], "5");
  EXPECT_EQ(env_of(plan.workers[1])["LOCAL_RANK"], "1");
  EXPECT_EQ(env_of(plan.workers[1])["WORLD_SIZE"], "6");
  EXPECT_EQ(env_of(plan.workers[1])["GROUP_RANK"], "2");
  EXPECT_EQ(env_of(plan.workers[1])["MASTER_ADDR"], "10.0.0.1");
}

TEST(PlanTest, MultiNodeNeedsAddressAndPort) {
  LaunchOptions o = options_for(2, {"true"});
  o.nnodes = 2;
  o.master_addr = "10.0.0.1";
  try {
    validate(o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--master_port"), std::string::npos);
  }
  o.master_port = 29500;
  o.node_rank = 2;
  EXPECT_THROW(validate(o), Error);  // node_rank must be below nnodes
}

TEST(PlanTest, BadOptionsAreUsageErrors) {
  EXPECT_THROW(validate(options_for(0, {"true"})), Error);
  EXPECT_THROW(validate(options_for(2, {})), Error);
  LaunchOptions o = options_for(2, {"true"});
  o.job_name = "a/b";
  EXPECT_THROW(validate(o), Error);
  EXPECT_THROW(parse_tee("some"), Error);
  EXPECT_EQ(parse_tee("all"), Tee::kAll);
}

TEST(PlanTest, GpusAreAssignedOnePerWorker) {
  HostInfo host = cpu_host(8);
  host.gpus = {GpuVendor::kNvidia, {"0", "1", "2", "3"}};
  JobPlan plan = make_plan(options_for(2, {"true"}), host, 1);
  EXPECT_EQ(env_of(plan.workers[0])["CUDA_VISIBLE_DEVICES"], "0");
  EXPECT_EQ(env_of(plan.workers[1])["CUDA_VISIBLE_DEVICES"], "1");

  LaunchOptions o = options_for(2, {"true"});
  o.gpus = "3,2";
  plan = make_plan(o, host, 1);
  EXPECT_EQ(env_of(plan.workers[0])["CUDA_VISIBLE_DEVICES"], "3");
  EXPECT_EQ(env_of(plan.workers[1])["CUDA_VISIBLE_DEVICES"], "2");

  host.gpus = {GpuVendor::kAmd, {"0", "1"}};
  plan = make_plan(options_for(2, {"true"}), host, 1);
  EXPECT_EQ(env_of(plan.workers[1])["HIP_VISIBLE_DEVICES"], "1");
  EXPECT_THROW(make_plan(options_for(3, {"true"}), host, 1), Error);  // 3 workers, 2 GPUs
  o.gpus = "none";
  plan = make_plan(o, host, 1);
  EXPECT_EQ(env_of(plan.workers[0]).count("HIP_VISIBLE_DEVICES"), 0u);
}

// --gpus 0,0,1,1: NCCL refuses two ranks on one GPU, so every worker (those that share and
// those that do not, which must pick the same backend) is told; one GPU each tells none.
TEST(PlanTest, SharedGpusAreAnnouncedToEveryWorker) {
  HostInfo host = cpu_host(8);
  host.gpus = {GpuVendor::kNvidia, {"0", "1", "2"}};
  LaunchOptions o = options_for(4, {"true"});
  o.gpus = "0,0,1,2";
  JobPlan plan = make_plan(o, host, 1);
  for (const auto& w : plan.workers)
    EXPECT_EQ(env_of(w)["DDPX_SHARED_GPUS"], "1") << "rank " << w.global_rank;
  EXPECT_EQ(env_of(plan.workers[1])["CUDA_VISIBLE_DEVICES"], "0");

  o = options_for(3, {"true"});
  plan = make_plan(o, host, 1);
  for (const auto& w : plan.workers) EXPECT_EQ(env_of(w).count("DDPX_SHARED_GPUS"), 0u);
}

TEST(PlanTest, GpuRequestWithoutGpusIsAUsageError) {
  LaunchOptions o = options_for(2, {"true"});
  o.gpus = "0,1";
  EXPECT_THROW(make_plan(o, cpu_host(2), 1), Error);
}

TEST(PlanTest, DescribeQuotesArgumentsForTheShell) {
  JobPlan plan = make_plan(options_for(1, {"sh", "-c", "echo 'a b'"}), cpu_host(2), 4242);
  std::string text = describe(plan);
  EXPECT_NE(text.find("[rank 0] RANK=0 "), std::string::npos) << text;
  EXPECT_NE(text.find("MASTER_PORT=4242"), std::string::npos) << text;
  EXPECT_NE(text.find(" sh -c 'echo '\\''a b'\\'''"), std::string::npos) << text;
}

}  // namespace
}  // namespace ddpx::launch
