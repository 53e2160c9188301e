// /api/v1/jobs/ID/snapshots: ask a running train job for a snapshot, list a job's checkpoints
// (snapshots and per-epoch ones), and restore one as a new job that resumes from it.
#include <httplib.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "launch/job_control.h"
#include "serve/job_files.h"
#include "serve/routes.h"
#include "serve/scheduler.h"

namespace ddpx::serve::routes {
namespace {

using nlohmann::json;

json checkpoint_json(const CheckpointFile& f) {
  return {{"name", f.name},
          {"kind", f.snapshot ? "snapshot" : "epoch"},
          {"epoch", f.epoch},
          {"step", f.step},
          {"bytes", f.bytes},
          {"created", f.modified},
          {"format", f.parts ? "parts" : "whole"}};
}

}  // namespace

void add_snapshot_routes(httplib::Server& server, Store& store, Scheduler& scheduler) {
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
}

}  // namespace ddpx::serve::routes
