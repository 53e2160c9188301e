// A checkpoint written sharded (--shard optimizer|gradients|full on more than one rank): a folder
// named as a checkpoint file is (checkpoint_epoch0002.ddpx/) holding
//   index.ddpx                the run's state as a whole checkpoint holds it (position, EMA, RNG,
//                             what the weights belong to), with the parts' layout ("sharded")
//                             in place of the model and optimizer
//   rank00000-of-00002.ddpx   each rank's part: its shards and its optimizer over them
//                             (parallel/sharded/sharded_state.h)
// every file framed and checksummed (checkpoint_file.h). Each rank writes its part into
// NAME.partial/; rank 0 writes the index last and renames the folder, so a folder under the
// checkpoint's name is complete. It loads at any world size, under any plan, in one process
// (checkpoint.h's load_checkpoint()), and `ddpx export` reads it (load_checkpoint_weights()).
// Those two, and save_sharded_checkpoint(), are defined here: checkpoint.cpp's readers of bytes
// (fuzzed alone) need nothing of the parallel plans.
#pragma once

#include <torch/types.h>

#include <string>

#include "parallel/sharded/sharded_state.h"

namespace ddpx::train {

// The index's layout and every part, verified, the tensors on `device`. Throws kData naming the
// file that is missing, truncated or corrupt.
parallel::ShardedParts read_parts(const std::string& folder, const torch::Device& device);

}  // namespace ddpx::train
