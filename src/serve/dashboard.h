// The web dashboard: `GET /` is a page (its script and style under /static/, embedded in the
// binary) that drives the API from the browser with the user's token. The page and its files
// hold no data, so they need no token; every API call the page makes sends one.
// /static/chart.js is Chart.js read from disk at each request: Debian's libjs-chart.js, or the
// file named by $DDPX_CHARTJS. Without it that path answers 404 naming the package, and the page
// shows its tables without charts.
#pragma once

#include <string>

namespace httplib {
class Server;
}

namespace ddpx::serve {

inline constexpr const char* kChartJsPath = "/usr/share/javascript/chart.js/chart.min.js";

std::string chartjs_path();  // $DDPX_CHARTJS, else kChartJsPath

void add_dashboard_routes(httplib::Server& server);

}  // namespace ddpx::serve
