// Backups of a job: one .tar.gz that moves a job to another machine. It holds
//   manifest.json     {"format": "ddpx-backup", "version": 1, "created", "job": {id, user,
//                      command, workers, nodes, ports, state, exit_code, submitted, started,
//                      ended}, "files": ...} (nodes: optional, 1 when absent)
//                      "files": [{"path", "bytes", "sha256"}]}
//   checkpoints/NAME  the chosen checkpoints and snapshots (job_files.h names)
//   logs/rankK.log    every rank's log
//   metrics.json      the per-epoch metrics (job_metrics.h)
// Reading one checks everything before anything is used: only regular files, only the paths the
// manifest lists (no absolute path, no ".."), each with its size and SHA-256, none missing.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/store.h"

namespace ddpx::serve {

// A backup ready to send. Made, it has every file open and hashed (a checkpoint pruned or
// replaced meanwhile changes nothing); write() then streams the archive in pieces, so memory
// stays bounded however large the checkpoints are.
class BackupWriter {
 public:
  // `checkpoints`: files (paths) to include; `log_dir`: the job's log folder (empty: none yet).
  // Throws kIo naming a file it cannot read.
  BackupWriter(const Job& job, const std::vector<std::string>& checkpoints,
               const std::string& log_dir, const nlohmann::json& metrics);
  ~BackupWriter();
  BackupWriter(const BackupWriter&) = delete;
  BackupWriter& operator=(const BackupWriter&) = delete;

  // Sends the .tar.gz through `sink`, piece by piece; a sink returning false (the reader went
  // away) ends it early, and write returns false. Throws kIo on a read or archive error.
  bool write(const std::function<bool(const char* data, size_t size)>& sink) const;

 private:
  struct File {
    std::string path;  // in the archive
    int fd = -1;       // the file, open; or -1 and
    std::string data;  // its bytes (metrics.json)
    uint64_t bytes = 0;
  };
  std::string manifest_;
  std::vector<File> files_;
};

struct Backup {
  nlohmann::json job;                // the manifest's "job"
  std::vector<std::string> command;  // job.command, checked to be strings
  int workers = 1;
  int nodes = 1;
  int extra_ports = 0;
  std::vector<std::string> checkpoints;  // their paths under the folder it was unpacked into
};

// Verifies the archive at `path` (named `name` in errors) and unpacks it into `dir` (created),
// reading it in pieces. Throws kUsage naming the first problem (not a gzip'd tar, no manifest,
// an unlisted or escaping path, a size or checksum mismatch, a missing file).
Backup read_backup(const std::string& path, const std::string& name, const std::string& dir);

}  // namespace ddpx::serve
