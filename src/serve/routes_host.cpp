// The host: GET /api/v1/host (CPU, memory and GPU readings, host_metrics.h) and /metrics
// (Prometheus text for the service and the host).
#include <httplib.h>

#include "serve/host_metrics.h"
#include "serve/routes.h"
#include "serve/scheduler.h"

namespace ddpx::serve::routes {

void add_host_routes(httplib::Server& server, Store& store, Scheduler& scheduler) {
  server.Get("/api/v1/host", guarded(store, true, [](const auto&, auto& res, const User&) {
               reply(res, host_json(read_host()));
             }));
  server.Get("/metrics", [&store, &scheduler](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(store, scheduler.total_slots()), "text/plain; version=0.0.4");
  });
}

}  // namespace ddpx::serve::routes
