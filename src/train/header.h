// The start-up lines of `ddpx train` (rank 0 prints them): what is trained on what, how, and
// where. Users and tests read them to confirm a run does what they asked, so each setting that
// changes the training appears here. The first lines are the original tool's (`Training MODEL
// on DATASET dataset`, `Input size: SxS, Classes: C`, `Auto-detected num_workers: N`), which
// users' scripts read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "train/options.h"
#include "train/task.h"

namespace torch::nn {
class Module;
}
namespace ddpx::dist {
class Context;
}

namespace ddpx::train {

// What the run decided, beside the options it was given.
struct RunFacts {
  double parameters_millions = 0;
  bool stem_choice = false;  // the model takes --stem (the resnet family); the header names it
  int64_t train_size = 0, test_size = 0;
  int64_t height = 0, width = 0, channels = 0, image_size = 0, num_classes = 0;
  // A streamed set's images vary in size: height and width are their median, 0 when unknown
  // (tar shards: no header is read before training).
  bool streamed = false;
  Task task;  // image_size is the sequence length and num_classes the vocabulary of a token task
  int threads = 0;
  int world_size = 1;
  std::string backend;
  int64_t batch_size = 0, global_batch = 0;
  double learning_rate = 0;  // after --lr_scale
  std::string device;
  std::string plan;  // the parallel plan's describe(): its optimizer step and split
  int sync_bn_layers = 0;
  std::vector<std::string> rank_devices;
  std::string pretrained_note;
  std::string data_source;    // the folder the dataset was read from, or "generated"
  std::string resize_reason;  // why the images are resized, when ddpx chose it
  int loader_workers = 0;
  std::string env_limits;  // env_limits_line(): the environment's limits this run applied
  std::string amp_note;    // optim::amp_speed_note(): --amp bf16 on a CPU without native bf16
  std::string amp_reason;  // why --amp auto chose what it did (optim::resolve_amp), else ""
};

// The facts read off the job, the data set and the model (`parameters`: the whole model's, as
// built). Collective: every rank names its device.
void add_run_facts(RunFacts& facts, const TrainOptions& options, dist::Context& context,
                   const data::DatasetSplits& splits, int64_t parameters);

std::vector<std::string> header_lines(const TrainOptions& options, const RunFacts& facts);

// "regularization: label_smoothing 0.1 | mixup alpha 0.2 | ..." or "" when none is on.
std::string regularization_line(const TrainOptions& options, const RunFacts& facts);

}  // namespace ddpx::train
