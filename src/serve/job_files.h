// A job's files in the service's state folder: STATE/files/ID/checkpoints is the --save_dir the
// service gives every `ddpx train` job, so its per-epoch checkpoints and the snapshots asked for
// over the API land there; STATE/files/ID/imported holds what a backup brought along (logs,
// metrics). Checkpoint names are train/checkpoint.h's (checkpoint_epoch0002[_step000120].ddpx);
// nothing else in the folder is ever served, so a request cannot name a path out of it. A
// checkpoint written by parts (ZeRO's shards, a pipeline's stages: train/sharded_checkpoint.h)
// is a folder under that name holding index.ddpx and rankNNNNN-of-NNNNN.ddpx.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
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
  int64_t bytes = 0;      // a folder's: its files'
  int64_t modified = 0;   // unix seconds
  bool parts = false;     // a folder of each rank's part and an index
};

// Whether `name` is a checkpoint file name ddpx writes (and nothing more: no '/', no "..").
bool is_checkpoint_name(const std::string& name);

// Whether `name` is a file a checkpoint folder holds (index.ddpx, rank00001-of-00002.ddpx).
bool is_checkpoint_part_name(const std::string& name);

// The checkpoints in `dir`, newest (most epochs, then steps) first; none when it does not exist.
// A folder counts once it has its index (written last).
std::vector<CheckpointFile> list_checkpoint_files(const std::string& dir);

// The files of checkpoint `path` (itself, or a folder's index and parts), by their names under
// the job's checkpoints folder: {"checkpoint_epoch0002.ddpx/index.ddpx", path/index.ddpx}, ...
std::vector<std::pair<std::string, std::string>> checkpoint_files(const std::string& path);

}  // namespace ddpx::serve
