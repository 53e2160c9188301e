// The `ddpx train` command as a user runs it: the seed's output format on real Fashion-MNIST,
// learning well above chance, deterministic resume, and one-line errors for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"
#include "train/options.h"

namespace ddpx {
namespace {

using test::run_command;

using test::ddpx;

// Lines of output that start with the given prefix.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
    start = end + 1;
  }
  return out;
}

TEST(TrainCliTest, LearnsFashionMnistAndPrintsTheSeedFormat) {
  // The CIFAR ResNet-20 (0.27M parameters) reaches 0.75 in 80 steps of 32 images (2,560
  // images: 0.72 to 0.75 in every setting tried at that size), 0.78 in 100 steps of 64.
  auto r = run_command(ddpx("train --model resnet20 --dataset fashion-mnist --num_epochs 1 "
                            "--optimizer adamw --batch_size 32 --learning_rate 0.004 "
                            "--limit_train_batches 80 --limit_test_batches 4"),
                       600);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::regex epoch_line(
      R"(^Epoch - 0/1: time - [0-9]+\.[0-9]{2}s \|\| loss_train - [0-9]+\.[0-9]{4} )"
      R"(\|\| accuracy_train - [0-9]\.[0-9]{4}( \|\| .*)?$)");
  auto epochs = lines_starting(r.output, "Epoch - ");
  ASSERT_EQ(epochs.size(), 1u) << r.output;
  EXPECT_TRUE(std::regex_match(epochs[0], epoch_line)) << epochs[0];
  auto test_lines = lines_starting(r.output, "Accuracy on test dataset - ");
  ASSERT_EQ(test_lines.size(), 1u) << r.output;
  double accuracy =
      std::stod(test_lines[0].substr(std::string("Accuracy on test dataset - ").size()));
  EXPECT_GT(accuracy, 0.70) << "10 classes: chance is 0.10\n" << r.output;
  EXPECT_EQ(lines_starting(r.output, "Training took ").size(), 1u) << r.output;
  // The header names the model, dataset, optimizer and batch size.
  EXPECT_NE(r.output.find("resnet20"), std::string::npos);
  EXPECT_NE(r.output.find("fashion-mnist"), std::string::npos);
  EXPECT_NE(r.output.find("batch size 32 per process"), std::string::npos) << r.output;
}

