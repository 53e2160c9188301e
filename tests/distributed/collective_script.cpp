// The scripted rank (see collective_script.h): a test that runs only when the binary is started
// as a rank (--gtest_filter=CollectiveScript.*), and ends the process itself.
#include "collective_script.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/env.h"
#include "distributed/collectives.h"
#include "distributed/context.h"
#include "queued_backend.h"
#include "support/support.h"
#include "trace/collective_trace.h"

namespace ddpx::test {
namespace {

// DDPX_TEST_QUEUED=1: the group's collectives return from wait() before they run (NCCL's way,
// queued_backend.h), on a group built here from the store file and trace folder of `ddpx run`.
struct Queued {
  std::shared_ptr<c10d::Store> store;
  std::shared_ptr<c10d::ProcessGroup> group;
  std::shared_ptr<trace::CollectiveTrace> trace;
  std::vector<c10::intrusive_ptr<c10d::Work>> issued;

  void join(const dist::InitOptions& options) {
    const dist::WorldInfo world = dist::detect_world();
    store = dist::make_file_store(env::get_or("DDPX_STORE_FILE", ""), world.world_size,
                                  options.timeout);
    trace = std::make_shared<trace::CollectiveTrace>(env::get_or("DDPX_TRACE_DIR", ""), world.rank,
                                                     world.world_size);
    group = queued_group(store, world.rank, world.world_size, options.timeout, trace);
  }
  void run(c10::intrusive_ptr<c10d::Work> work, const std::string& what) {
    dist::wait_work(work, what);  // returns at once, as for NCCL
    issued.push_back(std::move(work));
  }
  // The host waiting for the device (a stream sync): until every issued collective has run
  // and the record says so (the watch notes it within a poll).
  void sync() {
    for (auto& work : issued) {
      while (!work->isCompleted()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    auto pending = [this] {
      for (const auto& e : trace->snapshot().entries)
        if (e.state == trace::State::kPending) return true;
      return false;
    };
    while (pending()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
};

void run_queued(const std::string& op, double arg, Queued& queued,
                const dist::InitOptions& options) {
  if (!queued.group) queued.join(options);
  std::vector<at::Tensor> tensors{torch::ones({static_cast<int64_t>(arg)})};
  if (op == "allreduce") {
    queued.run(queued.group->allreduce(tensors), "all_reduce_sum");
  } else if (op == "broadcast") {
    queued.run(queued.group->broadcast(tensors), "broadcast");
  } else if (op == "sync") {
    queued.sync();
  } else {
    std::fprintf(stderr, "collective script: '%s' has no queued form\n", op.c_str());
    std::_Exit(3);
  }
}

void run_word(const std::string& word, std::shared_ptr<dist::Context>& context, Queued* queued,
              const dist::InitOptions& options) {
  const size_t colon = word.find(':');
  const std::string op = word.substr(0, colon);
  const double arg = colon == std::string::npos ? 0 : std::stod(word.substr(colon + 1));
  if (op == "nojoin") {
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return;
  }
  if (op == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(arg));
    return;
  }
  if (op == "stop") {
    ::raise(SIGSTOP);
    return;
  }
  if (queued) {
    run_queued(op, arg, *queued, options);
    return;
  }
  if (!context) context = dist::init(options);
  if (op == "allreduce") {
    auto t = torch::ones({static_cast<int64_t>(arg)});
    context->all_reduce_sum(t);
  } else if (op == "broadcast") {
    auto t = torch::ones({static_cast<int64_t>(arg)});
    context->broadcast(t, 0);
  } else if (op == "barrier") {
    context->barrier();
  } else {
    std::fprintf(stderr, "collective script: unknown word '%s'\n", word.c_str());
    std::_Exit(3);
  }
}

[[noreturn]] void run_script() {
  const std::string rank = env::get_or("RANK", "0");
  std::string script = env::get_or(("DDPX_TEST_COLLECTIVES_RANK" + rank).c_str(),
                                   env::get_or("DDPX_TEST_COLLECTIVES", ""));
  dist::InitOptions options;
  options.backend = dist::BackendChoice::kGloo;
  const std::string transport = env::get_or("DDPX_TEST_TRANSPORT", "auto");
  options.transport = transport == "gloo"  ? dist::Transport::kGloo
                      : transport == "shm" ? dist::Transport::kShm
                                           : dist::Transport::kAuto;
  options.timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::stod(env::get_or("DDPX_TEST_TIMEOUT_S", "5")) * 1000));
  int code = 0;
  try {
    std::shared_ptr<dist::Context> context;
    std::unique_ptr<Queued> queued;
    if (env::get_or("DDPX_TEST_QUEUED", "0") == "1") queued = std::make_unique<Queued>();
    std::istringstream words(script);
    for (std::string word; words >> word;) run_word(word, context, queued.get(), options);
    std::printf("rank %s: script done\n", rank.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddpx: error [rank %s]: %s\n", rank.c_str(), e.what());
    code = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);  // no teardown: a failed job's group is abandoned, like the trainer's
}

}  // namespace

TEST(CollectiveScript, RunsWhenStartedAsARank) {
  if (!std::getenv("DDPX_TEST_COLLECTIVES")) GTEST_SKIP() << "only runs as a rank of `ddpx run`";
  run_script();
}

std::string collective_script_env(const std::string& script, const std::string& rank1_script,
                                  double timeout_s) {
  std::string env = "DDPX_TEST_COLLECTIVES=" + shell_quote(script) +
                    " DDPX_TEST_TIMEOUT_S=" + std::to_string(timeout_s);
  if (!rank1_script.empty()) env += " DDPX_TEST_COLLECTIVES_RANK1=" + shell_quote(rank1_script);
  return env;
}

std::string self_binary() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  std::string exe =
      n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string("test_distributed");
  return exe + " --gtest_filter=CollectiveScript.RunsWhenStartedAsARank";
}

}  // namespace ddpx::test
