// The model and data flags that `train`, `bench train` and `tune batch_size` share, added by one
// function so that a train command becomes a bench or tune command by changing the verb: the same
// names, the same meanings, one parse.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "data/token_windows.h"
#include "models/stem.h"

namespace ddpx::cli {

struct ModelDataOptions {
  std::string model = "resnet18";
  models::Stem stem = models::Stem::kImagenet;
  data::DatasetId dataset = data::DatasetId::kFashionMnist;
  std::string data_dir;          // empty: the dataset's default folder
  std::string data_url;          // shards on an HTTP server (implies --dataset shards)
  std::string val_url;           // validation shards on an HTTP server (shards only)
  std::string val_dir;           // image folders: the validation folder
  double val_split = 0.1;        // imagefolder without --val_dir: the share held out
  int64_t image_size = 0;        // 0: the dataset's native size; -1: the model's; else N
  int64_t synthetic_image = 32;  // --dataset synthetic: height = width
  int64_t synthetic_classes = 10;
  int64_t seq_len = 0;     // --dataset tokens: window length (0: the model's context)
  int64_t vocab_size = 0;  // --dataset tokens: 0: the largest token + 1
  data::Windows windows = data::Windows::kStride;  // --dataset tokens: training windows' cut

  // The dataset to load (or whose shape to take), synthetic sizes included.
  data::DatasetSpec dataset_spec() const;
  // The square side the model sees: --image_size N, the model's own size (--image_size model),
  // else the dataset's native size fitted to the model (train/data_setup.h's rule).
  int64_t input_size() const;
};

// --seq_len and --vocab_size, also for `ddpx plan` and `bench memory` (a language model's
// window and vocabulary), added by add_model_data_flags() and add_token_flags() alike.
void add_token_flags(CLI::App* cmd, int64_t& seq_len, int64_t& vocab_size);

// --bias / --no_bias: a GPT's biases (train, plan, bench train, bench memory and tune alike).
void add_bias_flag(CLI::App* cmd, bool& bias);

// Adds --model, --stem, --dataset, --data_dir, --data_url, --val_url, --val_dir, --val_split,
// --image_size, --synthetic_image, --synthetic_classes, --seq_len, --vocab_size and --windows to
// `cmd`, parsed into `options`, whose values --help shows as defaults.
void add_model_data_flags(CLI::App* cmd, ModelDataOptions& options);

}  // namespace ddpx::cli
