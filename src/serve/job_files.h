// A job's files in the service's state folder: STATE/files/ID/checkpoints is the --save_dir the
// service gives every `ddpx train` job, so its per-epoch checkpoints and the snapshots asked for
// over the API land there; STATE/files/ID/imported holds what a backup brought along (logs,
// metrics). Checkpoint names are train/checkpoint.h's (checkpoint_epoch0002[_step000120].ddpx);
// nothing else in the folder is ever served, so a request cannot name a path out of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddpx::serve {

// "svcID": the job's name in the launcher's record (and its log folder's) or in Slurm.
std::string job_name(int64_t id);
std::string job_files_dir(const std::string& state_dir, int64_t id);
std::string job_checkpoints_dir(const std::string& state_dir, int64_t id);

// `ddpx train ...`: the jobs that write checkpoints and answer snapshot requests.
bool is_train_command(const std::vector<std::string>& command);

struct CheckpointFile {
  std::string name;
  int64_t epoch = 0;      // epochs done
  int64_t step = 0;       // steps into the next epoch (a snapshot), 0 for an epoch's end
  bool snapshot = false;  // taken on request (snapshot) or at an epoch's end
  int64_t bytes = 0;
  int64_t modified = 0;  // unix seconds
};

// Whether `name` is a checkpoint file name ddpx writes (and nothing more: no '/', no "..").
bool is_checkpoint_name(const std::string& name);

// The checkpoints in `dir`, newest (most epochs, then steps) first; none when it does not exist.
std::vector<CheckpointFile> list_checkpoint_files(const std::string& dir);

}  // namespace ddpx::serve
