// `ddpx train --model gpt-nano --dataset tokens` as a user runs it, on real text (Debian's copy
// of the GPL, its characters as tokens): the lines a language model prints, two DDP ranks and two
// ZeRO-3 ranks (also with checkpointed blocks, resumed) and pipelines of 2 stages training like one
// process on the same global batch, nanoGPT's random windows on two ranks and resumed, a resumed
// run ending where an uninterrupted one does (after an epoch, and stopped mid-epoch by a snapshot
// request), and `ddpx generate` from the checkpoint, with and without its key/value cache.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "e2e/token_fixture.h"
#include "launch/launch_helpers.h"
#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using test::ddpx;
using test::numbers_after;
using test::run_command;

class LanguageModelTest : public ::testing::Test {
 protected:
  void SetUp() override { test::write_char_tokens(dir_.path()); }
  // gpt-nano on 32-token windows: 6 steps of 8 windows, AdamW.
  std::string train(const std::string& extra, int seq_len = 32) const {
    return "train --model gpt-nano --dataset tokens --data_dir " + dir_.path() + " --seq_len " +
           std::to_string(seq_len) +
           " --batch_size 8 --optimizer adamw --learning_rate 1e-3 "
           "--weight_decay 0.1 --limit_train_batches 6 --limit_test_batches 2 "
           "--eval_batch_size 64 --threads 1 --seed 3 --no_progress " +
           extra;
  }
  test::TempDir dir_;
};

TEST_F(LanguageModelTest, OneProcessPrintsTokenLossPerplexityAndLearns) {
  auto r = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "Sequence length: 32, Vocabulary: ")) << r.output;
  EXPECT_TRUE(test::has(r.output, "tokens_per_sec - ")) << r.output;
  const auto loss = numbers_after(r.output, "loss_train");
  const auto perplexity = numbers_after(r.output, "perplexity_train");
  const auto val = numbers_after(r.output, "Loss on val dataset");
  ASSERT_EQ(loss.size(), 2u) << r.output;
  ASSERT_EQ(perplexity.size(), 2u) << r.output;
  ASSERT_EQ(val.size(), 2u) << r.output;
  EXPECT_NEAR(perplexity[1], std::exp(loss[1]), 1e-2 * perplexity[1]);
  EXPECT_LT(loss[1], loss[0]) << "the second epoch's loss must be lower";
  EXPECT_LT(val[1], val[0]);
}

TEST_F(LanguageModelTest, TwoDdpRanksTrainLikeOneProcessOnTheSameGlobalBatch) {
  auto one = run_command(ddpx(train("--num_epochs 2")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto two = run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                              train("--num_epochs 2 --batch_size_scaled")),
                         300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const auto a = numbers_after(one.output, "loss_train"),
             b = numbers_after(two.output, "loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(two.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 2u) << one.output;
  ASSERT_EQ(b.size(), 2u) << two.output;
  ASSERT_EQ(vb.size(), 2u) << two.output;
  // Float sums in another order: the same losses to 1e-4.
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-4) << "epoch " << i;
    EXPECT_NEAR(va[i], vb[i], 1e-4) << "epoch " << i;
  }
}

