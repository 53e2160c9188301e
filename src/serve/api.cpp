#include "serve/api.h"

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "launch/job_control.h"
#include "serve/auth.h"
#include "serve/backup.h"
#include "serve/host_metrics.h"
#include "serve/job_files.h"
#include "serve/job_metrics.h"
#include "serve/scheduler.h"
#include "serve/store.h"

namespace ddpx::serve {
namespace {

using nlohmann::json;

constexpr int kLogWaitPolls = 5 * 600;  // follow=true waits up to 10 minutes for a job to start

// A request refused with a status and a message naming the problem.
struct Refusal {
  int status;
  std::string message;
};

[[noreturn]] void refuse(int status, const std::string& message) { throw Refusal{status, message}; }

json job_json(const Job& j) {
  return {{"id", j.id},
          {"user", j.user},
          {"state", job_state_name(j.state)},
          {"command", j.command},
          {"workers", j.workers},
          {"nodes", j.nodes},
          {"devices", j.slots},
          {"ports", j.ports},
          {"exit_code", j.state == JobState::kEnded ? json(j.exit_code) : json(nullptr)},
          {"submitted", j.submitted},
          {"started", j.started},
          {"ended", j.ended},
          {"slurm", j.slurm_id.empty() ? json(nullptr)
                                       : json{{"id", j.slurm_id}, {"state", j.slurm_state}}}};
}

User authenticate(Store& store, const httplib::Request& req) {
  std::string header = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (header.rfind(bearer, 0) != 0)
    refuse(401, "missing token: send `Authorization: Bearer TOKEN` (ddpx serve token add USER)");
  auto user = store.user_by_token_hash(hash_token(header.substr(bearer.size())));
  if (!user) refuse(401, "unknown token: ask the service's admin for one (ddpx serve token add)");
  return *user;
}

int64_t job_id(const httplib::Request& req) {
  const std::string& text = req.matches[1];
  try {
    size_t used = 0;
    long long id = std::stoll(text, &used);
    if (used == text.size() && id > 0) return id;
  } catch (const std::exception&) {
  }
  refuse(400, "job id '" + text + "' is not a positive integer");
}

// The job, when this user may see it; 404 otherwise (another user's job does not exist to them).
Job owned_job(Store& store, const User& user, int64_t id) {
  auto job = store.job(id);
  if (!job || (!user.admin && job->user != user.name))
    refuse(404, "no job " + std::to_string(id) + " of user " + user.name);
  return *job;
}

json parse_body(const httplib::Request& req) {
  if (req.body.size() > kMaxBodyBytes) refuse(413, "the body is over 1 MiB");
  if (req.get_header_value("Content-Type").find("application/json") != 0)
    refuse(415, "send the body as JSON (Content-Type: application/json)");
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) refuse(400, "the body is not valid JSON");
  if (!body.is_object()) refuse(400, "the body must be a JSON object");
  return body;
}

// Runs `answer`; refusals and library errors become a JSON 4xx (503 for the service's own I/O).
template <typename F>
void answer_errors(httplib::Response& res, F answer) {
  try {
    answer();
  } catch (const Refusal& r) {
    res.status = r.status;
    res.set_content(json{{"error", r.message}}.dump(), "application/json");
  } catch (const Error& e) {
    res.status = e.kind() == ErrorKind::kUsage ? 400 : 503;
    res.set_content(json{{"error", e.what()}}.dump(), "application/json");
  } catch (const std::exception& e) {
    res.status = 400;
    res.set_content(json{{"error", std::string("bad request: ") + e.what()}}.dump(),
                    "application/json");
  }
}

// Wraps a handler: authentication, refusals and library errors become JSON 4xx.
template <typename F>
httplib::Server::Handler guarded(Store& store, bool needs_user, F handler) {
  return [&store, needs_user, handler](const httplib::Request& req, httplib::Response& res) {
    answer_errors(res, [&] {
      User user = needs_user ? authenticate(store, req) : User{};
      handler(req, res, user);
    });
  };
}

// The same for a handler that reads its body itself (a backup: streamed to disk, not held in
// memory). A refused request's body is read and dropped, so the client is not cut off mid-send.
template <typename F>
httplib::Server::HandlerWithContentReader guarded_reader(Store& store, F handler) {
  return [&store, handler](const httplib::Request& req, httplib::Response& res,
                           const httplib::ContentReader& content) {
    bool read = false;
    answer_errors(res, [&] {
      User user = authenticate(store, req);
      handler(req, res, user, [&](const httplib::ContentReceiver& receiver) {
        read = true;
        return content(receiver);
      });
    });
    if (!read) content([](const char*, size_t) { return true; });
  };
}

void reply(httplib::Response& res, const json& body, int status = 200) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

// Refuses what the service decides itself in a train job's command.
void check_command(const std::vector<std::string>& command) {
  if (!is_train_command(command)) return;
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& w = command[i];
    if (w == "--save_dir" || w.rfind("--save_dir=", 0) == 0)
      refuse(400,
             "command: --save_dir is the service's to choose (the job's checkpoints and "
             "snapshots, GET /api/v1/jobs/ID/snapshots); leave it out");
    bool resume = w == "--resume" || w.rfind("--resume=", 0) == 0;
    std::string value = w == "--resume" ? (i + 1 < command.size() ? command[i + 1] : "")
                                        : w.substr(std::min(w.size(), sizeof("--resume=") - 1));
    if (resume && value != "auto")
      refuse(400, "command: --resume " + value +
                      ": a job resumes from its own checkpoints (--resume auto) or from a "
                      "snapshot (POST /api/v1/jobs/ID/snapshots/NAME/restore)");
  }
}

