// What ddpx prints for a new user is true: every command that `ddpx train --show_recommendations`
// and `--script_options` print runs as printed (the launcher part with --dry_run, the training
// part for real at a tiny size); `--help` shows the switches' real defaults; the header names a
// stem only for models that take one; the join line names the contract it read; `ddpx models`
// stays aligned whatever the names' lengths, and docs/models.md shows what it prints.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "e2e/seed_fixture.h"
#include "e2e/token_fixture.h"
#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/options.h"

namespace ddpx {
namespace {

using test::ddpx_command;
using test::run_command;
using test::shell_quote;

using test::has;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Words as the shell splits them (the printed commands quote with "..." only).
std::vector<std::string> shell_words(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any) words.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
      any = true;
    }
  }
  if (any) words.push_back(word);
  return words;
}

std::string joined(const std::vector<std::string>& words) {
  std::string line;
  for (const auto& w : words) line += (line.empty() ? "" : " ") + shell_quote(w);
  return line;
}

// `ddpx train` flags at a size that runs in seconds: one epoch of two small batches, data that
// needs no download, images of at most 32 px, windows of at most 64 tokens, BERT at bert-nano's
// size, one process (a recipe's --tensor_parallel is 1 here: the launcher part runs with
// --dry_run). Every flag as printed stays; sizes are replaced.
std::vector<std::string> tiny(const std::vector<std::string>& train_args) {
  const std::map<std::string, std::string> replaced = {
      {"--num_epochs", "1"}, {"--batch_size", "4"}, {"--threads", "1"}};
  std::vector<std::string> out;
  bool synthetic = false;
  // A language model's recipe keeps its token files' folder (train_tiny writes real text there).
  bool tokens = false;
  for (size_t i = 0; i + 1 < train_args.size(); ++i)
    tokens |= train_args[i] == "--dataset" && train_args[i + 1] == "tokens";
  for (size_t i = 0; i < train_args.size(); ++i) {
    const std::string& w = train_args[i];
    bool valued = i + 1 < train_args.size() && train_args[i + 1].rfind("--", 0) != 0;
    std::string value = valued ? train_args[i + 1] : "";
    if (w == "--data_dir" && !tokens) {
      ++i;  // the downloaded folder: the data is synthetic here
      continue;
    }
    if (w == "--dataset" && value != "fashion-mnist" && value != "tokens") {
      value = "synthetic";
      synthetic = true;
    } else if (replaced.count(w)) {
      value = replaced.at(w);
    } else if (w == "--image_size" && std::stoi(value) > 32) {
      value = "32";
    } else if (w == "--seq_len" && std::stoi(value) > 64) {
      value = "64";
    } else if (w == "--tensor_parallel") {
      value = "1";
    } else if (w == "--model" && value.rfind("bert-", 0) == 0) {
      value = "bert-nano";
    }
    out.push_back(w);
    if (valued) out.push_back(value), ++i;
  }
  auto add = [&](const std::string& flag, const std::string& value) {
    if (std::find(out.begin(), out.end(), flag) == out.end()) out.insert(out.end(), {flag, value});
  };
  for (const auto& [flag, value] : replaced) add(flag, value);
  if (synthetic) add("--synthetic_size", "32");
  out.insert(out.end(), {"--limit_train_batches", "2", "--limit_test_batches", "1",
                         "--eval_batch_size", "4", "--no_progress"});
  return out;
}

// Runs `ddpx train ARGS` tiny in `dir`, with an override appended as a user or a wrapper script
// appends one ("$BASE --batch_size 2"), though ARGS already hold --batch_size; checks it trained,
// that the last value won (as in argparse), and that its header names a stem only for a model
// that takes one.
const std::vector<std::string> kTokens = {"--dataset", "tokens"};

void train_tiny(const test::TempDir& dir, const std::vector<std::string>& args,
                const std::string& printed) {
  // A language model's recipe reads token files from its --data_dir: real text's characters.
  const bool tokens =
      std::search(args.begin(), args.end(), kTokens.begin(), kTokens.end()) != args.end();
  for (size_t i = 0; tokens && i + 1 < args.size(); ++i) {
    if (args[i] != "--data_dir") continue;
    std::filesystem::create_directories(dir.file(args[i + 1]));
    test::write_char_tokens(dir.file(args[i + 1]));
    // ... and BERT's a vocabulary with a [MASK] (masked-LM needs it).
    for (size_t j = 0; j + 1 < args.size(); ++j) {
      if (args[j] == "--model" && args[j + 1].rfind("bert-", 0) == 0)
        test::write_masked_lm_chars(dir.file(args[i + 1]));
    }
  }
  std::vector<std::string> words = tiny(args);
  words.insert(words.end(), {"--batch_size", "2"});
  auto r = run_command(
      "cd " + shell_quote(dir.path()) + " && " + ddpx_command("train " + joined(words)), 300);
  ASSERT_EQ(r.exit_code, 0) << "printed: " << printed << "\n" << r.output;
  EXPECT_TRUE(has(r.output, "Accuracy on test dataset - ")) << printed << "\n" << r.output;
  EXPECT_TRUE(has(r.output, "| batch size 2 per ")) << "the appended --batch_size 2 did not win\n"
                                                    << printed << "\n"
                                                    << r.output;
  std::string model = "resnet18", stem = "imagenet";
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--model") model = args[i + 1];
    if (args[i] == "--stem") stem = args[i + 1];
  }
  bool takes_stem = models::find_model(model).has_cifar_stem;
  EXPECT_EQ(has(r.output, "parameters, stem " + stem + ")"), takes_stem) << printed << "\n"
                                                                         << r.output;
  if (!takes_stem) EXPECT_FALSE(has(r.output, "stem")) << printed << "\n" << r.output;
}

