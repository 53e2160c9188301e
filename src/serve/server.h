// `ddpx serve`: the job service for a shared node. Binds 127.0.0.1 by default; any other
// address needs TLS (--tls_cert, --tls_key) or an explicit --insecure. Runs until SIGINT or
// SIGTERM; the jobs it started go on and are re-adopted by the next start on the same --state.
#pragma once

#include <string>

#include "serve/slurm_jobs.h"

namespace ddpx::serve {

struct ServeOptions {
  std::string state_dir;
  std::string listen = "127.0.0.1:8470";
  int slots = 0;       // CPU slots on a host without GPUs; 0: its usable cores
  int user_quota = 0;  // devices per user; 0: none
  bool insecure = false;
  std::string tls_cert, tls_key;
  std::string scheduler = "local";  // or "slurm": hand jobs to Slurm (slurm_jobs.h)
  SlurmSettings slurm;
};

int run_service(const ServeOptions& options);  // returns the exit code

// `ddpx serve token add USER [--admin]`: returns the new token (shown once).
std::string add_token(const std::string& state_dir, const std::string& user, bool admin);

}  // namespace ddpx::serve
