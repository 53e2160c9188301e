// Backups: GET /api/v1/jobs/ID/backup streams a job as one .tar.gz (backup.h); POST
// /api/v1/backups imports one as a new job of the caller that resumes from its checkpoints.
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "serve/auth.h"
#include "serve/backup.h"
#include "serve/job_files.h"
#include "serve/job_metrics.h"
#include "serve/routes.h"
#include "serve/scheduler.h"

namespace ddpx::serve::routes {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

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
    if (!is_checkpoint_name(name) || !fs::exists(dir + "/" + name))
      refuse(400, "snapshots: '" + name +
                      "' is not one of the job's checkpoints (GET /snapshots lists them); or "
                      "give latest, all or none");
    paths.push_back(dir + "/" + name);
    start = comma + 1;
  }
  return paths;
}

void send_backup(Scheduler& scheduler, const Job& job, const httplib::Request& req,
                 httplib::Response& res) {
  auto checkpoints = chosen_checkpoints(req, job_checkpoints_dir(scheduler.state_dir(), job.id));
  std::string log;
  if (!job.log_dir.empty()) {
    std::ifstream in(job.log_dir + "/rank0.log", std::ios::binary);
    log.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Files opened and hashed now (errors are still a JSON answer), sent later.
  auto writer = std::make_shared<BackupWriter>(job, checkpoints, job.log_dir, epoch_metrics(log));
  res.set_header("Content-Disposition",
                 "attachment; filename=\"ddpx-job-" + std::to_string(job.id) + ".tar.gz\"");
  res.set_chunked_content_provider("application/gzip", [writer](size_t, httplib::DataSink& sink) {
    try {
      if (!writer->write([&](const char* data, size_t n) { return sink.write(data, n); }))
        return false;
    } catch (const std::exception&) {
      return false;  // cut short: the reader's archive does not check out
    }
    sink.done();
    return true;
  });
}

// Queues the uploaded backup as a new job of `user`; returns the answer's body. Unpacked and
// verified in a scratch folder first; nothing is kept if it fails.
json import_backup(Scheduler& scheduler, const User& user, httplib::Response& res,
                   const BodyReader& read_body) {
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
  Job job = scheduler.submit(user.name, resuming(backup.command), backup.workers,
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
  return body;
}

}  // namespace

void add_backup_routes(httplib::Server& server, Store& store, Scheduler& scheduler) {
  server.Get(R"(/api/v1/jobs/([^/]+)/backup)",
             guarded(store, true, [&](const auto& req, auto& res, const User& u) {
               send_backup(scheduler, owned_job(store, u, job_id(req)), req, res);
             }));
  server.Post("/api/v1/backups",
              guarded_reader(store, [&](const auto&, auto& res, const User& u, auto read_body) {
                reply(res, import_backup(scheduler, u, res, read_body), 201);
              }));
}

}  // namespace ddpx::serve::routes