Job submit(Scheduler& scheduler, const User& user, const json& body) {
  for (const auto& [key, value] : body.items()) {
    if (key != "command" && key != "workers" && key != "ports" && key != "nodes")
      refuse(400, "unknown field '" + key + "'; a job has command, workers, nodes and ports");
  }
  if (!body.contains("command") || !body["command"].is_array())
    refuse(400, "command: required, an array of strings (e.g. [\"train\", \"--model\", \"mlp\"])");
  std::vector<std::string> command;
  for (const auto& word : body["command"]) {
    if (!word.is_string()) refuse(400, "command: every element must be a string");
    command.push_back(word.get<std::string>());
  }
  auto integer = [&](const char* key, int fallback) {
    if (!body.contains(key)) return fallback;
    if (!body[key].is_number_integer()) refuse(400, std::string(key) + ": must be an integer");
    return body[key].get<int>();
  };
  check_command(command);
  return scheduler.submit(user.name, command, integer("workers", 1), integer("ports", 0), {},
                          integer("nodes", 1));
}

json checkpoint_json(const CheckpointFile& f) {
  return {{"name", f.name},   {"kind", f.snapshot ? "snapshot" : "epoch"},
          {"epoch", f.epoch}, {"step", f.step},
          {"bytes", f.bytes}, {"created", f.modified}};
}

// A train job's command for a new run from copied checkpoints: the same, resuming.
std::vector<std::string> resuming(std::vector<std::string> command) {
  bool has_resume = std::any_of(command.begin(), command.end(), [](const std::string& w) {
    return w == "--resume" || w.rfind("--resume=", 0) == 0;
  });
  if (is_train_command(command) && !has_resume) {
    command.push_back("--resume");
    command.push_back("auto");
  }
  return command;
}

// The checkpoints a backup takes: ?snapshots=latest (default), all, none, or NAME,NAME.
std::vector<std::string> chosen_checkpoints(const httplib::Request& req, const std::string& dir) {
  std::string choice = req.has_param("snapshots") ? req.get_param_value("snapshots") : "latest";
  auto files = list_checkpoint_files(dir);
  std::vector<std::string> paths;
  if (choice == "none") return paths;
  if (choice == "latest" || choice == "all") {
    for (const auto& f : files) {
      paths.push_back(dir + "/" + f.name);
      if (choice == "latest") break;
    }
    return paths;
  }
  for (size_t start = 0; start <= choice.size();) {
    size_t comma = std::min(choice.find(',', start), choice.size());
    std::string name = choice.substr(start, comma - start);
    if (!is_checkpoint_name(name) || !std::filesystem::exists(dir + "/" + name))
      refuse(400, "snapshots: '" + name +
                      "' is not one of the job's checkpoints (GET /snapshots lists them); or "
                      "give latest, all or none");
    paths.push_back(dir + "/" + name);
    start = comma + 1;
  }
  return paths;
}

}  // namespace

