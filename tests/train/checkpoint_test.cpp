// Checkpoints: round trip of model, optimizer and position; atomic replacement; corruption and
// truncation detected; `--resume auto` falls back to the newest good file; pruning.
#include "train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::train {
namespace {

struct Fixture {
  torch::nn::Linear model{torch::nn::LinearOptions(4, 3)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  void step() {
    auto loss = model(torch::randn({8, 4})).pow(2).sum();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
};

TEST(CheckpointTest, KeepsTheFp16LossScaleAndLoadsOntoTheModelsDevice) {
  test::TempDir dir;
  Fixture a;
  a.step();
  std::string path = checkpoint_path(dir.path(), 1);
  TrainPosition saved{1, 10};
  saved.loss_scale = 256.0;
  saved.loss_scale_growth = 7;
  save_checkpoint(path, *a.model, a.optimizer, saved, {"linear", 3});
  Fixture b;
  TrainPosition position = load_checkpoint(path, *b.model, b.optimizer, {"linear", 3});
  EXPECT_EQ(position.loss_scale, 256.0);
  EXPECT_EQ(position.loss_scale_growth, 7);
  EXPECT_TRUE(b.model->weight.device().is_cpu());
  // A checkpoint without loss scaling says so.
  std::string plain = checkpoint_path(dir.path(), 2);
  save_checkpoint(plain, *a.model, a.optimizer, {2, 20}, {"linear", 3});
  EXPECT_EQ(load_checkpoint(plain, *b.model, b.optimizer, {"linear", 3}).loss_scale, 0.0);
}

void corrupt_byte(const std::string& path, long offset_from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-offset_from_end, std::ios::end);
  char c;
  f.read(&c, 1);
  f.seekp(-offset_from_end, std::ios::end);
  c = static_cast<char>(c ^ 0x5a);
  f.write(&c, 1);
}

TEST(CheckpointTest, RoundTripRestoresWeightsOptimizerAndPosition) {
  test::TempDir dir;
  torch::manual_seed(1);
  Fixture a;
  a.step();
  std::string path = checkpoint_path(dir.path(), 3);
  save_checkpoint(path, *a.model, a.optimizer, {3, 42}, {"linear", 3});
  // The next step after restoring must equal the next step of the original (momentum restored).
  torch::manual_seed(7);
  Fixture b;
  TrainPosition position = load_checkpoint(path, *b.model, b.optimizer, {"linear", 3});
  EXPECT_EQ(position.epochs_done, 3);
  EXPECT_EQ(position.global_step, 42);
  EXPECT_TRUE(torch::equal(a.model->weight, b.model->weight));
  torch::manual_seed(5);
  a.step();
  torch::manual_seed(5);
  b.step();
  EXPECT_TRUE(torch::allclose(a.model->weight, b.model->weight, 0, 0));
}

TEST(CheckpointTest, RestoresTheCpuRandomStream) {
  test::TempDir dir;
  Fixture a;
  torch::manual_seed(11);
  std::string path = checkpoint_path(dir.path(), 1);
  save_checkpoint(path, *a.model, a.optimizer, {1, 1}, {"linear", 3});
  torch::Tensor expected = torch::rand({5});
  torch::manual_seed(99);
  load_checkpoint(path, *a.model, a.optimizer, {"linear", 3});
  EXPECT_TRUE(torch::equal(torch::rand({5}), expected));
}

TEST(CheckpointTest, CorruptAndTruncatedFilesAreDetected) {
  test::TempDir dir;
  Fixture a;
  std::string path = checkpoint_path(dir.path(), 1);
  save_checkpoint(path, *a.model, a.optimizer, {1, 1}, {"linear", 3});
  verify_checkpoint(path);
  corrupt_byte(path, 100);
  try {
    verify_checkpoint(path);
    FAIL() << "corruption not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  save_checkpoint(path, *a.model, a.optimizer, {1, 1}, {"linear", 3});
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_THROW(verify_checkpoint(path), Error);
  test::write_bytes(path, "not a checkpoint");
  EXPECT_THROW(verify_checkpoint(path), Error);
}

TEST(CheckpointTest, WrongModelIsRefusedWithTheModelNamed) {
  test::TempDir dir;
  Fixture a;
  std::string path = checkpoint_path(dir.path(), 1);
  save_checkpoint(path, *a.model, a.optimizer, {1, 1}, {"linear", 3});
  try {
    load_checkpoint(path, *a.model, a.optimizer, {"resnet18", 3});
    FAIL() << "model mismatch not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("resnet18"), std::string::npos) << e.what();
  }
}

TEST(CheckpointTest, ResumeAutoSkipsACorruptNewestCheckpoint) {
  test::TempDir dir;
  Fixture a;
  for (int epoch = 1; epoch <= 3; ++epoch)
    save_checkpoint(checkpoint_path(dir.path(), epoch), *a.model, a.optimizer, {epoch, epoch},
                    {"linear", 3});
  EXPECT_EQ(*find_latest_good_checkpoint(dir.path()), checkpoint_path(dir.path(), 3));
  corrupt_byte(checkpoint_path(dir.path(), 3), 5);
  EXPECT_EQ(*find_latest_good_checkpoint(dir.path()), checkpoint_path(dir.path(), 2));
}

TEST(CheckpointTest, PruneKeepsTheNewest) {
  test::TempDir dir;
  Fixture a;
  for (int epoch = 1; epoch <= 5; ++epoch)
    save_checkpoint(checkpoint_path(dir.path(), epoch), *a.model, a.optimizer, {epoch, epoch},
                    {"linear", 3});
  prune_checkpoints(dir.path(), 2);
  auto left = list_checkpoints(dir.path());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], checkpoint_path(dir.path(), 5));
  EXPECT_EQ(left[1], checkpoint_path(dir.path(), 4));
}

TEST(CheckpointTest, SnapshotsSortByEpochThenStepAndOutlivePruning) {
  test::TempDir dir;
  Fixture a;
  for (int epoch = 1; epoch <= 4; ++epoch)
    save_checkpoint(checkpoint_path(dir.path(), epoch), *a.model, a.optimizer, {epoch, epoch},
                    {"linear", 3});
  TrainPosition mid{1, 130};
  mid.epoch_step = 30;
  save_checkpoint(snapshot_path(dir.path(), 1, 30), *a.model, a.optimizer, mid, {"linear", 3});
  save_checkpoint(snapshot_path(dir.path(), 4, 7), *a.model, a.optimizer, {4, 407}, {"linear", 3});
  EXPECT_EQ(snapshot_path(dir.path(), 1, 30), dir.path() + "/checkpoint_epoch0001_step000030.ddpx");
  // Not ddpx's names: ignored.
  test::write_bytes(dir.file("checkpoint_epoch0009_stepx.ddpx"), "x");
  test::write_bytes(dir.file("checkpoint_epoch.ddpx"), "x");

  auto all = list_checkpoints(dir.path());
  ASSERT_EQ(all.size(), 6u);
  EXPECT_EQ(all[0], snapshot_path(dir.path(), 4, 7));  // 4 epochs and 7 steps: the newest
  EXPECT_EQ(all[1], checkpoint_path(dir.path(), 4));
  EXPECT_EQ(all[4], snapshot_path(dir.path(), 1, 30));
  EXPECT_EQ(*find_latest_good_checkpoint(dir.path()), snapshot_path(dir.path(), 4, 7));

  prune_checkpoints(dir.path(), 1);
  auto left = list_checkpoints(dir.path());
  ASSERT_EQ(left.size(), 3u);
  EXPECT_EQ(left[1], checkpoint_path(dir.path(), 4));
  EXPECT_EQ(left[2], snapshot_path(dir.path(), 1, 30));

  Fixture b;
  TrainPosition p = load_checkpoint(left[2], *b.model, b.optimizer, {"linear", 3});
  EXPECT_EQ(p.epochs_done, 1);
  EXPECT_EQ(p.epoch_step, 30);
  EXPECT_EQ(p.global_step, 130);
  EXPECT_EQ(load_checkpoint(left[1], *b.model, b.optimizer, {"linear", 3}).epoch_step, 0);
}

// kill -9 in the middle of a checkpoint write: a forked writer saves 16 MB checkpoints over the
// same path in a loop (all weights 1, then all 2, ...) and is killed while its temporary file
// exists. The path must then hold one complete checkpoint that loads, never a torn mix.
TEST(CheckpointTest, KillDuringWriteLeavesThePreviousCheckpointLoadable) {
  namespace fs = std::filesystem;
  constexpr int64_t kWidth = 2048;  // 2048x2048 floats: a write long enough to be caught
  constexpr int kAttempts = 20;
  test::TempDir dir;
  std::string path = checkpoint_path(dir.path(), 1);
  // Both versions are built before fork so that the child only serializes (no torch thread pool
  // use after fork).
  torch::nn::Linear versions[2] = {torch::nn::Linear(kWidth, kWidth),
                                   torch::nn::Linear(kWidth, kWidth)};
  torch::optim::SGD optimizer(versions[0]->parameters(), torch::optim::SGDOptions(0.1));
  {
    torch::NoGradGuard no_grad;
    for (int v = 0; v < 2; ++v) versions[v]->weight.fill_(v + 1);
  }
  save_checkpoint(path, *versions[0], optimizer, {1, 1}, {"linear", 3});
  auto temp_exists = [&] {
    for (auto& e : fs::directory_iterator(dir.path()))
      if (e.path().filename().string().find(".tmp.") != std::string::npos) return true;
    return false;
  };
  int killed_mid_write = 0;
  for (int attempt = 0; attempt < kAttempts && killed_mid_write < 3; ++attempt) {
    pid_t child = ::fork();
    if (child == 0) {  // the writer never returns into the test
      try {
        for (int i = 0;; ++i) {
          save_checkpoint(path, *versions[i % 2], optimizer, {1, 1}, {"linear", 3});
        }
      } catch (...) {
        ::_exit(1);
      }
    }
    int status = 0;
    while (!temp_exists()) {
      ASSERT_EQ(::waitpid(child, &status, WNOHANG), 0) << "the writer died on its own";
      ::usleep(200);
    }
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    if (temp_exists()) ++killed_mid_write;
    // The survivor verifies, is what --resume auto picks, and is one whole version.
    ASSERT_NO_THROW(verify_checkpoint(path));
    ASSERT_EQ(find_latest_good_checkpoint(dir.path()), path);
    torch::nn::Linear loaded(kWidth, kWidth);
    torch::optim::SGD loaded_optimizer(loaded->parameters(), torch::optim::SGDOptions(0.1));
    load_checkpoint(path, *loaded, loaded_optimizer, {"linear", 3});
    float first = loaded->weight[0][0].item<float>();
    EXPECT_TRUE(first == 1.0f || first == 2.0f) << first;
    EXPECT_TRUE(torch::all(loaded->weight == first).item<bool>()) << "torn checkpoint";
    for (auto& e : fs::directory_iterator(dir.path()))  // the next attempt starts clean
      if (e.path().filename().string().find(".tmp.") != std::string::npos) fs::remove(e.path());
  }
  EXPECT_GE(killed_mid_write, 1) << "the writer was never caught mid-write";
}

// Payloads that the fuzzer made libtorch choke on (fuzz/regressions/checkpoint/), framed with a
// correct header and CRC-32 so that they get past the checksum: each ends in one kData error
// naming the file, never an escaped libtorch exception or a leak.
TEST(CheckpointTest, DamagedPayloadBehindAValidChecksumIsAClearError) {
  test::TempDir dir;
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(test::source_dir() + "/fuzz/regressions/checkpoint")) {
    SCOPED_TRACE(entry.path().string());
    std::string payload = read_file(entry.path().string());
    std::string file = "DDPXCKPT";
    uint32_t version = 1;
    uint64_t size = payload.size();
    uint32_t crc = static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0),
                                                 reinterpret_cast<const Bytef*>(payload.data()),
                                                 static_cast<uInt>(payload.size())));
    file.append(reinterpret_cast<const char*>(&version), 4);
    file.append(reinterpret_cast<const char*>(&size), 8);
    file.append(reinterpret_cast<const char*>(&crc), 4);
    file += payload;
    std::string path = dir.file("damaged.ddpx");
    test::write_bytes(path, file);
    Fixture a;
    for (int reader = 0; reader < 3; ++reader) {
      try {
        if (reader == 0) verify_checkpoint(path);
        if (reader == 1) read_checkpoint_meta(path);
        if (reader == 2) load_checkpoint(path, *a.model, a.optimizer, {"linear", 3});
        ADD_FAILURE() << "reader " << reader << " accepted a damaged payload";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::kData);
        EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
      }
    }
    ++files;
  }
  EXPECT_GE(files, 2);
}

