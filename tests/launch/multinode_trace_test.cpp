// A two-node job on loopback (2 workers per node) whose rank 3 is stopped: the others time out,
// send their collective records to each other through the store, and node 0's launcher prints
// one table with this node's ranks and node 1's surviving rank ("other node"), naming rank 3.
#include <gtest/gtest.h>
#include <signal.h>

#include "launch_helpers.h"

namespace ddpx::launch::testing {
namespace {

using test::shell_quote;
using test::TempDir;

// The pid of the `ddpx train` worker whose environment has RANK=rank, or 0.
pid_t worker_with_rank(int rank) {
  auto r = test::run_command(
      "for p in $(pgrep -f 'src/ddpx train --dataset synthetic --model mlp --num_epochs 3 "
      "--synthetic_size 50000'); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | grep -qx "
      "'RANK=" +
          std::to_string(rank) + "' && echo $p; done",
      10);
  return r.output.empty() ? 0 : static_cast<pid_t>(std::stol(r.output));
}

TEST(MultiNodeTraceTest, NodeZerosTableCoversTheOtherNodesRanks) {
  TempDir dir;
  std::string port = std::to_string(test::free_port());
  std::string train =
      "train --dataset synthetic --model mlp --num_epochs 3 --synthetic_size 50000 "
      "--batch_size 16 --timeout 4 --transport gloo";
  auto node = [&](int rank) {
    return "cd " + shell_quote(dir.path()) + " && exec " + shell_quote(test::ddpx_binary()) +
           " run 2 --nnodes 2 --node_rank " + std::to_string(rank) +
           " --master_addr 127.0.0.1 --master_port " + port + " --log_dir n" +
           std::to_string(rank) + " -- " + train;
  };
  pid_t node0 = start_in_background(node(0), dir.file("node0.out"));
  pid_t node1 = start_in_background(node(1), dir.file("node1.out"));
  pid_t rank3 = 0;
  for (int i = 0; i < 300 && !rank3; ++i) {
    if (contains(slurp(dir.file("node0.out")), "Epoch") ||
        contains(slurp(dir.file("node0.out")), "joined 4 ranks"))
      rank3 = worker_with_rank(3);
    if (!rank3) ::usleep(100 * 1000);
  }
  ASSERT_NE(rank3, 0) << slurp(dir.file("node0.out"));
  ::kill(rank3, SIGSTOP);
  int code0 = wait_exit_code(node0, 60);
  ::kill(rank3, SIGCONT);
  wait_exit_code(node1, 60);
  std::string out = slurp(dir.file("node0.out"));
  EXPECT_EQ(code0, 1) << out;
  EXPECT_TRUE(contains(out, "collectives of every rank")) << out;
  EXPECT_TRUE(contains(out, "other node")) << "rank 2's record came from node 1: " << out;
  EXPECT_TRUE(contains(out, "rank(s) 3 are behind")) << out;
}

}  // namespace
}  // namespace ddpx::launch::testing
