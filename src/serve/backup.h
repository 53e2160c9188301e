// Backups of a job: one .tar.gz that moves a job to another machine. It holds
//   manifest.json     {"format": "ddpx-backup", "version": 1, "created", "job": {id, user,
//                      command, workers, ports, state, exit_code, submitted, started, ended},
//                      "files": [{"path", "bytes", "sha256"}]}
//   checkpoints/NAME  the chosen checkpoints and snapshots (job_files.h names)
//   logs/rankK.log    every rank's log
//   metrics.json      the per-epoch metrics (job_metrics.h)
// Reading one checks everything before anything is used: only regular files, only the paths the
// manifest lists (no absolute path, no ".."), each with its size and SHA-256, none missing.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/store.h"

namespace ddpx::serve {

// The archive's bytes. `checkpoints`: files (paths) to include; `log_dir`: the job's log folder
// (empty: none yet).
std::string write_backup(const Job& job, const std::vector<std::string>& checkpoints,
                         const std::string& log_dir, const nlohmann::json& metrics);

struct Backup {
  nlohmann::json job;                // the manifest's "job"
  std::vector<std::string> command;  // job.command, checked to be strings
  int workers = 1;
  int extra_ports = 0;
  std::vector<std::string> checkpoints;  // their paths under the folder it was unpacked into
};

// Verifies `bytes` (named `name` in errors) and unpacks it into `dir` (created). Throws kUsage
// naming the first problem (not a gzip'd tar, no manifest, an unlisted or escaping path, a size
// or checksum mismatch, a missing file).
Backup read_backup(const std::string& bytes, const std::string& name, const std::string& dir);

}  // namespace ddpx::serve