// A disk that fills up mid-write, injected with RLIMIT_FSIZE in a child process (writes past
// the limit fail with EFBIG, as they would with ENOSPC): the save fails with a clear error, the
// previous file is intact and no temporary file is left.
TEST(AtomicFileTest, DiskFullMidWriteKeepsThePreviousFile) {
  test::TempDir dir;
  std::string path = dir.file("checkpoint.ddpx");
  write_file_atomic(path, std::string(1000, 'a'));
  pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit{64 * 1024, 64 * 1024};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_file_atomic(path, std::string(1 << 20, 'b'));
      ::_exit(1);  // the write should not have succeeded
    } catch (const Error& e) {
      bool clear = e.kind() == ErrorKind::kIo &&
                   std::string(e.what()).find(path) != std::string::npos &&
                   std::string(e.what()).find("previous file is kept") != std::string::npos;
      ::_exit(clear ? 0 : 2);
    }
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the write succeeded; 2: the error was not clear";
  EXPECT_EQ(read_file(path), std::string(1000, 'a'));
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1) << "no temporary file left";
}

TEST(AtomicFileTest, FailedWriteKeepsThePreviousFile) {
  test::TempDir dir;
  std::string path = dir.file("f.bin");
  write_file_atomic(path, "first");
  // A write into a directory that cannot hold the temp file fails cleanly.
  EXPECT_THROW(write_file_atomic(dir.file("missing/f.bin"), "x"), Error);
  write_file_atomic(path, "second");
  EXPECT_EQ(read_file(path), "second");
  // No temporary files are left behind.
  int files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
}

// The temporary file's 0600 does not leak: a new file gets 0666 less the umask, a replaced one
// keeps its mode (a script made executable stays so).
TEST(AtomicFileTest, ANewFileGetsTheUmasksModeAndAReplacedOneKeepsItsOwn) {
  test::TempDir dir;
  const mode_t before = ::umask(022);
  const std::string path = dir.file("tokens.bin");
  write_file_atomic(path, "first");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ::chmod(path.c_str(), 0750);
  write_file_atomic(path, "second");
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0750u);
  ::umask(before);
}

}  // namespace
}  // namespace ddpx::train