TEST_F(LanguageModelTest, ZeroThreeOnTwoRanksTrainsLikeOneProcess) {
  auto one = run_command(ddpx(train("--num_epochs 1 --clip_grad_norm 1")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto zero3 = run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                                train("--num_epochs 1 --clip_grad_norm 1 --batch_size_scaled "
                                      "--shard full")),
                           300);
  ASSERT_EQ(zero3.exit_code, 0) << zero3.output;
  EXPECT_TRUE(test::has(zero3.output, "ZeRO-3")) << zero3.output;
  const auto a = numbers_after(one.output, "loss_train");
  const auto b = numbers_after(zero3.output, "loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(zero3.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 1u) << one.output;
  ASSERT_EQ(b.size(), 1u) << zero3.output;
  ASSERT_EQ(vb.size(), 1u) << zero3.output;
  EXPECT_NEAR(a[0], b[0], 1e-4);
  EXPECT_NEAR(va[0], vb[0], 1e-4);
}

// ZeRO-3 with its blocks recomputed in backward (torchtitan's FSDP + activation checkpointing)
// trains as one process on the same global batch, to 1e-4 as ZeRO-3 alone; stopped after its first
// epoch and resumed, it ends where the uninterrupted run does, to 1e-6 (the same ranks, the same
// arithmetic; the margin for the reloaded optimizer state). The checkpoint is ZeRO-3's sharded
// one: a GPT's units gather its parameters out of the model's order (the tied embedding with the
// head), and the index records the optimizer's order, not the units'.
TEST_F(LanguageModelTest, ZeroThreeWithCheckpointedBlocksTrainsLikeOneProcessAndResumes) {
  const std::string constant = "--lr_schedule constant --clip_grad_norm 1 ";
  auto one = run_command(ddpx(train("--num_epochs 2 " + constant)), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto zero3 = [&](const std::string& extra) {
    return run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                            train(constant +
                                  "--batch_size_scaled --shard full --activation_checkpointing "
                                  "blocks " +
                                  extra)),
                       300);
  };
  auto whole = zero3("--num_epochs 2 --save_dir " + dir_.file("a"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_TRUE(test::has(whole.output, "ZeRO-3")) << whole.output;
  EXPECT_TRUE(test::has(whole.output, "activation checkpointing: blocks")) << whole.output;
  auto first = zero3("--num_epochs 1 --save_dir " + dir_.file("b"));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto rest = zero3("--num_epochs 2 --resume auto --save_dir " + dir_.file("b"));
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto a = numbers_after(one.output, "loss_train");
  const auto b = numbers_after(whole.output, "loss_train");
  const auto c = numbers_after(rest.output, "loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(whole.output, "Loss on val dataset");
  const auto vc = numbers_after(rest.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 2u) << one.output;
  ASSERT_EQ(b.size(), 2u) << whole.output;
  ASSERT_EQ(vb.size(), 2u) << whole.output;
  ASSERT_EQ(c.size(), 1u) << rest.output;
  ASSERT_EQ(vc.size(), 1u) << rest.output;
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-4) << "epoch " << i;
    EXPECT_NEAR(va[i], vb[i], 1e-4) << "epoch " << i;
  }
  EXPECT_NEAR(b[1], c[0], 1e-6);
  EXPECT_NEAR(vb[1], vc[0], 1e-6);
}

// A constant rate, so that the one-epoch run's schedule is the three-epoch run's first epoch.
TEST_F(LanguageModelTest, AResumedRunEndsWhereAnUninterruptedOneDoes) {
  const std::string constant = "--lr_schedule constant --save_dir ";
  auto whole = run_command(ddpx(train("--num_epochs 3 " + constant + dir_.file("a"))), 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  auto first = run_command(ddpx(train("--num_epochs 1 " + constant + dir_.file("b"))), 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto rest =
      run_command(ddpx(train("--num_epochs 3 --resume auto " + constant + dir_.file("b"))), 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto a = numbers_after(whole.output, "loss_train");
  const auto b = numbers_after(rest.output, "loss_train");
  const auto va = numbers_after(whole.output, "Loss on val dataset");
  const auto vb = numbers_after(rest.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 3u) << whole.output;
  ASSERT_EQ(b.size(), 2u) << rest.output;
  ASSERT_EQ(vb.size(), 2u) << rest.output;
  // Bit for bit: the same windows, the same order, the same arithmetic.
  EXPECT_EQ(a[1], b[0]);
  EXPECT_EQ(a[2], b[1]);
  EXPECT_EQ(va[2], vb[1]);
}

// nanoGPT's random windows (`--windows random`): two DDP ranks draw, between them, the windows one
// process draws for the same global batch (1e-4, as the stride windows), the windows are not the
// stride ones (another loss), and a run resumed after its first epoch draws what the
// uninterrupted one did (bit for bit).
TEST_F(LanguageModelTest, RandomWindowsOnTwoRanksTrainLikeOneProcessAndResumeExactly) {
  const std::string random = "--windows random --lr_schedule constant --save_dir ";
  auto one = run_command(ddpx(train("--num_epochs 2 " + random + dir_.file("a"))), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  auto stride = run_command(ddpx(train("--num_epochs 1 --lr_schedule constant")), 300);
  ASSERT_EQ(stride.exit_code, 0) << stride.output;
  auto two =
      run_command(ddpx("run 2 --log_dir " + dir_.file("log") + " -- " +
                       train("--num_epochs 2 --batch_size_scaled " + random + dir_.file("b"))),
                  300);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  auto first = run_command(ddpx(train("--num_epochs 1 " + random + dir_.file("c"))), 300);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  auto rest =
      run_command(ddpx(train("--num_epochs 2 --resume auto " + random + dir_.file("c"))), 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto a = numbers_after(one.output, "loss_train");
  const auto s = numbers_after(stride.output, "loss_train");
  const auto b = numbers_after(two.output, "loss_train");
  const auto c = numbers_after(rest.output, "loss_train");
  const auto va = numbers_after(one.output, "Loss on val dataset");
  const auto vb = numbers_after(two.output, "Loss on val dataset");
  const auto vc = numbers_after(rest.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 2u) << one.output;
  ASSERT_EQ(s.size(), 1u) << stride.output;
  ASSERT_EQ(b.size(), 2u) << two.output;
  ASSERT_EQ(c.size(), 1u) << rest.output;
  ASSERT_EQ(vb.size(), 2u) << two.output;
  ASSERT_EQ(vc.size(), 1u) << rest.output;
  EXPECT_GT(std::abs(a[0] - s[0]), 1e-3) << "--windows random read the stride windows";
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-4) << "epoch " << i;
    EXPECT_NEAR(va[i], vb[i], 1e-4) << "epoch " << i;
  }
  EXPECT_EQ(a[1], c[0]);
  EXPECT_EQ(va[1], vc[0]);
}

// The largest absolute difference between the weights of two checkpoints of the same model.
double weight_difference(const std::string& a_path, const std::string& b_path) {
  const train::CheckpointMeta meta = train::read_checkpoint_meta(a_path);
  models::ModelConfig config;
  config.num_classes = meta.num_classes;
  auto a = models::create_model(meta.model, config);
  auto b = models::create_model(meta.model, config);
  train::load_checkpoint_weights(a_path, *a.ptr());
  train::load_checkpoint_weights(b_path, *b.ptr());
  auto pb = b.ptr()->named_parameters();
  double diff = 0;
  for (const auto& item : a.ptr()->named_parameters())
    diff = std::max(diff, (item.value() - pb[item.key()]).abs().max().item<double>());
  return diff;
}

// Stopped mid-epoch as Slurm's warning or `ddpx snapshot --stop` stops a run (SIGUSR2: a
// checkpoint at the next check, every 5 steps on a CPU, then exit), then `--resume auto`: the
// windows after the snapshot's step are those the uninterrupted run read, so every later epoch's
// loss and val loss (as printed) and the final weights (to the bit) are the same (one process, one
// thread: the same arithmetic in the same order). The cosine schedule and AdamW's moments resume
// too.
TEST_F(LanguageModelTest, StoppedMidEpochAndResumedEndsBitForBitWhereAnUninterruptedRunDoes) {
  const std::string run = train("--num_epochs 3 --limit_train_batches 30 --save_dir ");
  auto whole = run_command(ddpx(run + dir_.file("a")), 300);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;

  // The request arrives while ddpx-torch starts (held until it can take it), so it is taken at
  // the first check: epoch 0, step 5 of 30, unless the machine is slow to deliver it.
  const std::string log = dir_.file("stopped.log");
  pid_t pid = launch::testing::start_in_background(
      "cd " + test::shell_quote(dir_.path()) + " && exec " + ddpx(run + dir_.file("b")), log);
  std::string exe;
  for (int i = 0; i < 30000 && exe.find("ddpx-torch") == std::string::npos; ++i) {
    std::error_code ec;
    exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
    if (exe.find("ddpx-torch") == std::string::npos) ::usleep(1000);
  }
  ASSERT_NE(exe.find("ddpx-torch"), std::string::npos) << exe;
  ::kill(pid, SIGUSR2);
  ASSERT_EQ(launch::testing::wait_exit_code(pid, 300), 0) << launch::testing::slurp(log);
  const std::string stopped = launch::testing::slurp(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(stopped, m, std::regex(R"(Snapshot - epoch (\d) step (\d+)/30)")))
      << stopped;
  const int epoch = std::stoi(m[1]);
  const std::string step = m[2];
  ASSERT_LT(epoch, 3) << stopped;
  ASSERT_TRUE(std::stoi(step) > 0 && std::stoi(step) < 30) << "not mid-epoch:\n" << stopped;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("b/checkpoint_epoch0003.ddpx")));

  auto rest = run_command(ddpx(run + dir_.file("b") + " --resume auto"), 300);
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_TRUE(test::has(rest.output, "at epoch " + std::to_string(epoch) + " step " + step))
      << rest.output;
  const auto a = numbers_after(whole.output, "loss_train");
  const auto b = numbers_after(rest.output, "loss_train");
  const auto va = numbers_after(whole.output, "Loss on val dataset");
  const auto vb = numbers_after(stopped + rest.output, "Loss on val dataset");
  ASSERT_EQ(a.size(), 3u) << whole.output;
  ASSERT_EQ(b.size(), static_cast<size_t>(3 - epoch)) << rest.output;
  ASSERT_EQ(va.size(), 3u) << whole.output;
  ASSERT_EQ(vb.size(), 3u) << stopped << rest.output;
  // b[0] is the resumed epoch's line (its remaining steps); the epochs after it are whole.
  for (int e = epoch + 1; e < 3; ++e) EXPECT_EQ(a[e], b[e - epoch]) << "epoch " << e;
  for (int e = 0; e < 3; ++e) EXPECT_EQ(va[e], vb[e]) << "epoch " << e;
  EXPECT_EQ(weight_difference(dir_.file("a/checkpoint_epoch0003.ddpx"),
                              dir_.file("b/checkpoint_epoch0003.ddpx")),
            0.0);
}

// The whole path a user takes: `ddpx data tokenize` (its char vocabulary), train, generate;
// greedy text is the same with and without the key/value cache, sampled text repeats with its
// seed and stays within the vocabulary's characters.
TEST_F(LanguageModelTest, GeneratesFromItsCheckpoint) {
  const std::string data = dir_.file("chars");
  auto tokenized = run_command(
      ddpx("data tokenize " + std::string(test::kTokenText) + " --tokenizer char --out " + data),
      120);
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  auto trained =
      run_command(ddpx("train --model gpt-nano --dataset tokens --data_dir " + data +
                       " --seq_len 32 --batch_size 8 --optimizer adamw --learning_rate 3e-3 "
                       "--limit_train_batches 20 --limit_test_batches 1 --num_epochs 1 --threads 1 "
                       "--no_progress --save_dir " +
                       dir_.file("ck")),
                  300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string generate = "generate --checkpoint " + dir_.file("ck") +
                               "/checkpoint_epoch0001.ddpx --vocab " + data +
                               "/vocab.json --prompt 'This License' --max_new_tokens 20 ";
  auto greedy = run_command(ddpx(generate + "--temperature 0"), 120);
  auto uncached = run_command(ddpx(generate + "--temperature 0 --no_cache"), 120);
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  ASSERT_EQ(uncached.exit_code, 0) << uncached.output;
  EXPECT_EQ(greedy.output.rfind("This License", 0), 0u) << greedy.output;
  EXPECT_GT(greedy.output.size(), std::string("This License").size() + 10) << greedy.output;
  EXPECT_EQ(greedy.output, uncached.output);
  auto sampled = run_command(ddpx(generate + "--top_k 5 --seed 1"), 120);
  auto again = run_command(ddpx(generate + "--top_k 5 --seed 1"), 120);
  ASSERT_EQ(sampled.exit_code, 0) << sampled.output;
  EXPECT_EQ(sampled.output, again.output);
  auto image_checkpoint = run_command(
      ddpx("train --model mlp --dataset synthetic --synthetic_size 16 --synthetic_image 8 "
           "--batch_size 8 --num_epochs 1 --no_progress --save_dir " +
           dir_.file("mlp")),
      120);
  ASSERT_EQ(image_checkpoint.exit_code, 0) << image_checkpoint.output;
  auto refused = run_command(ddpx("generate --checkpoint " + dir_.file("mlp") +
                                  "/checkpoint_epoch0001.ddpx --vocab " + data + "/vocab.json"),
                             60);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_TRUE(test::has(refused.output, "not a language model")) << refused.output;
}

// nanoGPT's bias=False: `--no_bias` builds the GPT without the biases of its Linears and
// LayerNorms (gpt-nano: V x C + 64 x C + 4 (12 C^2 + 2 C) + C parameters at C = 128, GPT-2's
// formula less 11 C a block and C for the final LayerNorm), says so in its header, learns, and
// its checkpoint
// remembers it: generate builds it so, a resume without the flag is refused naming it, and the
// export is a state_dict without a bias (Python counts it), while a Hugging Face GPT-2 folder,
// whose model has biases, is refused naming --no_bias. An image model keeps its biases.
TEST_F(LanguageModelTest, NoBiasTrainsGeneratesResumesAndExportsWithoutBiases) {
  const std::string data = dir_.file("chars");
  auto tokenized = run_command(
      ddpx("data tokenize " + std::string(test::kTokenText) + " --tokenizer char --out " + data),
      120);
  ASSERT_EQ(tokenized.exit_code, 0) << tokenized.output;
  const std::string base = "train --model gpt-nano --dataset tokens --data_dir " + data +
                           " --seq_len 32 --batch_size 8 --optimizer adamw --learning_rate 3e-3 "
                           "--limit_train_batches 10 --limit_test_batches 1 --threads 1 "
                           "--no_progress --save_dir " +
                           dir_.file("ck");
  auto trained = run_command(ddpx(base + " --num_epochs 2 --no_bias"), 300);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(test::has(trained.output, "M parameters, no biases)")) << trained.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(trained.output, m, std::regex("Vocabulary: ([0-9]+)")))
      << trained.output;
  const int64_t vocab = std::stoll(m[1]), c = 128;
  const int64_t parameters = vocab * c + 64 * c + 4 * (12 * c * c + 2 * c) + c;
  const auto loss = numbers_after(trained.output, "loss_train");
  ASSERT_EQ(loss.size(), 2u) << trained.output;
  EXPECT_LT(loss[1], loss[0]) << "the second epoch's loss must be lower";
  const std::string checkpoint = dir_.file("ck") + "/checkpoint_epoch0002.ddpx";
  auto generated =
      run_command(ddpx("generate --checkpoint " + checkpoint + " --vocab " + data +
                       "/vocab.json --prompt 'This License' --max_new_tokens 10 --temperature 0"),
                  120);
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  EXPECT_EQ(generated.output.rfind("This License", 0), 0u) << generated.output;
  auto biased = run_command(ddpx(base + " --num_epochs 3 --resume auto"), 120);
  EXPECT_EQ(biased.exit_code, 1) << biased.output;  // as another --model's checkpoint
  EXPECT_TRUE(test::has(biased.output, "written without biases; resume with --no_bias"))
      << biased.output;
  auto resumed = run_command(ddpx(base + " --num_epochs 3 --resume auto --no_bias"), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(test::has(resumed.output, "Epoch - 2/3")) << resumed.output;
  auto hf = run_command(
      ddpx("export --checkpoint " + checkpoint + " --format hf --out " + dir_.file("hf")), 60);
  EXPECT_EQ(hf.exit_code, 2) << hf.output;
  EXPECT_TRUE(test::has(hf.output, "trained with --no_bias")) << hf.output;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("hf"))) << "nothing written";
  const std::string weights = dir_.file("w.pt");
  auto exported = run_command(ddpx("export --checkpoint " + checkpoint + " --out " + weights), 60);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto counted = test::run_python(
      "import torch\nsd = torch.load('" + weights +
      "')\nprint('biases', sum('bias' in k for k in sd), 'numel', sum(t.numel() for t in "
      "sd.values()))\n");
  ASSERT_EQ(counted.exit_code, 0) << counted.output;
  EXPECT_TRUE(test::has(counted.output, "biases 0 numel " + std::to_string(parameters)))
      << counted.output;
  auto image = run_command(ddpx("train --model resnet18 --no_bias"), 60);
  EXPECT_EQ(image.exit_code, 2) << image.output;
  EXPECT_TRUE(test::has(image.output, "--no_bias: resnet18 keeps its own biases")) << image.output;
}

// gpt-nano cut into 2 pipeline stages (`--pipeline_parallel 2`: the embeddings and the first
// blocks on one rank, the last blocks, the final LayerNorm and the head tied to the token embedding
// on the other) under 1F1B, interleaved (4 stages on 2 ranks, blocks checkpointed) and with 2
// data-parallel replicas, each held to one process on the same global batch: every step's loss
// (one step an epoch), the validation loss, and the final weights of each run's checkpoint, which
// loads into one process and exports as a Hugging Face folder. Tolerance: 2e-4 on the printed
// losses and the weights, as the tensor-parallel runs (language_model_tensor_parallel_test.cpp):
// float32 sums in another order (the micro-batches' losses, the replicas' averages, the tied
// copies' sum), which AdamW's normalised steps carry to about lr where a gradient is noise.
constexpr int kPpSteps = 4;

class LanguageModelPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override { test::write_char_tokens(dir_.path()); }
  // gpt-nano on 32-token windows, AdamW: 4 epochs of one step of 8 windows, each printing its
  // step's loss; the run's weights saved.
  std::string train(const std::string& save, const std::string& extra = "") const {
    return "train --model gpt-nano --dataset tokens --data_dir " + dir_.path() +
           " --seq_len 32 --batch_size 8 --optimizer adamw --learning_rate 1e-3 "
           "--weight_decay 0.1 --num_epochs " +
           std::to_string(kPpSteps) +
           " --limit_train_batches 1 --limit_test_batches 1 --eval_batch_size 16 --threads 1 "
           "--seed 3 --no_progress --save_dir " +
           dir_.file(save) + " " + extra;
  }
  test::TempDir dir_;
};

