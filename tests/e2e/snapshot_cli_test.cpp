// Snapshots on request, as a user (or Slurm, or the job service) asks for them: SIGUSR1 to a
// running `ddpx run` writes a checkpoint mid-epoch and training goes on; SIGUSR2 writes one and
// stops; `--resume auto` goes on from the snapshot's step and ends with the same weights as a
// run that was never interrupted.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "launch/launch_helpers.h"
#include "models/zoo/registry.h"
#include "support/support.h"
#include "train/checkpoint.h"

namespace ddpx {
namespace {

using launch::testing::ddpx_run;
using launch::testing::slurp;
using launch::testing::start_in_background;
using launch::testing::wait_exit_code;

// Two ranks, four epochs of 400 steps each on synthetic data (about a second each). The
// request lands in epoch 1, 2 or 3, wherever the signal arrives; the tests read which from the log.
const std::string kSnapshotTrain =
    "-- train --model mlp --dataset synthetic --synthetic_size 12800 --synthetic_image 8 "
    "--batch_size 16 --threads 1 --seed 5 --num_epochs 4 --limit_test_batches 1 --save_dir ck";

// Waits until the log has `text`; false after timeout_s.
bool wait_for_text(const std::string& log, const std::string& text, double timeout_s) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (slurp(log).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// The max absolute difference between the weights of two checkpoints of the same mlp.
double weight_difference(const std::string& a_path, const std::string& b_path) {
  models::ModelConfig config;
  config.num_classes = 10;
  config.image_size = 8;
  auto a = models::create_model("mlp", config);
  auto b = models::create_model("mlp", config);
  train::load_checkpoint_weights(a_path, *a.ptr());
  train::load_checkpoint_weights(b_path, *b.ptr());
  auto pb = b.ptr()->named_parameters();
  double diff = 0;
  for (const auto& item : a.ptr()->named_parameters())
    diff = std::max(diff, (item.value() - pb[item.key()]).abs().max().item<double>());
  return diff;
}

// Runs the job as `ddpx run --job_name NAME`, calls `ask` with its launcher's pid once epoch 0
// is done, and returns the output.
std::string run_asked(const test::TempDir& dir, const std::string& name,
                      const std::function<void(pid_t)>& ask, int* exit_code) {
  std::string log = dir.file("out.log");
  pid_t pid =
      start_in_background(ddpx_run(dir, "2 --job_name " + name + " " + kSnapshotTrain), log);
  EXPECT_TRUE(wait_for_text(log, "Epoch - 0/4", 120)) << slurp(log);
  ask(pid);
  *exit_code = wait_exit_code(pid, 120);
  return slurp(log);
}

std::string job_name(const char* what) {
  return std::string("snap-") + what + "-" + std::to_string(::getpid());
}

TEST(SnapshotCliTest, Usr1WritesASnapshotMidEpochAndTrainingGoesOn) {
  test::TempDir reference, dir;
  auto full = test::run_command(ddpx_run(reference, "2 " + kSnapshotTrain), 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;

  int code = 0;
  std::string out = run_asked(
      dir, job_name("usr1"), [](pid_t launcher) { ::kill(launcher, SIGUSR1); }, &code);
  ASSERT_EQ(code, 0) << out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex(R"(Snapshot - epoch ([123]) step (\d+)/400: (\S+))")))
      << out;
  int step = std::stoi(m[2]);
  EXPECT_GT(step, 0);
  EXPECT_LT(step, 400);
  EXPECT_TRUE(std::filesystem::exists(dir.file(m[3]))) << m[3];
  EXPECT_NE(out.find("Epoch - 3/4"), std::string::npos) << "training did not go on:\n" << out;
  // Taking the snapshot changed nothing.
  EXPECT_EQ(weight_difference(reference.file("ck/checkpoint_epoch0004.ddpx"),
                              dir.file("ck/checkpoint_epoch0004.ddpx")),
            0.0);
}

// srun and the job service signal `ddpx train` directly, whenever Slurm's warning or the user's
// request comes: one that arrives while it still loads libtorch is held and taken, not fatal.
TEST(SnapshotCliTest, ARequestWhileTrainStartsIsHeldUntilItCanTakeIt) {
  test::TempDir dir;
  std::string log = dir.file("out.log");
  std::string ddpx = test::ddpx_binary();
  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ::chdir(dir.path().c_str()) != 0) ::_exit(126);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execl(ddpx.c_str(), "ddpx", "train", "--model", "mlp", "--dataset", "synthetic",
            "--synthetic_size", "1280", "--synthetic_image", "8", "--batch_size", "16", "--threads",
            "1", "--num_epochs", "1", "--limit_test_batches", "1", "--save_dir", "ck",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Once `ddpx` has handed over to ddpx-torch (which then loads libtorch for about a second).
  std::string exe;
  for (int i = 0; i < 3000 && exe.find("ddpx-torch") == std::string::npos; ++i) {
    std::error_code ec;
    exe = std::filesystem::read_symlink("/proc/" + std::to_string(pid) + "/exe", ec).string();
    if (exe.find("ddpx-torch") == std::string::npos) ::usleep(1000);
  }
  ASSERT_NE(exe.find("ddpx-torch"), std::string::npos) << exe;
  ::kill(pid, SIGUSR1);
  EXPECT_EQ(wait_exit_code(pid, 120), 0) << slurp(log);
  std::string out = slurp(log);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(Snapshot - epoch 0 step (\d+)/80: (\S+))")))
      << out;
  EXPECT_TRUE(std::filesystem::exists(dir.file(m[2]))) << m[2];
  EXPECT_NE(out.find("Accuracy on test dataset"), std::string::npos) << out;
}

// The launcher's workers by rank: its children, each with RANK in its environment.
std::map<int, pid_t> workers_of(pid_t launcher) {
  std::map<int, pid_t> out;
  std::istringstream children(slurp("/proc/" + std::to_string(launcher) + "/task/" +
                                    std::to_string(launcher) + "/children"));
  for (pid_t child = 0; children >> child;) {
    std::string env = slurp("/proc/" + std::to_string(child) + "/environ");
    std::replace(env.begin(), env.end(), '\0', '\n');
    std::smatch m;
    if (std::regex_search(env, m, std::regex(R"((^|\n)RANK=(\d+))"))) out[std::stoi(m[2])] = child;
  }
  return out;
}

// One request reaches the ranks when it reaches them: here rank 0 before a check and rank 1
// only after the snapshot was taken (as a forwarded signal can). It is one request: one snapshot.
TEST(SnapshotCliTest, ARequestThatReachesTheRanksAtDifferentStepsIsOneSnapshot) {
  test::TempDir dir;
  int code = 0;
  std::string out = run_asked(
      dir, job_name("late"),
      [&dir](pid_t launcher) {
        auto workers = workers_of(launcher);
        ASSERT_EQ(workers.size(), 2u);
        ::kill(workers[0], SIGUSR1);
        EXPECT_TRUE(wait_for_text(dir.file("out.log"), "Snapshot - ", 60));
        ::kill(workers[1], SIGUSR1);
      },
      &code);
  ASSERT_EQ(code, 0) << out;
  std::regex snapshot("Snapshot - ");
  const auto taken =
      std::distance(std::sregex_iterator(out.begin(), out.end(), snapshot), std::sregex_iterator());
  EXPECT_EQ(taken, 1) << out;
  EXPECT_NE(out.find("Epoch - 3/4"), std::string::npos) << out;
}

TEST(SnapshotCliTest, SnapshotRefusesAJobThatIsNotRunning) {
  auto r = test::run_command(
      test::ddpx_command("snapshot no-such-job-" + std::to_string(::getpid())), 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ddpx: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no-such-job-"), std::string::npos) << r.output;
}

// A train job without --save_dir has nowhere to write a snapshot: asking is an error at once
// (not an exit 0 and a warning in the job's log), and the job goes on untouched.
TEST(SnapshotCliTest, SnapshotRefusesAJobWithoutSaveDirNamingTheFlag) {
  test::TempDir dir;
  std::string name = job_name("nosave");
  std::string log = dir.file("out.log");
  std::string train = kSnapshotTrain.substr(0, kSnapshotTrain.find(" --save_dir"));
  pid_t pid = start_in_background(ddpx_run(dir, "1 --job_name " + name + " " + train), log);
  ASSERT_TRUE(wait_for_text(log, "Epoch - 0/4", 120)) << slurp(log);
  auto r = test::run_command(test::ddpx_command("snapshot " + name), 30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("ddpx: error: job " + name +
                          " runs `ddpx train` without --save_dir: it has nowhere to write a "
                          "snapshot; start it with --save_dir DIR"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(wait_exit_code(pid, 120), 0) << slurp(log);
  EXPECT_EQ(slurp(log).find("a snapshot was asked for"), std::string::npos) << slurp(log);
}

TEST(SnapshotCliTest, StopAfterTheSnapshotAndResumeAutoEndsWhereAnUninterruptedRunDoes) {
  test::TempDir reference, dir;
  auto full = test::run_command(ddpx_run(reference, "2 " + kSnapshotTrain), 300);
  ASSERT_EQ(full.exit_code, 0) << full.output;

  int code = 0;
  // `ddpx snapshot JOB --stop`, as a user asks from another shell.
  std::string name = job_name("stop");
  std::string out = run_asked(
      dir, name,
      [&](pid_t) {
        auto r = test::run_command(test::ddpx_command("snapshot " + name + " --stop"), 30);
        EXPECT_EQ(r.exit_code, 0) << r.output;
      },
      &code);
  ASSERT_EQ(code, 0) << out;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(out, m, std::regex(R"(Snapshot - epoch ([123]) step (\d+)/400: (\S+))")))
      << out;
  std::string epoch = m[1], step = m[2];
  std::string snapshot = m[3];
  EXPECT_NE(out.find("Stopping after the snapshot; resume with --resume"), std::string::npos)
      << out;
  EXPECT_EQ(out.find("Epoch - " + epoch + "/4"), std::string::npos) << "it did not stop:\n" << out;
  EXPECT_FALSE(std::filesystem::exists(dir.file("ck/checkpoint_epoch0004.ddpx")));

  auto resumed = test::run_command(ddpx_run(dir, "2 " + kSnapshotTrain + " --resume auto"), 300);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("at epoch " + epoch + " step " + step), std::string::npos)
      << resumed.output;
  EXPECT_EQ(resumed.output.find("Epoch - 0/4"), std::string::npos) << resumed.output;
  EXPECT_NE(resumed.output.find("Epoch - 3/4"), std::string::npos) << resumed.output;
  EXPECT_EQ(weight_difference(reference.file("ck/checkpoint_epoch0004.ddpx"),
                              dir.file("ck/checkpoint_epoch0004.ddpx")),
            0.0);
  // Snapshots are not pruned with the per-epoch checkpoints.
  EXPECT_TRUE(std::filesystem::exists(dir.file(snapshot))) << snapshot;
}

}  // namespace
}  // namespace ddpx
