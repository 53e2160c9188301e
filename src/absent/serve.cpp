// The job service's entry points in a -DDDPX_GPU_CHECK=ON build (see absent.h): `ddpx serve`,
// `submit`, `backup`, `restore` and the `--server` forms of jobs/logs/stop/snapshot.
#include "absent/absent.h"
#include "serve/client.h"
#include "serve/server.h"

namespace ddpx::serve {
namespace {

constexpr const char* kClient = "talking to a job service (--server)";
constexpr const char* kInstead =
    "run the command without --server for this host's jobs, or use a full build (scripts/build)";

}  // namespace

int run_service(const ServeOptions&) {
  absent::not_built("`ddpx serve` (the job service)", "start it with a full build (scripts/build)");
}
std::string add_token(const std::string&, const std::string&, bool) {
  absent::not_built("`ddpx serve token`", "add tokens with a full build (scripts/build)");
}
long long client_submit(const ClientOptions&, const std::vector<std::string>&, int, int, int) {
  absent::not_built("`ddpx submit`",
                    "start the job with `ddpx run N -- ...`, or use a full build (scripts/build)");
}
std::string client_jobs(const ClientOptions&) { absent::not_built(kClient, kInstead); }
void client_logs(const ClientOptions&, long long, int, bool) {
  absent::not_built(kClient, kInstead);
}
std::string client_stop(const ClientOptions&, long long) { absent::not_built(kClient, kInstead); }
void client_snapshot(const ClientOptions&, long long) { absent::not_built(kClient, kInstead); }
std::string client_snapshots(const ClientOptions&, long long) {
  absent::not_built(kClient, kInstead);
}
long long client_restore_snapshot(const ClientOptions&, long long, const std::string&) {
  absent::not_built(kClient, kInstead);
}
void client_backup(const ClientOptions&, long long, const std::string&, const std::string&) {
  absent::not_built(
      "`ddpx backup`",
      "copy the job's log/ and checkpoint folders instead, or use a full build (scripts/build)");
}
long long client_import(const ClientOptions&, const std::string&) {
  absent::not_built("`ddpx restore`", "restore it with a full build (scripts/build)");
}

}  // namespace ddpx::serve
