#include "serve/api.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "serve/auth.h"
#include "serve/routes.h"
#include "serve/scheduler.h"
#include "serve/store.h"

namespace ddpx::serve {
namespace routes {
namespace {

using nlohmann::json;

User authenticate(Store& store, const httplib::Request& req) {
  std::string header = req.get_header_value("Authorization");
  const std::string bearer = "Bearer ";
  if (header.rfind(bearer, 0) != 0)
    refuse(401, "missing token: send `Authorization: Bearer TOKEN` (ddpx serve token add USER)");
  auto user = store.user_by_token_hash(hash_token(header.substr(bearer.size())));
  if (!user) refuse(401, "unknown token: ask the service's admin for one (ddpx serve token add)");
  return *user;
}

// Runs `answer`; refusals and library errors become a JSON 4xx (503 for the service's own I/O).
void answer_errors(httplib::Response& res, const std::function<void()>& answer) {
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

}  // namespace

httplib::Server::Handler guarded(Store& store, bool needs_user, Handler handler) {
  return [&store, needs_user, handler](const httplib::Request& req, httplib::Response& res) {
    answer_errors(res, [&] {
      User user = needs_user ? authenticate(store, req) : User{};
      handler(req, res, user);
    });
  };
}

httplib::Server::HandlerWithContentReader guarded_reader(Store& store, ReaderHandler handler) {
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

void reply(httplib::Response& res, const json& body, int status) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
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

Job owned_job(Store& store, const User& user, int64_t id) {
  auto job = store.job(id);
  if (!job || (!user.admin && job->user != user.name))
    refuse(404, "no job " + std::to_string(id) + " of user " + user.name);
  return *job;
}

}  // namespace routes

void add_routes(httplib::Server& server, Store& store, Scheduler& scheduler) {
  using routes::reply;
  server.Get("/api/v1/health", [&scheduler](const httplib::Request&, httplib::Response& res) {
    reply(res, {{"status", "ok"},
                {"slots", scheduler.total_slots()},
                {"scheduler", scheduler.placement_name()}});
  });
  server.Get("/api/v1/openapi.json", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(openapi_json(), "application/json");
  });
  routes::add_job_routes(server, store, scheduler);
  routes::add_log_routes(server, store);
  routes::add_snapshot_routes(server, store, scheduler);
  routes::add_backup_routes(server, store, scheduler);
  routes::add_host_routes(server, store, scheduler);
}

}  // namespace ddpx::serve
