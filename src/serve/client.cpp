#include "serve/client.h"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/env.h"
#include "core/error.h"

namespace ddpx::serve {
namespace {

using nlohmann::json;

struct Connection {
  std::unique_ptr<httplib::Client> client;
  httplib::Headers headers;
};

Connection connect(const ClientOptions& o) {
  DDPX_CHECK(o.server.rfind("http://", 0) == 0 || o.server.rfind("https://", 0) == 0,
             ErrorKind::kUsage, "--server '{}': expected http://HOST:PORT or https://HOST:PORT",
             o.server);
  std::string token = o.token.empty() ? env::get_or("DDPX_TOKEN", "") : o.token;
  DDPX_CHECK(!token.empty(), ErrorKind::kUsage,
             "no token: give --token or set DDPX_TOKEN (the service's admin makes one with "
             "`ddpx serve token add USER`)");
  // The service may refuse a request (an oversized body, a bad token) and close the connection
  // while the body is still being sent: that must be its error message, not a silent SIGPIPE.
  ::signal(SIGPIPE, SIG_IGN);
  Connection c;
  c.client = std::make_unique<httplib::Client>(o.server);
  c.client->set_read_timeout(3600, 0);
  c.headers = {{"Authorization", "Bearer " + token}};
  return c;
}

// The body of a 2xx answer; a kUsage (4xx) or kIo (no answer, 5xx) error otherwise.
std::string check(const httplib::Result& r, const ClientOptions& o) {
  DDPX_CHECK(r, ErrorKind::kIo, "{}: no answer ({}); is `ddpx serve` running there?", o.server,
             httplib::to_string(r.error()));
  if (r->status >= 200 && r->status < 300) return r->body;
  json body = json::parse(r->body, nullptr, false);
  std::string message =
      body.is_object() && body.contains("error") ? body["error"].get<std::string>() : r->body;
  fail(r->status < 500 ? ErrorKind::kUsage : ErrorKind::kIo, "{} answered {}: {}", o.server,
       r->status, message);
}

}  // namespace

long long client_submit(const ClientOptions& o, const std::vector<std::string>& command,
                        int workers, int ports) {
  Connection c = connect(o);
  json request = {{"command", command}, {"workers", workers}, {"ports", ports}};
  json job = json::parse(
      check(c.client->Post("/api/v1/jobs", c.headers, request.dump(), "application/json"), o));
  return job["id"].get<long long>();
}

std::string client_jobs(const ClientOptions& o) {
  Connection c = connect(o);
  json jobs = json::parse(check(c.client->Get("/api/v1/jobs", c.headers), o));
  std::string out = fmt::format("{:<6}  {:<10}  {:<9}  {:>7}  {:<9}  {:<12}  {}\n", "JOB", "USER",
                                "STATE", "WORKERS", "EXIT", "PORTS", "COMMAND");
  for (const json& j : jobs) {
    std::string ports, command;
    for (const json& p : j["ports"])
      ports += (ports.empty() ? "" : ",") + std::to_string(p.get<int>());
    for (const json& w : j["command"])
      command += (command.empty() ? "" : " ") + w.get<std::string>();
    std::string exit = j["exit_code"].is_null() ? "-" : std::to_string(j["exit_code"].get<int>());
    out += fmt::format("{:<6}  {:<10}  {:<9}  {:>7}  {:<9}  {:<12}  {}\n", j["id"].get<long long>(),
                       j["user"].get<std::string>(), j["state"].get<std::string>(),
                       j["workers"].get<int>(), exit, ports.empty() ? "-" : ports, command);
  }
  return out;
}

void client_logs(const ClientOptions& o, long long id, int rank, bool follow) {
  Connection c = connect(o);
  std::string path =
      fmt::format("/api/v1/jobs/{}/logs?rank={}{}", id, rank, follow ? "&follow=true" : "");
  std::string error_body;
  int status = 0;
  auto r = c.client->Get(
      path, c.headers,
      [&](const httplib::Response& res) {
        status = res.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status >= 200 && status < 300) {
          ssize_t ignored = ::write(STDOUT_FILENO, data, n);
          (void)ignored;
        } else {
          error_body.append(data, n);
        }
        return true;
      });
  DDPX_CHECK(r, ErrorKind::kIo, "{}: no answer ({})", o.server, httplib::to_string(r.error()));
  if (status >= 300) {
    json body = json::parse(error_body, nullptr, false);
    fail(
        ErrorKind::kUsage, "{} answered {}: {}", o.server, status,
        body.is_object() && body.contains("error") ? body["error"].get<std::string>() : error_body);
  }
}

std::string client_stop(const ClientOptions& o, long long id) {
  Connection c = connect(o);
  json job =
      json::parse(check(c.client->Post(fmt::format("/api/v1/jobs/{}/stop", id), c.headers), o));
  return job["state"].get<std::string>();
}

void client_snapshot(const ClientOptions& o, long long id) {
  Connection c = connect(o);
  check(c.client->Post(fmt::format("/api/v1/jobs/{}/snapshots", id), c.headers), o);
}

std::string client_snapshots(const ClientOptions& o, long long id) {
  Connection c = connect(o);
  json list =
      json::parse(check(c.client->Get(fmt::format("/api/v1/jobs/{}/snapshots", id), c.headers), o));
  std::string out = fmt::format("{:<40}  {:<8}  {:>5}  {:>7}  {:>12}\n", "NAME", "KIND", "EPOCH",
                                "STEP", "BYTES");
  for (const json& f : list) {
    out += fmt::format("{:<40}  {:<8}  {:>5}  {:>7}  {:>12}\n", f["name"].get<std::string>(),
                       f["kind"].get<std::string>(), f["epoch"].get<long long>(),
                       f["step"].get<long long>(), f["bytes"].get<long long>());
  }
  return out;
}

long long client_restore_snapshot(const ClientOptions& o, long long id, const std::string& name) {
  Connection c = connect(o);
  json job = json::parse(check(
      c.client->Post(fmt::format("/api/v1/jobs/{}/snapshots/{}/restore", id, name), c.headers), o));
  return job["id"].get<long long>();
}

void client_backup(const ClientOptions& o, long long id, const std::string& snapshots,
                   const std::string& path) {
  Connection c = connect(o);
  httplib::Params params{{"snapshots", snapshots}};
  std::string bytes =
      check(c.client->Get(fmt::format("/api/v1/jobs/{}/backup", id), params, c.headers), o);
  write_file_atomic(path, bytes);
}

long long client_import(const ClientOptions& o, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in, ErrorKind::kUsage, "{}: cannot read it; give a backup written by `ddpx backup`",
             path);
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  Connection c = connect(o);
  json job = json::parse(
      check(c.client->Post("/api/v1/backups", c.headers, bytes, "application/gzip"), o));
  return job["id"].get<long long>();
}

}  // namespace ddpx::serve
