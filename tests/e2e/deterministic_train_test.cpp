// `ddpx [run N --] train --deterministic` as a user runs it, each rank a real process: ResNet-18
// (BatchNorm) with random crops and flips, one global batch of 32 on 1, 2 and 4 processes, plain
// and sharded (ZeRO-2 on 2, ZeRO-3 on 4), ends with bitwise the same weights and BatchNorm
// statistics (checked by PyTorch on the exported state dicts, with torch.equal); what would
// break it is refused in one line naming the flags.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "e2e/refused_job.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::run_command;
using test::shell_quote;

const std::string kTrain =
    "train --model resnet18 --optimizer sgd --num_epochs 1 --limit_train_batches 3 "
    "--limit_test_batches 1 --batch_size 32 --batch_size_scaled --random_crop --deterministic "
    "--deterministic_atom 4 --no_progress ";

// `ddpx export` of the checkpoint after `epoch` in `save_dir`: a torchvision state dict at `out`.
void export_weights(const std::string& save_dir, int epoch, const std::string& out) {
  auto r =
      run_command(ddpx(fmt::format("export --checkpoint {}/checkpoint_epoch{:04d}.ddpx --out {}",
                                   save_dir, epoch, out)),
                  120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

TEST(DeterministicTrainTest, OneTwoAndFourProcessesPlainOrShardedEndWithBitwiseTheSameWeights) {
  test::TempDir dir;
  auto one = run_command(ddpx(kTrain + "--save_dir " + dir.file("w1")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("plan: deterministic data parallel over 1 rank(s) (atoms of 4 "
                            "samples"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("BatchNorm over each atom (20 layers, running statistics replayed)"),
            std::string::npos)
      << one.output;
  EXPECT_NE(one.output.find("threads 1 |"), std::string::npos) << one.output;
  struct Run {
    std::string name;
    int world;
    std::string flags, plan;
  };
  const std::vector<Run> runs = {
      {"2", 2, "", "plan: deterministic data parallel over 2 rank(s)"},
      {"2z2", 2, "--shard gradients ", "(--shard gradients, ZeRO-2: gradients and optimizer"},
      {"4z3", 4, "--shard full ", "(--shard full, ZeRO-3: parameters, gradients and optimizer"}};
  for (const auto& r : runs) {
    auto run = run_command(
        ddpx(fmt::format("run {} --log_dir {} -- {}{}--save_dir {}", r.world,
                         dir.file("logs" + r.name), kTrain, r.flags, dir.file("w" + r.name))),
        300);
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(
        run.output.find(fmt::format("batch size {} per process, global batch 32", 32 / r.world)),
        std::string::npos)
        << run.output;
    EXPECT_NE(run.output.find(r.plan), std::string::npos) << run.output;
  }
  for (const std::string w : {"1", "2", "2z2", "4z3"})
    ASSERT_NO_FATAL_FAILURE(export_weights(dir.file("w" + w), 1, dir.file("w" + w + ".pt")));
  auto py = test::run_python(
      "import torch\n"
      "one = torch.load(" +
      shell_quote(dir.file("w1.pt")) +
      ")\n"
      "for w in ('2', '2z2', '4z3'):\n"
      "    other = torch.load(" +
      shell_quote(dir.file("w")) +
      " + w + '.pt')\n"
      "    assert one.keys() == other.keys(), w\n"
      "    differ = [k for k in one if not torch.equal(one[k], other[k])]\n"
      "    print('world', w, 'tensors', len(one), 'differ', len(differ), differ[:3])\n"
      "print('trained', any(v.abs().sum() > 0 for k, v in one.items() if 'running_mean' in k))\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  for (const char* w : {"2", "2z2", "4z3"}) {
    EXPECT_NE(py.output.find(fmt::format("world {} tensors 122 differ 0", w)), std::string::npos)
        << py.output;
  }
  EXPECT_NE(py.output.find("trained True"), std::string::npos) << py.output;
}

// MobileNet V3 draws dropout before its classifier: a run stopped after epoch 1 and resumed
// (--resume auto) ends with the bits of the run that went on, as its streams follow the global
// step the checkpoint carries, not the process's count.
TEST(DeterministicTrainTest, AResumedRunWithDropoutEndsWithTheUninterruptedRunsBits) {
  test::TempDir dir;
  const std::string train =
      "train --model mobilenet_v3_small --optimizer sgd --limit_train_batches 2 "
      "--limit_test_batches 1 --batch_size 16 --deterministic --deterministic_atom 4 "
      "--no_progress --lr_schedule constant ";  // the same rates in a 1- and a 2-epoch run
  for (const auto& args :
       {train + "--num_epochs 2 --save_dir " + dir.file("straight"),
        train + "--num_epochs 1 --save_dir " + dir.file("resumed"),
        train + "--num_epochs 2 --resume auto --save_dir " + dir.file("resumed")}) {
    auto r = run_command(ddpx(args), 300);
    ASSERT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  }
  for (const std::string w : {"straight", "resumed"})
    ASSERT_NO_FATAL_FAILURE(export_weights(dir.file(w), 2, dir.file(w + ".pt")));
  auto py = test::run_python(
      "import torch\n"
      "a = torch.load(" +
      shell_quote(dir.file("straight.pt")) +
      ")\n"
      "b = torch.load(" +
      shell_quote(dir.file("resumed.pt")) +
      ")\n"
      "print('differ', sum(not torch.equal(a[k], b[k]) for k in a))\n");
  ASSERT_EQ(py.exit_code, 0) << py.output;
  EXPECT_NE(py.output.find("differ 0"), std::string::npos) << py.output;
}

TEST(DeterministicTrainTest, WhatWouldBreakItIsRefusedNamingTheFlags) {
  const std::string mlp =
      "train --model mlp --num_epochs 1 --limit_train_batches 2 --batch_size 16 --no_progress ";
  const std::vector<std::pair<std::string, std::string>> before_joining = {
      {"--deterministic_atom 4",
       "--deterministic_atom sets the deterministic mode's atoms: add "
       "--deterministic"},
      {"--deterministic --deterministic_atom 5",
       "--deterministic: --batch_size 16 is not a whole number of atoms of 5"},
      {"--deterministic --shard full --clip_grad_norm 1",
       "--deterministic with --shard full and --clip_grad_norm:"},
      {"--deterministic --shard optimizer --shard_gather_dtype bf16",
       "--deterministic with --shard_gather_dtype bf16:"},
      {"--deterministic --sync_bn", "--deterministic with --sync_bn:"},
      {"--deterministic --comm_hook powersgd", "--deterministic with --comm_hook powersgd:"},
      {"--deterministic --accumulation_steps 2", "--deterministic with --accumulation_steps 2:"},
      {"--deterministic --mixup 0.2", "--deterministic with --mixup:"},
  };
  for (const auto& [flags, expected] : before_joining) {
    auto r = run_command(ddpx(mlp + flags), 60);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << flags << "\n" << r.output;
  }
  // Known once the job has joined: refused by every rank before the plan's first collective.
  test::expect_job_refused_before_any_collective(
      3, mlp + "--deterministic", {"--deterministic: the world size 3 is not a power of two"});
}

}  // namespace
}  // namespace ddpx
