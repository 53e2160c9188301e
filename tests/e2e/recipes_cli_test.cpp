// The training-recipe options from the command line, with two workers and with one process:
// label smoothing, mixup, cutmix, random erasing, EMA (evaluated and checkpointed), SyncBatchNorm,
// gradient clipping of the averaged gradient, learning-rate scaling, LARS/LAMB, TensorBoard
// curves read back by the tensorboard package, profiler traces, named recipes, the batch-size
// finder, and the one-line refusals.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <regex>

#include "models/zoo/registry.h"
#include "optim/amp.h"
#include "support/support.h"
#include "train/checkpoint.h"
#include "train/recipes.h"

namespace ddpx {
namespace {

using test::ddpx_command;
using test::printed_test_accuracy;
using test::run_command;

using test::has;

const char* kEveryOption =
    " --label_smoothing 0.1 --mixup 0.2 --cutmix 1.0 --random_erasing 0.25 --ema_decay 0.99"
    " --sync_bn --clip_grad_norm 5 --lr_scale linear --base_batch_size 64";

// The trace files are JSON with every ddpx range on every rank; the event files hold the curves.
void check_outputs(const std::string& dir, int ranks, const std::string& output) {
  std::string script =
      "import glob, json, sys\n"
      "names = ['ddpx::step', 'ddpx::data_wait', 'ddpx::forward', 'ddpx::backward',"
      " 'ddpx::optimizer']\n"
      "if " +
      std::to_string(ranks) +
      " > 1: names += ['ddpx::allreduce bucket 0']\n"
      "for r in range(" +
      std::to_string(ranks) +
      "):\n"
      "    events = json.load(open('" +
      dir +
      "/prof/rank%d.trace.json' % r))['traceEvents']\n"
      "    seen = {e.get('name') for e in events}\n"
      "    missing = [n for n in names if n not in seen]\n"
      "    assert not missing, (r, missing)\n"
      "from tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n"
      "a = EventAccumulator('" +
      dir +
      "/tb'); a.Reload()\n"
      "tags = a.Tags()['scalars']\n"
      "for t in ['train/loss', 'train/learning_rate', 'speed/images_per_sec', 'test/accuracy',"
      " 'test/accuracy_ema']:\n"
      "    assert t in tags, (t, tags)\n"
      "print('steps', [e.step for e in a.Scalars('train/loss')])\n"
      "print('test', a.Scalars('test/accuracy')[-1].value)\n";
  auto py = test::run_python(script);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(py.output, m, std::regex("test ([0-9.]+)"))) << py.output;
  EXPECT_NEAR(std::stod(m[1]), printed_test_accuracy(output), 1e-4)
      << "the curve holds the printed accuracy";
}

TEST(RecipeOptionsTest, EveryOptionTrainsWithTwoWorkersAndResumesWithItsEma) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("tensorboard"))
      << "needs tensorboard in DDPX_PYTHON (scripts/python-env --tests)";
  test::TempDir dir;
  const std::string common =
      " -- train --model resnet18 --num_epochs 1 --batch_size 32 "
      "--limit_train_batches 10 --limit_test_batches 1 --no_progress"
      " --save_dir " +
      dir.file("ck") + kEveryOption;
  auto r = run_command(ddpx_command("run 2 --log_dir " + dir.file("log") + common +
                                    " --tensorboard " + dir.file("tb") + " --profile " +
                                    dir.file("prof") + " --profile_steps 3 --profile_skip 2"),
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output,
                  "regularization: label_smoothing 0.1 | mixup alpha 0.2 | cutmix alpha "
                  "1 | random_erasing p 0.25 | EMA decay 0.99 | clip_grad_norm 5"))
      << r.output;
  EXPECT_TRUE(has(r.output, "sync_bn (20 BatchNorm layers, statistics over 2 ranks)")) << r.output;
  EXPECT_TRUE(has(r.output, "(--learning_rate 0.05 x (64 / 64), linear scaling)")) << r.output;
  EXPECT_TRUE(has(r.output, "optimizer step: fused SGD")) << "clipping: after backward\n"
                                                          << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("Accuracy on test dataset \\(EMA\\) - 0\\.")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\n  backward +[0-9.]+ +[0-9.]+ +[0-9.]+%")))
      << "the phase table has both ranks\n"
      << r.output;
  check_outputs(dir.path(), 2, r.output);

  // Resuming loads the average too: a second epoch starts from both.
  auto again = run_command(
      ddpx_command("run 2 --log_dir " + dir.file("log2") + " " +
                   std::regex_replace(common, std::regex("--num_epochs 1"), "--num_epochs 2") +
                   " --resume auto"),
      600);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_TRUE(has(again.output, "resumed from")) << again.output;
  EXPECT_FALSE(has(again.output, "holds no EMA weights")) << again.output;
  EXPECT_TRUE(has(again.output, "Accuracy on test dataset (EMA)")) << again.output;
}

