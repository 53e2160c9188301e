// One reservation table per host: the job service's jobs, `ddpx run` and `ddpx shell` draw GPUs
// from the same one, so a GPU is never given twice, whichever kind of launch came first. The
// GPUs are laid out as device files in a folder of the test's (DDPX_DEVICE_DIR) and named by the
// visible-devices variables, as a scheduler or a container would give them; the service, the
// launchers, the workers and the table are the real ones, over real HTTP.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>

#include "serve/service.h"
#include "support/support.h"

namespace ddpx {
namespace {

using nlohmann::json;
using test::run_command;
using test::shell_quote;
using namespace serve_testing;

// A folder with `nvidia0..N-1`, or AMD's `kfd` and `dri/renderD128..`, as /dev has them.
std::string fake_devices(const test::TempDir& dir, bool amd, int count) {
  std::string dev = dir.file("dev");
  std::filesystem::create_directories(dev + "/dri");
  if (amd) test::write_bytes(dev + "/kfd", "");
  for (int i = 0; i < count; ++i)
    test::write_bytes(
        amd ? dev + "/dri/renderD" + std::to_string(128 + i) : dev + "/nvidia" + std::to_string(i),
        "");
  return dev;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Waits until `path` holds a complete line and returns the text.
std::string wait_for_line(const std::string& path, int seconds = 60) {
  for (int i = 0; i < seconds * 10; ++i) {
    std::string text = read_text(path);
    if (!text.empty() && text.back() == '\n') return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << path << " was never written";
  return "";
}

// A `ddpx` command of the test's running in the background, in a process group of its own
// (killed with everything it started when the object goes).
class Background {
 public:
  Background(const std::string& env, const std::string& args, const std::string& log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      std::string cmd =
          "exec env " + env + " " + test::ddpx_command(args) + " >> " + shell_quote(log) + " 2>&1";
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
  }
  ~Background() { end(SIGKILL); }
  // Ends the command (signal to its launcher alone, as a user's kill would) and its group.
  void end(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    ::kill(-pid_, SIGKILL);
    pid_ = 0;
  }

 private:
  pid_t pid_ = -1;
};

std::string state_of(Service& s, const std::string& token, const json& job) {
  return get_job(s, token, job["id"].get<int64_t>())["state"].get<std::string>();
}

std::string wait_running(Service& s, const std::string& token, const json& job) {
  for (int i = 0; i < 300; ++i) {
    std::string state = state_of(s, token, job);
    if (state != "queued") return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return "queued";
}

// NVIDIA GPUs named by CUDA_VISIBLE_DEVICES (ids 4 and 7, not 0 and 1: the service hands its
// jobs the host's ids). A direct `ddpx run` holds one; the service's job gets the other, the
// next job waits in the queue until the direct run ends, and then a direct run finds no GPU.
TEST(SharedRegistryTest, ADirectRunAndTheServiceNeverShareAGpu) {
  test::TempDir dir;
  std::string env =
      "DDPX_DEVICE_DIR=" + shell_quote(fake_devices(dir, false, 2)) + " CUDA_VISIBLE_DEVICES=4,7";
  auto writes_device = [&](const std::string& file) {
    return "echo $CUDA_VISIBLE_DEVICES > " + shell_quote(dir.file(file)) + "; exec sleep 120";
  };
  Background direct(env, "run 1 -- sh -c " + shell_quote(writes_device("direct.dev")),
                    dir.file("direct.log"));
  EXPECT_EQ(wait_for_line(dir.file("direct.dev")), "4\n") << read_text(dir.file("direct.log"));

  Service s(dir, "", env);
  std::string alice = s.token("alice");
  json first = submit(s, alice, {{"command", {"sh", "-c", writes_device("first.dev")}}});
  EXPECT_EQ(wait_for_line(dir.file("first.dev")), "7\n") << "the GPU the direct run leaves";
  json second = submit(s, alice, {{"command", {"sh", "-c", writes_device("second.dev")}}});
  std::this_thread::sleep_for(std::chrono::seconds(2));  // ten passes of the scheduler
  EXPECT_EQ(state_of(s, alice, second), "queued") << "GPU 4 is the direct run's";
  EXPECT_FALSE(std::filesystem::exists(dir.file("second.dev")));

  // The host's job list shows the service's job beside the direct one.
  auto jobs = run_command(test::ddpx_command("jobs"), 30);
  EXPECT_NE(jobs.output.find("svc" + std::to_string(first["id"].get<int>())), std::string::npos)
      << jobs.output;

  direct.end(SIGTERM);
  EXPECT_EQ(wait_running(s, alice, second), "running");
  EXPECT_EQ(wait_for_line(dir.file("second.dev")), "4\n") << "the GPU the direct run freed";

  // Both GPUs are the service's now: a direct run is refused, naming a job that holds one.
  auto refused = run_command("env " + env + " " + test::ddpx_command("run 1 -- true"), 60);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("only 0 of 2 are free"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("by job svc"), std::string::npos) << refused.output;

  // Once the first job stops, a `ddpx shell` is given the GPU it had.
  auto stop = s.client().Post("/api/v1/jobs/" + std::to_string(first["id"].get<int>()) + "/stop",
                              auth(alice));
  ASSERT_TRUE(stop && stop->status == 200) << (stop ? stop->body : "");
  EXPECT_EQ(wait_ended(s, alice, first["id"], 30)["exit_code"], 143);
  auto shell = run_command(
      "env " + env + " " + test::ddpx_command("shell 1 -- sh -c 'echo gpu=$CUDA_VISIBLE_DEVICES'"),
      60);
  EXPECT_EQ(shell.exit_code, 0) << shell.output;
  EXPECT_NE(shell.output.find("gpu=7\n"), std::string::npos) << shell.output;
  s.client().Post("/api/v1/jobs/" + std::to_string(second["id"].get<int>()) + "/stop", auth(alice));
  wait_ended(s, alice, second["id"], 30);
}

// AMD GPUs named by ROCR_VISIBLE_DEVICES. A `ddpx shell` holds one: the service's two-worker
// job waits until the shell ends, then its workers get both (HIP_VISIBLE_DEVICES); while it
// runs, a `ddpx shell` is refused, naming the job.
TEST(SharedRegistryTest, AShellHoldsAGpuTheServiceWaitsFor) {
  test::TempDir dir;
  std::string env =
      "DDPX_DEVICE_DIR=" + shell_quote(fake_devices(dir, true, 2)) + " ROCR_VISIBLE_DEVICES=0,1";
  Background shell(
      env,
      "shell 1 -- sh -c " + shell_quote("echo $HIP_VISIBLE_DEVICES > " +
                                        shell_quote(dir.file("shell.dev")) + "; exec sleep 120"),
      dir.file("shell.log"));
  EXPECT_EQ(wait_for_line(dir.file("shell.dev")), "0\n") << read_text(dir.file("shell.log"));

  Service s(dir, "", env);
  std::string alice = s.token("alice");
  std::string marks = dir.file("job.dev");
  json job = submit(
      s, alice,
      {{"command",
        {"sh", "-c", "echo $HIP_VISIBLE_DEVICES >> " + shell_quote(marks) + "; exec sleep 120"}},
       {"workers", 2}});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(state_of(s, alice, job), "queued") << "GPU 0 is the shell's";

  shell.end(SIGTERM);  // the shell's reservation ends with it
  EXPECT_EQ(wait_running(s, alice, job), "running");
  for (int i = 0; i < 300 && read_text(marks).size() < 4; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::string got = read_text(marks);
  EXPECT_TRUE(got == "0\n1\n" || got == "1\n0\n") << got;

  auto refused = run_command("env " + env + " " + test::ddpx_command("shell 1 -- true"), 60);
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("by job svc" + std::to_string(job["id"].get<int>())),
            std::string::npos)
      << refused.output;
  s.client().Post("/api/v1/jobs/" + std::to_string(job["id"].get<int>()) + "/stop", auth(alice));
  EXPECT_EQ(wait_ended(s, alice, job["id"], 30)["exit_code"], 143);
}

}  // namespace
}  // namespace ddpx