TEST(TrainCliTest, ResumedRunEndsWithTheSameWeightsAsAnUninterruptedOne) {
  test::TempDir dir;
  std::string common =
      "train --model resnet18 --stem cifar --dataset synthetic --synthetic_size 96 "
      "--synthetic_image 8 --batch_size 16 --threads 1 --seed 3 --num_epochs 2 "
      "--limit_test_batches 1 ";
  auto full = run_command(ddpx(common + "--save_dir " + dir.file("run")), 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;
  // Simulate a job that died during the second epoch: its last checkpoint is epoch 1's.
  std::string final_path = train::checkpoint_path(dir.file("run"), 2);
  std::string uninterrupted = dir.file("uninterrupted.ddpx");
  std::filesystem::rename(final_path, uninterrupted);
  auto resumed =
      run_command(ddpx(common + "--save_dir " + dir.file("run") + " --resume auto"), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(lines_starting(resumed.output, "Epoch - 1/2").size(), 1u) << resumed.output;
  EXPECT_EQ(lines_starting(resumed.output, "Epoch - 0/2").size(), 0u) << resumed.output;

  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 8;
  config.stem = models::Stem::kCifar;
  auto a = models::create_model("resnet18", config);
  auto b = models::create_model("resnet18", config);
  train::load_checkpoint_weights(uninterrupted, *a.ptr());
  train::load_checkpoint_weights(final_path, *b.ptr());
  auto pa = a.ptr()->named_parameters();
  auto pb = b.ptr()->named_parameters();
  for (const auto& item : pa) {
    double diff = (item.value() - pb[item.key()]).abs().max().item<double>();
    EXPECT_EQ(diff, 0.0) << item.key();
  }
}

struct BadInput {
  std::string name;  // the test's name
  std::string args;
  int exit_code;
  std::string expected_text;
};

class TrainCliErrorTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainCliErrorTest, EndsWithOneClearLine) {
  auto r = run_command(ddpx(GetParam().args), 120);
  EXPECT_EQ(r.exit_code, GetParam().exit_code) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected_text), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ddpx: error"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Segmentation"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, TrainCliErrorTest,
    ::testing::Values(BadInput{"UnknownFlag", "train --no_such_flag 3", 2, "--no_such_flag"},
                      BadInput{"UnknownModel", "train --model resnet9000", 2, "resnet18"},
                      BadInput{"ZeroBatch", "train --batch_size 0", 2, "--batch_size"},
                      BadInput{"UnknownOptimizer", "train --optimizer lion", 2, "sgd"},
                      BadInput{"UnknownDataset", "train --dataset imagenet22k", 2, "fashion-mnist"},
                      BadInput{"UnknownBackend", "train --backend mpi", 2, "nccl"},
                      BadInput{"UnknownSchedule", "train --lr_schedule linear", 2, "cosine"},
                      BadInput{"UnknownTransport", "train --transport rdma", 2, "shm"},
                      BadInput{"MissingDataDir",
                               "train --dataset cifar10 --data_dir /nonexistent-ddpx", 1,
                               "ddpx data download"},
                      BadInput{"MissingResumeFile", "train --resume /nonexistent-ddpx/ckpt.ddpx", 2,
                               "/nonexistent-ddpx/ckpt.ddpx"},
                      BadInput{"PretrainedMissing", "train --pretrained /nonexistent-ddpx/w.pth", 1,
                               "/nonexistent-ddpx/w.pth"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

// Splits a line into its whitespace-separated words.
std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The recommendations table's rows for the seed's two models hold the seed's values: ResNet-101
// with its own command's settings (SGD, 0.002, batch 1024, images in [-1, 1]) and ResNet-18 as
// its quick test.
TEST(TrainCliTest, ShowRecommendationsListsTheSeedModels) {
  auto r = run_command(ddpx("train --show_recommendations"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto header = lines_starting(r.output, "model ");
  ASSERT_EQ(header.size(), 1u) << r.output;
  EXPECT_EQ(words(header[0]), (std::vector<std::string>{"model", "optimizer", "lr", "batch", "wd",
                                                        "normalize", "note"}));
  const auto row = [&](const std::string& model) {
    auto rows = lines_starting(r.output, model + " ");
    EXPECT_EQ(rows.size(), 1u) << model << "\n" << r.output;
    return rows.empty() ? std::vector<std::string>{} : words(rows[0]);
  };
  EXPECT_EQ(row("resnet101"),
            (std::vector<std::string>{"resnet101", "sgd", "0.002", "1024", "0", "neg_one_one"}));
  EXPECT_EQ(row("resnet18"), (std::vector<std::string>{"resnet18", "sgd", "0.001", "256", "0",
                                                       "imagenet", "quick", "test"}));
  EXPECT_NE(r.output.find("    ddpx run 2 -- train --model resnet101 --learning_rate 0.002 "
                          "--optimizer sgd --batch_size 1024 --normalize neg_one_one"),
            std::string::npos)
      << "the seed-resnet101 recipe's command\n"
      << r.output;
  auto options = run_command(ddpx("train --script_options"), 60);
  EXPECT_EQ(options.exit_code, 0);
  EXPECT_NE(options.output.find("run-ddp.sh 2 script_single_node"), std::string::npos);
}

// Each default the help shows is the default a run gets (train::TrainOptions).
TEST(TrainCliTest, HelpShowsDefaults) {
  auto r = run_command(ddpx("train --help"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const train::TrainOptions defaults;
  const auto shown = [&](const std::string& flag) {
    std::smatch m;
    const std::regex re("\\n  " + flag + R"((,--\w+)? [A-Z]+(:\{[a-z0-9_,-]+\})?=(\S+))");
    return std::regex_search(r.output, m, re) ? m[3].str() : "(no default shown for " + flag + ")";
  };
  EXPECT_EQ(shown("--model"), defaults.model);
  EXPECT_EQ(shown("--dataset"), data::name(defaults.dataset));
  EXPECT_EQ(shown("--optimizer"), train::name(defaults.optimizer));
  EXPECT_EQ(shown("--normalize"), data::name(defaults.normalize));
  EXPECT_EQ(std::stod(shown("--learning_rate")), defaults.learning_rate);
  EXPECT_EQ(std::stod(shown("--weight_decay")), defaults.weight_decay);
  EXPECT_EQ(std::stod(shown("--momentum")), defaults.momentum);
  EXPECT_EQ(std::stoll(shown("--batch_size")), defaults.batch_size);
  EXPECT_EQ(std::stoll(shown("--num_epochs")), defaults.num_epochs);
  EXPECT_EQ(std::stoll(shown("--base_batch_size")), defaults.base_batch_size);
}

}  // namespace
}  // namespace ddpx
