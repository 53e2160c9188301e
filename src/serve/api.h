// The service's HTTP API, versioned under /api/v1 (JSON), plus /metrics (Prometheus text).
// Every request but /api/v1/health and /api/v1/openapi.json carries `Authorization: Bearer
// TOKEN`; a user sees and touches only their own jobs, an admin every job. Errors are
// {"error": "..."} with a 4xx status naming the problem; nothing a client sends gets a 5xx.
#pragma once

#include <string>

namespace httplib {
class Server;
}

namespace ddpx::serve {

class Scheduler;
class Store;

inline constexpr size_t kMaxBodyBytes = 1 << 20;            // a JSON request
inline constexpr size_t kMaxBackupBytes = size_t{1} << 30;  // POST /api/v1/backups

// Every route of the API and /metrics, one routes_*.cpp per resource (routes.h).
void add_routes(httplib::Server& server, Store& store, Scheduler& scheduler);

const std::string& openapi_json();  // openapi.cpp

}  // namespace ddpx::serve
