// /api/v1/jobs: submit, list, show, stop, restart, delete a job, and its per-epoch metrics.
#include <httplib.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "serve/job_files.h"
#include "serve/job_metrics.h"
#include "serve/routes.h"
#include "serve/scheduler.h"

namespace ddpx::serve::routes {
namespace {

using nlohmann::json;

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

}  // namespace

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

void add_job_routes(httplib::Server& server, Store& store, Scheduler& scheduler) {
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
}

}  // namespace ddpx::serve::routes
