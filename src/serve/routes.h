// What the service's route files (routes_*.cpp) share: each registers the routes of one resource
// on the httplib server (add_*_routes), through guarded(), which authenticates the request and
// maps a refusal or a library error to a JSON answer (api.cpp). A handler refuses a request
// with refuse(status, message); nothing a client sends gets a 5xx (503 only for the service's
// own I/O).
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/store.h"

namespace ddpx::serve {

class Scheduler;

namespace routes {

// A request refused with a status and a message naming the problem.
struct Refusal {
  int status;
  std::string message;
};

[[noreturn]] inline void refuse(int status, const std::string& message) {
  throw Refusal{status, message};
}

// A route's handler, called once the request's user is known (an empty User where the route
// needs none).
using Handler = std::function<void(const httplib::Request&, httplib::Response&, const User& user)>;
// The same for a handler that reads its body itself, through the function it is given.
using BodyReader = std::function<bool(const httplib::ContentReceiver&)>;
using ReaderHandler = std::function<void(const httplib::Request&, httplib::Response&,
                                         const User& user, const BodyReader& read_body)>;

// Wraps a handler: authentication (when `needs_user`), refusals and library errors become
// JSON 4xx (503 for the service's own I/O).
httplib::Server::Handler guarded(Store& store, bool needs_user, Handler handler);
// The same for a handler that reads its body itself (a backup: streamed to disk, not held in
// memory). A refused request's body is read and dropped, so the client is not cut off mid-send.
httplib::Server::HandlerWithContentReader guarded_reader(Store& store, ReaderHandler handler);

void reply(httplib::Response& res, const nlohmann::json& body, int status = 200);
// The request's JSON object body; refuses 413 over kMaxBodyBytes, 415 not JSON, 400 malformed.
nlohmann::json parse_body(const httplib::Request& req);

nlohmann::json job_json(const Job& job);
// The job id in the path (the route's first group); 400 unless a positive integer.
int64_t job_id(const httplib::Request& req);
// The job, when this user may see it; 404 otherwise (another user's job does not exist to them).
Job owned_job(Store& store, const User& user, int64_t id);

// routes_jobs.cpp: refuses what the service decides itself in a train job's command
// (--save_dir, a --resume other than auto).
void check_command(const std::vector<std::string>& command);
// A train job's command for a new run from copied checkpoints: the same, resuming.
std::vector<std::string> resuming(std::vector<std::string> command);

// One per resource, each in its routes_*.cpp.
void add_job_routes(httplib::Server& server, Store& store, Scheduler& scheduler);
void add_log_routes(httplib::Server& server, Store& store);
void add_snapshot_routes(httplib::Server& server, Store& store, Scheduler& scheduler);
void add_backup_routes(httplib::Server& server, Store& store, Scheduler& scheduler);
void add_host_routes(httplib::Server& server, Store& store, Scheduler& scheduler);

}  // namespace routes
}  // namespace ddpx::serve
