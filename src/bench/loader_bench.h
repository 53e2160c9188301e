// The image loader alone (`ddpx bench loader`): images/s of ddpx's streamed image pipeline (read,
// decode, RandomResizedCrop, flip, ImageNet normalisation, into batches of float tensors) with
// --workers loader threads, no model; the time to the first batch (the folder's index read from
// its cache on a second start), split into the process's start-up (loading libtorch and the CLI)
// and the loader's own part (index, threads, the first batch's decode), with the CPU seconds
// spent until then; the indexing time, and the process's peak resident memory.
// bench/compare_loader.sh runs it beside torchvision's ImageFolder and DataLoader
// (bench/pytorch_loader.py) on the same folder of JPEGs.
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "data/transforms.h"

namespace ddpx::bench {

struct LoaderBenchOptions {
  data::DatasetId dataset = data::DatasetId::kImageFolder;  // imagefolder, imagenet or shards
  std::string data_dir;
  std::string data_url;  // shards on an HTTP server, in place of data_dir (implies shards)
  int workers = 1;       // loader threads
  int64_t batch_size = 64;
  int64_t image_size = 224;  // the crop's side
  int64_t batches = 0;       // timed batches (0: the rest of one epoch after the warmup)
  int64_t warmup = 2;        // untimed batches first
  uint64_t seed = 0;
  data::ImageDecode decode = data::ImageDecode::kFast;
  int threads = 1;   // torch intra-op threads (the workers do the work)
  std::string json;  // append one JSON line here
};

struct LoaderBenchResult {
  int64_t images = 0;  // in the dataset
  int64_t timed_images = 0;
  double images_per_sec = 0;
  double cpu_ms_per_image = 0;  // process CPU time (user + system) over the timed window
  double first_batch_s = 0;     // process start to the first batch
  double startup_s = 0;         // process start to the loader's code (libtorch loaded, CLI read)
  double loader_first_batch_s = 0;  // the loader's part: index, loader threads, the first batch
  double first_batch_cpu_s = 0;     // CPU seconds (user + system, all threads) to the first batch
  double index_s = 0;               // listing and indexing (or reading the cached index)
  bool index_cached = false;        // the index was read from its cache
  double peak_rss_mib = 0;          // VmHWM
  double pss_mib = 0;               // proportional set size at the end
};

LoaderBenchResult run_loader_bench(const LoaderBenchOptions& options);

}  // namespace ddpx::bench