TEST(RecipeOptionsTest, EveryOptionTrainsInOneProcess) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("tensorboard"))
      << "needs tensorboard in DDPX_PYTHON (scripts/python-env --tests)";
  test::TempDir dir;
  auto r = run_command(
      ddpx_command(std::string("train --model resnet18 --num_epochs 1 --batch_size 32 "
                               "--limit_train_batches 10 --limit_test_batches 2 --no_progress "
                               "--threads 2 --tensorboard ") +
                   dir.file("tb") + " --profile " + dir.file("prof") +
                   " --profile_steps 2 --profile_skip 1" + kEveryOption),
      600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "statistics over 1 ranks")) << r.output;
  check_outputs(dir.path(), 1, r.output);
}

// Clipping acts on the gradient averaged over the ranks: two ranks with half batches end with
// the weights of one process with the whole batch (as without clipping), and the clip is active
// (the weights differ from an unclipped run).
TEST(RecipeOptionsTest, ClipGradNormClipsTheAveragedGradient) {
  test::TempDir dir;
  const std::string common =
      "train --model mlp --dataset synthetic --synthetic_size 256 --synthetic_image 8 "
      "--batch_size 32 --no_flip --threads 1 --seed 5 --num_epochs 1 --learning_rate 0.05 "
      "--no_progress ";
  auto one = run_command(
      ddpx_command(common + "--clip_grad_norm 0.05 --save_dir " + dir.file("one")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(
      ddpx_command("run 2 --log_dir " + dir.file("log") + " -- " + common +
                   "--clip_grad_norm 0.05 --batch_size_scaled --save_dir " + dir.file("two")),
      300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto free = run_command(ddpx_command(common + "--save_dir " + dir.file("free")), 300);
  ASSERT_EQ(free.exit_code, 0) << free.output;

  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 8;
  auto load = [&](const std::string& name) {
    auto m = models::create_model("mlp", config);
    train::load_checkpoint_weights(train::checkpoint_path(dir.file(name), 1), *m.ptr());
    return m;
  };
  auto a = load("one"), b = load("two"), c = load("free");
  double two_vs_one = 0, free_vs_one = 0;
  auto pb = b.ptr()->named_parameters(), pc = c.ptr()->named_parameters();
  for (const auto& item : a.ptr()->named_parameters()) {
    two_vs_one = std::max(two_vs_one, (item.value() - pb[item.key()]).abs().max().item<double>());
    free_vs_one = std::max(free_vs_one, (item.value() - pc[item.key()]).abs().max().item<double>());
  }
  EXPECT_LT(two_vs_one, 1e-5);
  EXPECT_GT(free_vs_one, 1e-3) << "the clip changed nothing: raise the gradients or lower 0.05";
}

TEST(RecipeOptionsTest, LarsAndLambTrainAFewSteps) {
  for (const std::string& opt : {"lars --learning_rate 2", "lamb --learning_rate 0.005"}) {
    auto r = run_command(ddpx_command("train --model mlp --num_epochs 1 --batch_size 64 "
                                      "--limit_train_batches 60 --limit_test_batches 4 "
                                      "--no_progress --optimizer " +
                                      opt),
                         600);
    ASSERT_EQ(r.exit_code, 0) << opt << "\n" << r.output;
    EXPECT_GT(printed_test_accuracy(r.output), 0.5) << opt << "\n" << r.output;
  }
}

// Every recipe's flags are real flags of `ddpx train`, and the command line wins over them (one
// process: a recipe's --tensor_parallel, bert-megatron's, is given 1).
TEST(RecipeOptionsTest, RecipesApplyAndTheCommandLineWins) {
  for (const auto& recipe : train::recipes()) {
    auto r =
        run_command(ddpx_command("train --recipe " + recipe.name +
                                 " --tensor_parallel 1 --model mlp --stem imagenet --dataset "
                                 "synthetic "
                                 "--synthetic_size 64 --synthetic_image 8 "
                                 "--num_epochs 1 --limit_train_batches 1 --limit_test_batches 1 "
                                 "--batch_size 16 --no_progress"),
                    120);
    ASSERT_EQ(r.exit_code, 0) << recipe.name << "\n" << r.output;
    EXPECT_TRUE(has(r.output, "model mlp")) << recipe.name << ": --model wins\n" << r.output;
    EXPECT_TRUE(has(r.output, "Training took")) << recipe.name << "\n" << r.output;
    EXPECT_FALSE(has(r.output, "for 200 epochs")) << recipe.name << ": --num_epochs wins";
    // The recipe's own flags are in effect where the command line is silent.
    for (const auto& [flag, value] : recipe.flags) {
      if (flag == "--optimizer") EXPECT_TRUE(has(r.output, "optimizer " + value + " lr"));
      if (flag == "--amp" && value == "auto") {
        // bf16 or off for this machine's CPU, with the reason (optim/amp.h).
        const optim::AmpChoice amp =
            optim::resolve_amp(optim::Amp::kAuto, optim::cpu_bf16_support(optim::cpuinfo_flags()));
        EXPECT_TRUE(has(r.output, fmt::format("amp {} ({}) |", optim::name(amp.amp), amp.reason)))
            << recipe.name << "\n"
            << r.output;
      } else if (flag == "--amp") {
        EXPECT_TRUE(has(r.output, "amp " + value + " |")) << recipe.name;
      }
    }
  }
  auto best = run_command(
      ddpx_command("train --recipe fashion-mnist-best --model mlp --stem "
                   "imagenet --dataset synthetic --synthetic_size 64 --synthetic_image 8 "
                   "--num_epochs 1 --limit_train_batches 1 "
                   "--limit_test_batches 1 --no_progress"),
      120);
  ASSERT_EQ(best.exit_code, 0) << best.output;
  EXPECT_TRUE(has(best.output, "label_smoothing 0.1")) << "the recipe's own flags\n" << best.output;
  auto list = run_command(ddpx_command("train --show_recommendations"), 60);
  ASSERT_EQ(list.exit_code, 0) << list.output;
  for (const auto& recipe : train::recipes())
    EXPECT_TRUE(has(list.output, recipe.name + ": ")) << list.output;
}

TEST(RecipeOptionsTest, BatchSizeFinderPrintsATableAndAFlag) {
  auto r = run_command(ddpx_command("tune batch_size --model mlp --image_size 28 --start_batch 8 "
                                    "--max_batch 64 --steps 2 --threads 2"),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* size : {"8", "16", "32", "64"}) {
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string("\n +") + size + " +[0-9.]+ ")))
        << size << "\n"
        << r.output;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("recommendation: --batch_size (\\d+)")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\n +" + m[1].str() + " .* recommended")))
      << "the recommendation is a size in the table\n"
      << r.output;
  EXPECT_TRUE(has(r.output, "recommended")) << r.output;

  // A budget below what the model needs: nothing fits, and it says so.
  auto tiny = run_command(ddpx_command("tune batch_size --model mlp --image_size 28 --max_batch 8 "
                                       "--steps 1 --memory_budget_gib 0.01"),
                          300);
  ASSERT_EQ(tiny.exit_code, 0) << tiny.output;
  EXPECT_TRUE(has(tiny.output, "over the budget")) << tiny.output;
  EXPECT_TRUE(has(tiny.output, "no recommendation: not even --start_batch 8 fits")) << tiny.output;
}

TEST(RecipeOptionsTest, IncompatibleOrOutOfRangeOptionsAreOneLineErrors) {
  test::TempDir dir;
  test::write_bytes(dir.file("a_file"), "x");
  const std::string quick = " --num_epochs 1 --limit_train_batches 1 --limit_test_batches 1";
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {"train --ema_decay 1.5", "--ema_decay must be in (0, 1)"},
      {"train --mixup -1", "--mixup and --cutmix are Beta(alpha, alpha) parameters"},
      {"train --random_erasing 2", "--random_erasing is a probability"},
      {"train --label_smoothing 1", "--label_smoothing must be in [0, 1)"},
      {"train --clip_grad_norm -1", "--clip_grad_norm must be >= 0"},
      {"train --optimizer lion", "--optimizer: lion not in {adam,adamw,lamb,lars,sgd}"},
      {"train --recipe fastest", "--recipe 'fastest' is not one of"},
      {"train --lr_scale cubic", "--lr_scale"},
      {"train --model mlp --sync_bn" + quick, "--sync_bn: --model mlp has no BatchNorm layers"},
      {"train --model mlp --profile " + dir.file("a_file/p") + quick,
       "--profile " + dir.file("a_file/p")},
      {"train --model mlp --tensorboard " + dir.file("a_file/tb") + quick,
       "--tensorboard " + dir.file("a_file/tb")},
      {"tune batch_size --start_batch 0", "--start_batch must be positive"},
  };
  for (const auto& c : cases) {
    auto r = run_command(ddpx_command(c.args), 120);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.output;
    EXPECT_TRUE(has(r.output, c.expect)) << c.args << "\n" << r.output;
  }
}

}  // namespace
}  // namespace ddpx
