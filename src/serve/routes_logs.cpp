// GET /api/v1/jobs/ID/logs?rank=K[&follow=true]: a rank's log, whole, or followed as it grows
// until the job ends (raw bytes, or Server-Sent Events for a browser).
#include <httplib.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve/routes.h"

namespace ddpx::serve::routes {
namespace {

using nlohmann::json;

constexpr int kLogWaitPolls = 5 * 600;  // follow=true waits up to 10 minutes for a job to start
constexpr auto kLogPoll = std::chrono::milliseconds(200);

// Follows one log file as httplib's chunked content provider: each call sends what the file
// gained since the last, and ends the answer once the job has ended and nothing more came. With
// `sse` (Accept: text/event-stream) every whole line is one `data:` event, and the end is an
// `event: end` with the job's exit code; otherwise the bytes go as they are.
class LogFollower {
 public:
  LogFollower(Store& store, std::string path, int64_t job_id, bool sse)
      : store_(&store), path_(std::move(path)), job_id_(job_id), sse_(sse) {}

  bool operator()(size_t, httplib::DataSink& sink) {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(offset_);
    std::string chunk(std::istreambuf_iterator<char>(in), {});
    offset_ += static_cast<std::streamoff>(chunk.size());
    std::string out = chunk;
    if (sse_) {
      out.clear();
      partial_ += chunk;
      for (size_t nl; (nl = partial_.find('\n')) != std::string::npos;) {
        out += "data: " + partial_.substr(0, nl) + "\n\n";
        partial_.erase(0, nl + 1);
      }
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    auto now = store_->job(job_id_);
    if (!now || now->state == JobState::kEnded) {
      if (chunk.empty()) {
        if (sse_) {
          std::string end =
              "event: end\ndata: " + json{{"exit_code", now ? now->exit_code : -1}}.dump() + "\n\n";
          sink.write(end.data(), end.size());
        }
        sink.done();
      }
      return true;
    }
    if (chunk.empty()) std::this_thread::sleep_for(kLogPoll);
    return true;
  }

 private:
  Store* store_;
  std::string path_;
  int64_t job_id_;
  bool sse_;
  std::streamoff offset_ = 0;
  std::string partial_;  // SSE: the start of a line not yet whole
};

}  // namespace

void add_log_routes(httplib::Server& server, Store& store) {
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
          std::this_thread::sleep_for(kLogPoll);
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
        bool sse = req.get_header_value("Accept").find("text/event-stream") != std::string::npos;
        res.set_chunked_content_provider(sse ? "text/event-stream" : "text/plain",
                                         LogFollower(store, path, job.id, sse));
      }));
}

}  // namespace ddpx::serve::routes
