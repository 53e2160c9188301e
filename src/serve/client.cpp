#include "serve/client.h"

#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

// A refusal's message: its JSON "error", else the body as it came.
std::string error_message(const std::string& body) {
  json parsed = json::parse(body, nullptr, false);
  return parsed.is_object() && parsed.contains("error") && parsed["error"].is_string()
             ? parsed["error"].get<std::string>()
             : body;
}

// The body of a 2xx answer; a kUsage (4xx) or kIo (no answer, 5xx) error otherwise.
std::string check(const httplib::Result& r, const ClientOptions& o) {
  DDPX_CHECK(r, ErrorKind::kIo, "{}: no answer ({}); is `ddpx serve` running there?", o.server,
             httplib::to_string(r.error()));
  if (r->status >= 200 && r->status < 300) return r->body;
  fail(r->status < 500 ? ErrorKind::kUsage : ErrorKind::kIo, "{} answered {}: {}", o.server,
       r->status, error_message(r->body));
}

}  // namespace

long long client_submit(const ClientOptions& o, const std::vector<std::string>& command,
                        int workers, int ports, int nodes) {
  Connection c = connect(o);
  json request = {{"command", command}, {"workers", workers}, {"ports", ports}};
  if (nodes != 1) request["nodes"] = nodes;
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
  // Streamed into PATH.partial and renamed into place once whole: never held in memory, and no
  // half-written PATH if the transfer breaks.
  std::string partial = path + ".partial";
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  DDPX_CHECK(out, ErrorKind::kUsage, "-o {}: cannot write {}; choose another file", path, partial);
  int status = 0;
  std::string error_body;
  auto result = c.client->Get(
      fmt::format("/api/v1/jobs/{}/backup?snapshots={}", id,
                  httplib::detail::encode_query_param(snapshots)),
      c.headers,
      [&](const httplib::Response& r) {
        status = r.status;
        return true;
      },
      [&](const char* data, size_t n) {
        if (status < 200 || status >= 300) {
          error_body.append(data, n);
          return true;
        }
        out.write(data, static_cast<std::streamsize>(n));
        return static_cast<bool>(out);
      });
  out.close();
  bool whole = result && status >= 200 && status < 300 && out;
  if (!whole) {
    std::remove(partial.c_str());
    DDPX_CHECK(result, ErrorKind::kIo, "{}: the backup did not arrive whole ({}); try again",
               o.server, httplib::to_string(result.error()));
    DDPX_CHECK(status >= 200 && status < 300, status < 500 ? ErrorKind::kUsage : ErrorKind::kIo,
               "{} answered {}: {}", o.server, status, error_message(error_body));
    fail(ErrorKind::kIo, "-o {}: cannot write it (disk full?)", path);
  }
  int fd = ::open(partial.c_str(), O_RDONLY | O_CLOEXEC);  // on disk before it takes PATH's name
  bool synced = fd >= 0 && ::fsync(fd) == 0;
  if (fd >= 0) ::close(fd);
  DDPX_CHECK(synced && std::rename(partial.c_str(), path.c_str()) == 0, ErrorKind::kIo,
             "-o {}: cannot move {} into place: {}", path, partial, std::strerror(errno));
}

long long client_import(const ClientOptions& o, const std::string& path) {
  std::error_code ec;
  auto size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in && !ec, ErrorKind::kUsage,
             "{}: cannot read it; give a backup written by `ddpx backup`", path);
  Connection c = connect(o);
  // Sent from the file in pieces, never held whole in memory.
  auto result = c.client->Post(
      "/api/v1/backups", c.headers, static_cast<size_t>(size),
      [&](size_t offset, size_t length, httplib::DataSink& sink) {
        char buffer[1 << 16];
        in.seekg(static_cast<std::streamoff>(offset));
        in.read(buffer, static_cast<std::streamsize>(std::min(length, sizeof(buffer))));
        return in.gcount() > 0 && sink.write(buffer, static_cast<size_t>(in.gcount()));
      },
      "application/gzip");
  json job = json::parse(check(result, o));
  return job["id"].get<long long>();
}

}  // namespace ddpx::serve