void add_routes(httplib::Server& server, Store& store, Scheduler& scheduler) {
  server.Get("/api/v1/health", [&scheduler](const httplib::Request&, httplib::Response& res) {
    reply(res, {{"status", "ok"},
                {"slots", scheduler.total_slots()},
                {"scheduler", scheduler.placement_name()}});
  });
  server.Get("/api/v1/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(openapi_json(), "application/json");
  });
  server.Get("/api/v1/jobs", guarded(store, true, [&](const auto&, auto& res, const User& u) {
               json list = json::array();
               for (const Job& j : store.jobs(u.admin ? "" : u.name)) list.push_back(job_json(j));
               reply(res, list);
             }));
  server.Post("/api/v1/jobs", guarded(store, true, [&](const auto& req, auto& res, const User& u) {
                reply(res, job_json(submit(scheduler, u, parse_body(req))), 201);
              }));
  server.Get(R"(/api/v1/jobs/([^/]+))",
             guarded(store, true, [&](const auto& req, auto& res, const User& u) {
               reply(res, job_json(owned_job(store, u, job_id(req))));
             }));
  server.Post(R"(/api/v1/jobs/([^/]+)/stop)",
              guarded(store, true, [&](const auto& req, auto& res, const User& u) {
                Job job = owned_job(store, u, job_id(req));
                reply(res, job_json(scheduler.stop(job.id)));
              }));
  server.Post(R"(/api/v1/jobs/([^/]+)/restart)",
              guarded(store, true, [&](const auto& req, auto& res, const User& u) {
                Job job = owned_job(store, u, job_id(req));
                if (job.state != JobState::kEnded)
                  refuse(409, "job " + std::to_string(job.id) + " is " + job_state_name(job.state) +
                                  "; stop it before a restart");
                reply(res, job_json(scheduler.restart(job.id)));
              }));
  server.Delete(R"(/api/v1/jobs/([^/]+))",
                guarded(store, true, [&](const auto& req, auto& res, const User& u) {
                  Job job = owned_job(store, u, job_id(req));
                  if (job.state != JobState::kEnded)
                    refuse(409, "job " + std::to_string(job.id) + " is " +
                                    job_state_name(job.state) + "; stop it before deleting it");
                  store.delete_job(job.id);
                  reply(res, {{"deleted", job.id}});
                }));
  server.Get(
      R"(/api/v1/jobs/([^/]+)/logs)",
      guarded(store, true, [&](const auto& req, auto& res, const User& u) {
        Job job = owned_job(store, u, job_id(req));
        int rank = 0;
        if (req.has_param("rank")) {
          try {
            rank = std::stoi(req.get_param_value("rank"));
          } catch (const std::exception&) {
            refuse(400, "rank: must be an integer");
          }
        }
        if (rank < 0 || rank >= job.workers)
          refuse(400, "rank: " + std::to_string(rank) + " is not a rank of job " +
                          std::to_string(job.id));
        bool follow = req.get_param_value("follow") == "true";
        // Following a job that has not started: wait for its log (the queue may hold it).
        for (int i = 0;
             follow && job.log_dir.empty() && job.state != JobState::kEnded && i < kLogWaitPolls;
             ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          job = owned_job(store, u, job.id);
        }
        if (job.log_dir.empty())
          refuse(409, "job " + std::to_string(job.id) + " has no log yet (it is " +
                          job_state_name(job.state) + "); ask with follow=true to wait");
        std::string path = job.log_dir + "/rank" + std::to_string(rank) + ".log";
        if (!follow) {
          std::ifstream in(path, std::ios::binary);
          res.set_content(std::string(std::istreambuf_iterator<char>(in), {}), "text/plain");
          return;
        }
        int64_t id = job.id;
        // Server-Sent Events for browsers (Accept: text/event-stream): one `data:` event
        // per whole line, then `event: end` with the exit code; else the raw bytes.
        bool sse = req.get_header_value("Accept").find("text/event-stream") != std::string::npos;
        res.set_chunked_content_provider(
            sse ? "text/event-stream" : "text/plain",
            [&store, path, id, sse, offset = std::streamoff(0), partial = std::string()](
                size_t, httplib::DataSink& sink) mutable {
              std::ifstream in(path, std::ios::binary);
              in.seekg(offset);
              std::string chunk(std::istreambuf_iterator<char>(in), {});
              offset += static_cast<std::streamoff>(chunk.size());
              std::string out = chunk;
              if (sse) {
                out.clear();
                partial += chunk;
                for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
                  out += "data: " + partial.substr(0, nl) + "\n\n";
                  partial.erase(0, nl + 1);
                }
              }
              if (!out.empty() && !sink.write(out.data(), out.size())) return false;
              auto now = store.job(id);
              if (!now || now->state == JobState::kEnded) {
                if (chunk.empty()) {
                  if (sse) {
                    std::string end = "event: end\ndata: " +
                                      json{{"exit_code", now ? now->exit_code : -1}}.dump() +
                                      "\n\n";
                    sink.write(end.data(), end.size());
                  }
                  sink.done();
                }
                return true;
              }
              if (chunk.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(200));
              return true;
            });
      }));
  server.Get(R"(/api/v1/jobs/([^/]+)/metrics)",
             guarded(store, true, [&](const auto& req, auto& res, const User& u) {
               Job job = owned_job(store, u, job_id(req));
               std::string log;
               if (!job.log_dir.empty()) {
                 std::ifstream in(job.log_dir + "/rank0.log", std::ios::binary);
                 log.assign(std::istreambuf_iterator<char>(in), {});
               }
               reply(res, {{"id", job.id},
                           {"state", job_state_name(job.state)},
                           {"epochs", epoch_metrics(log)}});
             }));
  server.Post(
      R"(/api/v1/jobs/([^/]+)/snapshots)",
      guarded(store, true, [&](const auto& req, auto& res, const User& u) {
        Job job = owned_job(store, u, job_id(req));
        if (job.state != JobState::kRunning)
          refuse(409, "job " + std::to_string(job.id) + " is " + job_state_name(job.state) +
                          "; only a running job can take a snapshot");
        // The command as it runs: the service gives every train job its --save_dir.
        std::vector<std::string> command = job.command;
        if (is_train_command(command))
          command.push_back("--save_dir=" + job_checkpoints_dir(scheduler.state_dir(), job.id));
        std::string refusal = launch::snapshot_refusal(command);
        if (!refusal.empty()) refuse(409, "job " + std::to_string(job.id) + " " + refusal);
        scheduler.snapshot(job.id);
        reply(res, {{"id", job.id}, {"requested", true}}, 202);
      }));
  server.Get(R"(/api/v1/jobs/([^/]+)/snapshots)",
             guarded(store, true, [&](const auto& req, auto& res, const User& u) {
               Job job = owned_job(store, u, job_id(req));
               json list = json::array();
               for (const auto& f :
                    list_checkpoint_files(job_checkpoints_dir(scheduler.state_dir(), job.id)))
                 list.push_back(checkpoint_json(f));
               reply(res, list);
             }));
  server.Post(R"(/api/v1/jobs/([^/]+)/snapshots/([^/]+)/restore)",
              guarded(store, true, [&](const auto& req, auto& res, const User& u) {
                Job job = owned_job(store, u, job_id(req));
                std::string name = req.matches[2];
                std::string path = job_checkpoints_dir(scheduler.state_dir(), job.id) + "/" + name;
                if (!is_checkpoint_name(name))
                  refuse(400,
                         "'" + name + "' is not a checkpoint name (GET /snapshots lists them)");
                if (!std::filesystem::exists(path))
                  refuse(404, "job " + std::to_string(job.id) + " has no checkpoint " + name);
                Job restored = scheduler.submit(u.name, resuming(job.command), job.workers,
                                                job.extra_ports, {path}, job.nodes);
                json body = job_json(restored);
                body["restored_from"] = {{"job", job.id}, {"snapshot", name}};
                reply(res, body, 201);
              }));
  server.Get(
      R"(/api/v1/jobs/([^/]+)/backup)",
      guarded(store, true, [&](const auto& req, auto& res, const User& u) {
        Job job = owned_job(store, u, job_id(req));
        auto checkpoints =
            chosen_checkpoints(req, job_checkpoints_dir(scheduler.state_dir(), job.id));
        std::string log;
        if (!job.log_dir.empty()) {
          std::ifstream in(job.log_dir + "/rank0.log", std::ios::binary);
          log.assign(std::istreambuf_iterator<char>(in), {});
        }
        // Files opened and hashed now (errors are still a JSON answer), sent later.
        auto writer =
            std::make_shared<BackupWriter>(job, checkpoints, job.log_dir, epoch_metrics(log));
        res.set_header("Content-Disposition",
                       "attachment; filename=\"ddpx-job-" + std::to_string(job.id) + ".tar.gz\"");
        res.set_chunked_content_provider(
            "application/gzip", [writer](size_t, httplib::DataSink& sink) {
              try {
                if (!writer->write([&](const char* data, size_t n) { return sink.write(data, n); }))
                  return false;
              } catch (const std::exception&) {
                return false;  // cut short: the reader's archive does not check out
              }
              sink.done();
              return true;
            });
      }));
  server.Post("/api/v1/backups",
              guarded_reader(store, [&](const auto&, auto& res, const User& u, auto read_body) {
                namespace fs = std::filesystem;
                // Unpacked and verified in a scratch folder first; nothing is kept if it fails.
                std::string scratch = scheduler.state_dir() + "/files/import-" + new_token();
                struct Cleanup {
                  std::string dir;
                  ~Cleanup() {
                    std::error_code ec;
                    fs::remove_all(dir, ec);
                  }
                } cleanup{scratch};
                // The archive goes to disk as it arrives, never whole into memory.
                fs::create_directories(scratch);
                std::string upload = scratch + "/upload.tar.gz";
                {
                  std::ofstream out(upload, std::ios::binary);
                  bool ok = read_body([&](const char* data, size_t n) {
                    out.write(data, static_cast<std::streamsize>(n));
                    return static_cast<bool>(out);
                  });
                  out.close();
                  if (!ok && res.status == 413) refuse(413, "the backup is over 1 GiB");
                  if (!ok) refuse(400, "the upload ended before its body did; send it again");
                  if (!out) refuse(503, "cannot store the uploaded backup in " + scratch);
                }
                Backup backup = read_backup(upload, "the backup", scratch + "/unpacked");
                check_command(backup.command);
                Job job = scheduler.submit(u.name, resuming(backup.command), backup.workers,
                                           backup.extra_ports, backup.checkpoints, backup.nodes);
                // Its logs and metrics are kept beside the new job's files.
                std::error_code ec;
                std::string imported = job_files_dir(scheduler.state_dir(), job.id) + "/imported";
                fs::create_directories(imported, ec);
                for (const char* part : {"logs", "metrics.json"}) {
                  if (fs::exists(scratch + "/unpacked/" + part))
                    fs::rename(scratch + "/unpacked/" + part, imported + "/" + part, ec);
                }
                json body = job_json(job);
                body["imported_from"] = backup.job;
                reply(res, body, 201);
              }));
  server.Get("/api/v1/host", guarded(store, true, [](const auto&, auto& res, const User&) {
               reply(res, host_json(read_host()));
             }));
  server.Get("/metrics", [&store, &scheduler](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(store, scheduler.total_slots()), "text/plain; version=0.0.4");
  });
}

}  // namespace ddpx::serve
