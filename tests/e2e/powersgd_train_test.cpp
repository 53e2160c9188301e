// `ddpx run N -- train --comm_hook powersgd` as a user runs it: two workers train Fashion-MNIST
// with PowerSGD and say at start what it saves, and --metrics_json says it again; settings that
// cannot work are refused in one line before any collective.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "e2e/refused_job.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

using test::ddpx;

const std::string kPowerSgdTrain =
    "train --model mlp --num_epochs 1 --limit_train_batches 80 --limit_test_batches 10 "
    "--threads 1 --no_progress ";

TEST(PowerSgdTrainTest, TwoWorkersTrainAndTheStartUpLineSaysWhatItSaves) {
  test::TempDir dir;
  auto r = run_command(ddpx("run 2 --log_dir " + dir.file("logs") + " -- " + kPowerSgdTrain +
                            "--comm_hook powersgd --powersgd_rank 2 --powersgd_start_iter 10 "
                            "--metrics_json " +
                            dir.file("metrics.jsonl")),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch said;
  ASSERT_TRUE(std::regex_search(r.output, said,
                                std::regex("gradients by PowerSGD rank 2 from step 10: ([0-9.]+)x "
                                           "less gradient traffic .* error feedback ([0-9.]+) MB")))
      << r.output;
  EXPECT_GT(test::printed_test_accuracy(r.output), 0.7) << r.output;
  // The metrics: the same ratio and memory, and the steps compressed after the first 10.
  std::ifstream in(dir.file("metrics.jsonl"));
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << "no metrics line";
  const auto m = nlohmann::json::parse(line);
  EXPECT_NEAR(m.at("powersgd_ratio").get<double>(), std::stod(said[1]), 0.05) << line;
  EXPECT_NEAR(m.at("powersgd_error_feedback_bytes").get<double>() / 1e6, std::stod(said[2]), 0.05)
      << line;
  EXPECT_EQ(m.at("powersgd_compressed_steps").get<int>(), 70) << line;
}

TEST(PowerSgdTrainTest, SettingsThatCannotWorkAreRefusedNamingTheFlags) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--comm_hook powersgd --powersgd_rank 0", "--powersgd_rank 0: expected"},
      {"--comm_hook powersgd --amp fp16", "--comm_hook powersgd with --amp fp16"},
      {"--powersgd_rank 2", "add --comm_hook powersgd"},
      {"--comm_hook powersgd --shard optimizer", "--comm_hook powersgd compresses DDP's"},
  };
  for (const auto& [flags, expected] : cases) {
    auto r = run_command(ddpx(kPowerSgdTrain + flags), 60);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
  }
  // A rank no gradient matrix of the model can take: every rank refuses before DDP's first
  // broadcast, and the job ends.
  test::expect_job_refused_before_any_collective(
      2, kPowerSgdTrain + "--comm_hook powersgd --powersgd_rank 4096",
      {"--powersgd_rank 4096: no gradient matrix of --model mlp compresses"});
}

}  // namespace
}  // namespace ddpx