// Runs one printed command line as a user would, at a tiny size.
void run_printed(const std::string& printed) {
  SCOPED_TRACE(printed);
  test::TempDir dir;
  std::vector<std::string> words = shell_words(printed);
  ASSERT_GE(words.size(), 2u);
  std::string cd = "cd " + shell_quote(dir.path()) + " && ";
  if (words[0] == "./run-ddp.sh") {
    // The seed's form trains the seed's workload (CIFAR-100 from ./data at the model's size):
    // it runs for real, as printed, on a small CIFAR-100 there, shortened by the environment.
    test::write_seed_data(dir.path(), test::SeedData::kCifar100);
    auto r = test::run_seed_command(dir.path(), printed);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "on cifar100 dataset\n")) << r.output;
    EXPECT_TRUE(has(r.output, "Accuracy on test dataset - ")) << r.output;
    return;
  }
  ASSERT_EQ(words[0], "ddpx");
  if (words[1] == "train") {
    train_tiny(dir, {words.begin() + 2, words.end()}, printed);
  } else if (words[1] == "run") {
    auto dash = std::find(words.begin(), words.end(), "--");
    ASSERT_NE(dash, words.end());
    ASSERT_EQ(*(dash + 1), "train");
    std::vector<std::string> launcher(words.begin() + 2, dash);
    // The two-node example names the user's node 0; here node 0 is this host.
    for (size_t i = 0; i + 1 < launcher.size(); ++i)
      if (launcher[i] == "--master_addr") launcher[i + 1] = "127.0.0.1";
    // The launcher (the torch-free `ddpx`) takes an appended override's value too: the two-node
    // example's --master_port 29500 becomes 29555.
    launcher.insert(launcher.end(), {"--master_port", "29555"});
    std::vector<std::string> train(dash + 2, words.end());
    auto r = run_command(
        cd + ddpx_command("run --dry_run " + joined(launcher) + " -- train " + joined(train)), 60);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "MASTER_PORT=29555")) << r.output;
    train_tiny(dir, train, printed);
  } else if (words[1] == "models") {
    auto r = run_command(cd + ddpx_command(joined({words.begin() + 1, words.end()})), 60);
    EXPECT_EQ(r.exit_code, 0) << r.output;
  } else if (words[1] == "data" && words.size() > 2 && words[2] == "download") {
    // No network here: a mirror that refuses the connection. The flags were accepted when the
    // error is the download's (exit 1), not the command line's (exit 2).
    auto r = run_command(cd + "DDPX_DATA_MIRROR=http://127.0.0.1:9 " +
                             ddpx_command(joined({words.begin() + 1, words.end()})),
                         60);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "127.0.0.1:9")) << r.output;
  } else {
    ADD_FAILURE() << "no way to run this printed command here; teach this test";
  }
}

// The lines of `output` that are commands: they start (after spaces) with `ddpx ` or `./`.
std::vector<std::string> printed_commands(const std::string& output) {
  std::vector<std::string> commands;
  for (const std::string& line : lines_of(output)) {
    size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos) continue;
    std::string text = line.substr(start);
    if (text.rfind("ddpx ", 0) == 0 || text.rfind("./", 0) == 0) commands.push_back(text);
  }
  return commands;
}

