#include "serve/dashboard.h"

#include <httplib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "serve/dashboard_files.h"

namespace ddpx::serve {
namespace {

// The page loads only its own origin's files: a script injected through a job's fields could
// otherwise read the token from sessionStorage and send it elsewhere. Chart.js sizes its canvas
// through inline styles, hence 'unsafe-inline' for styles (never for scripts).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

const EmbeddedFile* find_file(const std::string& name) {
  for (const EmbeddedFile* f = kDashboardFiles; f->name; ++f)
    if (name == f->name) return f;
  return nullptr;
}

std::string content_type(const std::string& name) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with(".html")) return "text/html; charset=utf-8";
  if (ends_with(".js")) return "text/javascript; charset=utf-8";
  if (ends_with(".css")) return "text/css; charset=utf-8";
  if (ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

void not_found(httplib::Response& res, const std::string& message) {
  res.status = 404;
  res.set_content(message + "\n", "text/plain; charset=utf-8");
}

void send_file(httplib::Response& res, const std::string& name) {
  const EmbeddedFile* f = find_file(name);
  if (!f) return not_found(res, "no file /static/" + name + " in the dashboard");
  res.set_header("Cache-Control", "no-cache");  // a new ddpx binary may bring a new page
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", kContentSecurityPolicy);
  res.set_content(reinterpret_cast<const char*>(f->data), f->size, content_type(name));
}

std::string chartjs_missing(const std::string& path) {
  return "chart.js: no file " + path +
         "; install Debian's libjs-chart.js (apt-get install libjs-chart.js) or set "
         "DDPX_CHARTJS=PATH";
}

}  // namespace

std::string chartjs_path() {
  const char* env = std::getenv("DDPX_CHARTJS");
  return env && *env ? env : kChartJsPath;
}

void add_dashboard_routes(httplib::Server& server) {
  std::string path = chartjs_path();
  if (!std::filesystem::is_regular_file(path))
    std::fprintf(stderr, "ddpx serve: the dashboard has no charts: %s\n",
                 chartjs_missing(path).c_str());
  server.Get("/", [](const httplib::Request&, httplib::Response& res) {
    send_file(res, "dashboard.html");
  });
  // Read at each request: installing the package later needs no restart.
  server.Get("/static/chart.js", [path](const httplib::Request&, httplib::Response& res) {
    std::ifstream in(path, std::ios::binary);
    if (!std::filesystem::is_regular_file(path) || !in)
      return not_found(res, chartjs_missing(path));
    res.set_header("Cache-Control", "max-age=3600");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(std::string(std::istreambuf_iterator<char>(in), {}),
                    "text/javascript; charset=utf-8");
  });
  server.Get(R"(/static/([^/]+))", [](const httplib::Request& req, httplib::Response& res) {
    send_file(res, req.matches[1]);
  });
}

}  // namespace ddpx::serve