TEST_F(LanguageModelPipelineTest, TwoStagesEverySchedulingAndTwoReplicasTrainAsOneProcess) {
  auto one = run_command(ddpx(train("one")), 300);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const auto want = numbers_after(one.output, "loss_train");
  const auto want_val = numbers_after(one.output, "Loss on val dataset");
  ASSERT_EQ(want.size(), static_cast<size_t>(kPpSteps)) << one.output;
  struct Layout {
    std::string name;
    int ranks;
    std::string flags, line;
  };
  const std::vector<Layout> layouts{
      {"pp2", 2, "--pipeline_parallel 2", "pipeline: 2 stages on 2 ranks a replica, 1 replica"},
      {"pp2_interleaved", 2,
       "--pipeline_parallel 2 --pipeline_schedule interleaved --stages_per_rank 2 --microbatches 4 "
       "--activation_checkpointing blocks",
       "pipeline: 4 stages on 2 ranks a replica, 1 replica"},
      {"dp2pp2", 4, "--pipeline_parallel 2 --batch_size_scaled",
       "pipeline: 2 stages on 2 ranks a replica, 2 replicas"}};
  const std::string checkpoint = "/checkpoint_epoch000" + std::to_string(kPpSteps) + ".ddpx";
  for (const auto& layout : layouts) {
    auto split = run_command(
        ddpx("run " + std::to_string(layout.ranks) + " --log_dir " +
             dir_.file("log_" + layout.name) + " -- " + train(layout.name, layout.flags)),
        300);
    ASSERT_EQ(split.exit_code, 0) << split.output;
    EXPECT_TRUE(test::has(split.output, layout.line)) << layout.name << "\n" << split.output;
    EXPECT_TRUE(test::has(split.output, "embed")) << split.output;  // the stage table
    const auto got = numbers_after(split.output, "loss_train");
    const auto got_val = numbers_after(split.output, "Loss on val dataset");
    ASSERT_EQ(got.size(), want.size()) << split.output;
    ASSERT_EQ(got_val.size(), want_val.size()) << split.output;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-4) << layout.name << " step " << i;
      if (layout.ranks == 2) EXPECT_NEAR(got_val[i], want_val[i], 2e-4) << layout.name;
    }
    // The checkpoint (by stage) loads into one process with the single process's weights.
    EXPECT_LT(weight_difference(dir_.file("one") + checkpoint, dir_.file(layout.name) + checkpoint),
              2e-4)
        << layout.name;
  }
  // Export writes the one tied tensor under GPT2LMHeadModel's keys, as from one process.
  auto exported = run_command(ddpx("export --format hf --checkpoint " + dir_.file("pp2") +
                                   checkpoint + " --out " + dir_.file("pp2_hf")),
                              120);
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_TRUE(std::filesystem::exists(dir_.file("pp2_hf")));
}

TEST_F(LanguageModelTest, ASeqLenPastTheModelsContextIsRefusedNamingTheFlag) {
  auto r = run_command(ddpx(train("--num_epochs 1", /*seq_len=*/65)), 120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, "--seq_len 64")) << r.output;
}

TEST_F(LanguageModelTest, MissingTokenFilesAreNamedWithTheCommandThatWritesThem) {
  auto r = run_command(ddpx("train --model gpt-nano --dataset tokens --data_dir " +
                            dir_.file("none") + " --num_epochs 1"),
                       120);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(test::has(r.output, dir_.file("none") + "/train.bin")) << r.output;
  EXPECT_TRUE(test::has(r.output, "ddpx data tokenize")) << r.output;
}

// The default prompt is a newline: --help shows it escaped, on the option's own line.
TEST(GenerateHelpTest, ShowsThePromptsNewlineDefaultEscaped) {
  auto r = run_command(ddpx("generate --help"), 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex("--prompt[^\\n]*"))) << r.output;
  EXPECT_TRUE(test::has(m.str(), "\\n")) << "the default, escaped, on --prompt's line\n"
                                         << r.output;
}

}  // namespace
}  // namespace ddpx
