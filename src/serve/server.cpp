#include "serve/server.h"

#include <httplib.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <regex>

#include "core/error.h"
#include "launch/host.h"
#include "launch/sbatch.h"
#include "serve/api.h"
#include "serve/auth.h"
#include "serve/dashboard.h"
#include "serve/exclusive.h"
#include "serve/scheduler.h"
#include "serve/store.h"

namespace ddpx::serve {
namespace {

constexpr size_t kServerThreads = 128;
httplib::Server* g_server = nullptr;

void on_signal(int) {
  if (g_server) g_server->stop();
}

std::string database_path(const std::string& state_dir) {
  DDPX_CHECK(!state_dir.empty(), ErrorKind::kUsage, "--state: give the service's state folder");
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  DDPX_CHECK(!ec, ErrorKind::kIo, "--state {}: cannot create it ({})", state_dir, ec.message());
  return state_dir + "/ddpx-serve.sqlite";
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

}  // namespace

std::string add_token(const std::string& state_dir, const std::string& user, bool admin) {
  static const std::regex name(R"(^[A-Za-z0-9._-]{1,64}$)");
  DDPX_CHECK(std::regex_match(user, name), ErrorKind::kUsage,
             "USER '{}': use 1 to 64 letters, digits, '.', '_' or '-'", user);
  Store store(database_path(state_dir));
  std::string token = new_token();
  store.add_user(user, hash_token(token), admin);
  return token;
}

int run_service(const ServeOptions& o) {
  static const std::regex listen_form(R"(^(.+):(\d{1,5})$)");
  std::smatch m;
  DDPX_CHECK(std::regex_match(o.listen, m, listen_form), ErrorKind::kUsage,
             "--listen '{}': expected HOST:PORT, e.g. 127.0.0.1:8470", o.listen);
  std::string host = m[1];
  int port = std::stoi(m[2]);
  DDPX_CHECK(port > 0 && port < 65536, ErrorKind::kUsage, "--listen {}: port out of range",
             o.listen);
  bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  DDPX_CHECK(!tls || (!o.tls_cert.empty() && !o.tls_key.empty()), ErrorKind::kUsage,
             "--tls_cert and --tls_key go together");
  DDPX_CHECK(is_loopback(host) || tls || o.insecure, ErrorKind::kUsage,
             "--listen {}: binding beyond loopback sends tokens over the network; give "
             "--tls_cert and --tls_key, or --insecure to accept that",
             o.listen);

  std::string database = database_path(o.state_dir);
  StateLock lock(o.state_dir);  // before the scheduler adopts the folder's running jobs
  Store store(database);
  SchedulerOptions so;
  so.state_dir = std::filesystem::absolute(o.state_dir).string();
  std::string self = launch::self_executable();
  so.ddpx_path = self.substr(0, self.rfind('/') + 1) + "ddpx";
  DDPX_CHECK(o.scheduler == "local" || o.scheduler == "slurm", ErrorKind::kUsage,
             "--scheduler '{}': expected local (this node's devices) or slurm", o.scheduler);
  if (o.scheduler == "slurm") {
    require_slurm_programs();
    launch::SbatchOptions probe;
    probe.time = o.slurm.time;
    probe.command = {"true"};
    try {
      launch::validate(probe);
    } catch (const Error& e) {
      fail(ErrorKind::kUsage, "--slurm_{}", std::string(e.what()).substr(2));
    }
    so.slurm = o.slurm;
  } else {
    launch::GpuInfo gpus = launch::detect_gpus();
    for (size_t i = 0; i < gpus.ids.size(); ++i) so.gpus.push_back(static_cast<int>(i));
    so.cpu_slots = o.slots > 0 ? o.slots : launch::usable_cpu_count();
  }
  so.user_quota = o.user_quota;
  Scheduler scheduler(store, so);

  std::unique_ptr<httplib::Server> server;
  if (tls) {
    server = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    DDPX_CHECK(server->is_valid(), ErrorKind::kUsage,
               "--tls_cert {} / --tls_key {}: cannot load them as a PEM certificate and key",
               o.tls_cert, o.tls_key);
  } else {
    server = std::make_unique<httplib::Server>();
  }
  // Backups are large, every other body is JSON: api.cpp refuses a JSON body over 1 MiB (413).
  // The library reads (and over the limit, skips) a body before answering, so a client is never
  // cut off mid-send.
  server->set_payload_max_length(kMaxBackupBytes);
  // cpp-httplib serves a connection on one pool thread for as long as it is kept alive: size the
  // pool for many concurrent clients (threads mostly wait on sockets).
  server->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  add_routes(*server, store, scheduler);
  add_dashboard_routes(*server);
  server->set_socket_options(exclusive_socket_options);
  if (!server->bind_to_port(host.c_str(), port)) {
    std::string holder = port_listener(port);
    DDPX_CHECK(holder.empty(), ErrorKind::kUsage,
               "--listen {}: port {} is already served by {}; stop it or give another port",
               o.listen, port, holder);
    fail(ErrorKind::kIo, "--listen {}: cannot bind it (in use, or not an address of this host)",
         o.listen);
  }
  std::string placement = so.slurm ? std::string("jobs go to Slurm")
                                   : fmt::format("{} {} slot(s)", scheduler.total_slots(),
                                                 so.gpus.empty() ? "CPU" : "GPU");
  std::fprintf(stderr, "ddpx serve: listening on %s://%s:%d (state %s, %s)\n",
               tls ? "https" : "http", host.c_str(), port, o.state_dir.c_str(), placement.c_str());
  g_server = server.get();
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a client that hangs up mid-answer must not end the service
  server->listen_after_bind();
  g_server = nullptr;
  std::fprintf(stderr, "ddpx serve: stopped; running jobs go on\n");
  return 0;
}

}  // namespace ddpx::serve
