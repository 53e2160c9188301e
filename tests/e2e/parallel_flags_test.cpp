// The parallelism flag group (cli/parallel_flags.h) as users meet it: `train`, `bench train`,
// `bench memory` and `plan` list the same flags with the same help and defaults, and a value
// given to `bench memory` lays the pipeline out as `train` does.
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/sharded/shard_mode.h"
#include "support/support.h"
#include "train/options.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::run_command;

// The "Parallelism:" section of a command's --help: each flag's entry (its name, type, default
// and help, wrapped lines joined), by flag.
std::map<std::string, std::string> parallelism_section(const std::string& command) {
  const auto r = run_command(ddpx(command + " --help"), 60);
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  std::map<std::string, std::string> entries;
  std::istringstream lines(r.output);
  std::string line, flag;
  bool inside = false;
  while (std::getline(lines, line)) {
    if (!inside) {
      inside = line.rfind("Parallelism:", 0) == 0;
      continue;
    }
    if (line.empty() || line[0] != ' ') break;  // the next section
    std::smatch m;
    if (std::regex_search(line, m, std::regex(R"(^  (--\w+))"))) flag = m[1];
    EXPECT_FALSE(flag.empty()) << command << ": " << line;
    entries[flag] += line.substr(line.find_first_not_of(' ')) + " ";
  }
  EXPECT_FALSE(entries.empty()) << command << " --help has no Parallelism section\n" << r.output;
  return entries;
}

std::set<std::string> flags_of(const std::map<std::string, std::string>& entries) {
  std::set<std::string> flags;
  for (const auto& [flag, entry] : entries) flags.insert(flag);
  return flags;
}

TEST(ParallelFlagsTest, EveryCommandShowsTrainsFlagsWithTrainsDefaults) {
  const auto train = parallelism_section("train");
  const std::set<std::string> all{"--shard",
                                  "--shard_units",
                                  "--shard_gather_dtype",
                                  "--pipeline_parallel",
                                  "--microbatches",
                                  "--pipeline_schedule",
                                  "--stages_per_rank",
                                  "--pipeline_balance",
                                  "--tensor_parallel",
                                  "--sequence_parallel",
                                  "--vocab_divisible_by",
                                  "--activation_checkpointing"};
  EXPECT_EQ(flags_of(train), all);
  // The defaults train shows are the ones a train run gets.
  const train::TrainOptions defaults;
  const auto shown_default = [&](const std::string& flag) {
    std::smatch m;
    const std::string& entry = train.count(flag) ? train.at(flag) : "";
    return std::regex_search(entry, m, std::regex(R"(^--\w+ [A-Z]+(:\{[a-z0-9_,]+\})?=(\S+))"))
               ? m[2].str()
               : "(no default shown for " + flag + ")";
  };
  EXPECT_EQ(shown_default("--shard"), parallel::name(defaults.shard));
  EXPECT_EQ(shown_default("--pipeline_parallel"), std::to_string(defaults.pipeline_parallel));
  EXPECT_EQ(shown_default("--microbatches"), std::to_string(defaults.microbatches));
  EXPECT_EQ(shown_default("--pipeline_schedule"), parallel::name(defaults.pipeline_schedule));
  EXPECT_EQ(shown_default("--stages_per_rank"), std::to_string(defaults.stages_per_rank));
  EXPECT_EQ(shown_default("--pipeline_balance"), parallel::name(defaults.pipeline_balance));
  EXPECT_EQ(shown_default("--tensor_parallel"), std::to_string(defaults.tensor_parallel));
  EXPECT_EQ(shown_default("--vocab_divisible_by"), std::to_string(defaults.vocab_divisible_by));
  EXPECT_EQ(shown_default("--activation_checkpointing"), defaults.activation_checkpointing);

  // Each other command takes the flags it has a use for, each shown exactly as train shows it.
  const std::map<std::string, std::set<std::string>> takes{
      {"bench train", all},
      {"bench memory",
       {"--shard", "--pipeline_parallel", "--microbatches", "--pipeline_schedule",
        "--stages_per_rank", "--pipeline_balance", "--tensor_parallel", "--sequence_parallel",
        "--vocab_divisible_by", "--activation_checkpointing"}},
      {"plan",
       {"--microbatches", "--pipeline_schedule", "--stages_per_rank", "--pipeline_balance",
        "--vocab_divisible_by", "--activation_checkpointing"}},
  };
  for (const auto& [command, flags] : takes) {
    const auto entries = parallelism_section(command);
    EXPECT_EQ(flags_of(entries), flags) << command;
    for (const auto& [flag, entry] : entries) {
      EXPECT_EQ(entry, train.count(flag) ? train.at(flag) : "(not in train)")
          << command << " shows " << flag << " unlike train";
    }
  }
}

// The micro-batch count a pipeline's header names, e.g. "(1f1b, 8 micro-batches".
int micro_batches(const std::string& output) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(output, m, std::regex(R"(\(1f1b, (\d+) micro-batches)"))) << output;
  return m.empty() ? -1 : std::stoi(m[1]);
}

TEST(ParallelFlagsTest, BenchMemoryCutsTheMicroBatchesTrainCuts) {
  test::TempDir dir;
  const std::string launch = "run 2 --threads_per_worker 1 --log_dir " + dir.path() + " -- ";
  const std::string layout = "--pipeline_parallel 2 --pipeline_balance params --batch_size 8 ";
  for (const std::string given : {"", "--microbatches 8 "}) {
    SCOPED_TRACE(given.empty() ? "default" : given);
    const auto bench = run_command(
        ddpx(launch + "bench memory --model mlp --image_size 8 --num_classes 10 " + layout + given),
        300);
    ASSERT_EQ(bench.exit_code, 0) << bench.output;
    const auto train = run_command(
        ddpx(launch +
             "train --model mlp --dataset synthetic --synthetic_size 32 --synthetic_image 8 "
             "--threads 1 --num_epochs 1 --limit_train_batches 1 --limit_test_batches 1 " +
             layout + given),
        300);
    ASSERT_EQ(train.exit_code, 0) << train.output;
    // --microbatches 0 is 2 x the stages where that divides the batch, in both.
    EXPECT_EQ(micro_batches(train.output), given.empty() ? 4 : 8) << train.output;
    EXPECT_EQ(micro_batches(bench.output), micro_batches(train.output)) << bench.output;
  }
}

}  // namespace
}  // namespace ddpx