TEST(PrintedCommandsTest, EveryRecommendedCommandRunsAsPrinted) {
  auto r = run_command(ddpx_command("train --show_recommendations"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto commands = printed_commands(r.output);
  EXPECT_GE(commands.size(), 5u) << r.output;  // one per recipe
  for (const std::string& c : commands) run_printed(c);
}

TEST(PrintedCommandsTest, EveryScriptOptionsCommandRunsAsPrinted) {
  auto r = run_command(ddpx_command("train --script_options"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto commands = printed_commands(r.output);
  EXPECT_GE(commands.size(), 6u) << r.output;
  for (const std::string& c : commands) run_printed(c);
}

// The commands that errors tell a user to run: a missing dataset, an unknown model.
TEST(PrintedCommandsTest, TheCommandsErrorsSuggestRunAsPrinted) {
  test::TempDir dir;
  for (const std::string& args :
       {"train --dataset cifar10 --data_dir " + shell_quote(dir.file("none")),
        "train --dataset mnist --data_dir " + shell_quote(dir.file("none")),
        std::string("train --model no_such_model --dataset synthetic")}) {
    auto r = run_command(ddpx_command(args), 60);
    EXPECT_NE(r.exit_code, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("`(ddpx [^`]+)`"))) << r.output;
    run_printed(m[1]);
  }
}

TEST(PrintedCommandsTest, HelpShowsEachSwitchsRealDefault) {
  auto r = run_command(ddpx_command("train --help"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  train::TrainOptions defaults;
  auto shown = [](bool on) { return std::string(on ? " (default: on)" : " (default: off)"); };
  EXPECT_TRUE(has(r.output, "--flip,--no_flip" + shown(defaults.horizontal_flip))) << r.output;
  EXPECT_TRUE(has(r.output, "--random_crop,--no_random_crop" + shown(defaults.random_crop)))
      << r.output;
  EXPECT_TRUE(
      has(r.output, "--cudnn_benchmark,--no_cudnn_benchmark" + shown(defaults.cudnn_benchmark)))
      << r.output;
  EXPECT_TRUE(has(r.output,
                  "--broadcast_buffers,--no_broadcast_buffers" + shown(defaults.broadcast_buffers)))
      << r.output;
  EXPECT_TRUE(has(r.output, "--progress,--no_progress" + shown(defaults.progress))) << r.output;
  EXPECT_TRUE(has(r.output, "--eval_batch_size INT=" + std::to_string(defaults.eval_batch_size)))
      << r.output;
  EXPECT_FALSE(has(r.output, "{false}") || has(r.output, "{true}")) << r.output;
  auto bench = run_command(ddpx_command("bench train --help"), 60);
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_TRUE(has(bench.output, "--augment,--no_augment (default: ")) << bench.output;
  EXPECT_FALSE(has(bench.output, "{false}") || has(bench.output, "{true}")) << bench.output;
}

// The join line names `ddpx` under `ddpx run` (torchrun, Slurm and MPI: pytorch_interop_test
// and tests/cluster); the header of a model without a stem names none.
TEST(PrintedCommandsTest, TheJoinLineNamesDdpxRunAndAStemlessHeaderNoStem) {
  test::TempDir dir;
  auto r = run_command("cd " + shell_quote(dir.path()) + " && " +
                           ddpx_command("run 2 -- train --model mlp --dataset synthetic "
                                        "--synthetic_size 64 --batch_size 16 --num_epochs 1 "
                                        "--limit_test_batches 1 --threads 1"),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::regex_search(
      r.output, std::regex(R"(joined 2 ranks via 127\.0\.0\.1:\d+ \([^)]*, ddpx\))")))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(model mlp \([0-9.]+M parameters\) \|)")))
      << r.output;
}

// Evaluation batches are --eval_batch_size (512 by default), not --batch_size: with one test
// batch of 7 images the accuracy is a multiple of 1/7.
TEST(PrintedCommandsTest, EvalBatchSizeSetsTheTestBatch) {
  auto r = run_command(ddpx_command("train --model mlp --dataset synthetic --synthetic_size 64 "
                                    "--batch_size 16 --num_epochs 1 --threads 1 --seed 3 "
                                    "--eval_batch_size 7 --limit_test_batches 1"),
                       300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "global batch 16, test batch 7 |")) << r.output;
  double accuracy = test::printed_test_accuracy(r.output);
  EXPECT_NEAR(accuracy * 7, std::round(accuracy * 7), 1e-3) << r.output;
}

// Every row's family starts where the header's does and every count ends where its header
// does, whatever the names' lengths; docs/models.md holds exactly what the command prints.
TEST(PrintedCommandsTest, ModelsTableIsAlignedAndDocsShowIt) {
  auto r = run_command(ddpx_command("models"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines = lines_of(r.output);
  ASSERT_EQ(lines.size(), models::model_table().size() + 2) << r.output;
  const std::string& header = lines[1];
  size_t family = header.find(" family") + 1;
  size_t params_end = header.find("params") + 6;
  for (size_t i = 0; i < models::model_table().size(); ++i) {
    const auto& info = models::model_table()[i];
    const std::string& row = lines[i + 2];
    EXPECT_EQ(row.substr(family, info.family.size() + 1), info.family + " ") << row;
    EXPECT_EQ(row[params_end - 1] != ' ' && row[params_end] == ' ', true) << row;
  }
  std::ifstream in(test::source_dir() + "/docs/models.md");
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_TRUE(has(doc.str(), "$ ddpx models\n" + r.output))
      << "docs/models.md does not show what `ddpx models` prints:\n"
      << r.output;
}

}  // namespace
}  // namespace ddpx
