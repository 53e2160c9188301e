#include "bench/loader_bench.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "bench/train_bench.h"
#include "core/error.h"
#include "core/log.h"
#include "core/proc_memory.h"
#include "core/timer.h"
#include "data/image_dataset.h"
#include "data/loader.h"

namespace ddpx::bench {
namespace {

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

// Pss of /proc/self/smaps_rollup in MiB (0 when the kernel has none).
double pss_mib() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  double kib = 0;
  while (in >> key) {
    if (key == "Pss:") {
      in >> kib;
      return kib / 1024.0;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace

LoaderBenchResult run_loader_bench(const LoaderBenchOptions& given) {
  // Process start to here: the dynamic loader mapping and relocating libtorch (and its CUDA
  // libraries where it was built with them), static initialisers, the CLI. On a loaded machine
  // this is most of the first batch's wall time, and none of it is the loader's.
  const double startup_s = job_age_seconds();
  Stopwatch loader_clock;
  LoaderBenchOptions o = given;
  if (!o.data_url.empty()) o.dataset = data::DatasetId::kShards;
  DDPX_CHECK(o.dataset == data::DatasetId::kImageFolder ||
                 o.dataset == data::DatasetId::kImagenet || o.dataset == data::DatasetId::kShards,
             ErrorKind::kUsage,
             "bench loader: --dataset {}: expected imagefolder, imagenet or shards (the streamed "
             "image sets)",
             data::name(o.dataset));
  DDPX_CHECK(o.data_dir.empty() != o.data_url.empty(), ErrorKind::kUsage,
             "bench loader: give --data_dir (an image folder, or tar shards with --dataset "
             "shards) or --data_url (tar shards on an HTTP server), one of them");
  DDPX_CHECK(o.workers >= 1 && o.batch_size >= 1 && o.image_size >= 1 && o.batches >= 0 &&
                 o.warmup >= 0 && o.threads >= 1,
             ErrorKind::kUsage,
             "bench loader: --workers {}, --batch_size {}, --image_size {}, --batches {}, --warmup "
             "{}, --threads {}: expected workers, batch size, image size and threads >= 1, "
             "batches and warmup >= 0",
             o.workers, o.batch_size, o.image_size, o.batches, o.warmup, o.threads);
  at::set_num_threads(o.threads);

  data::DatasetSpec spec;
  spec.dataset = o.dataset;
  spec.data_dir = o.data_dir;
  spec.data_url = o.data_url;
  // The training folder alone, read whole: a benchmark needs no validation set (it would index
  // a second folder, or the same one twice).
  spec.with_validation = false;
  LoaderBenchResult r;
  r.startup_s = startup_s;
  Stopwatch index_timer;
  const data::DatasetSplits splits = data::load_dataset(spec);
  r.index_s = index_timer.seconds();
  const data::Dataset& train = splits.train;
  r.images = train.size();
  r.index_cached = train.files && !train.files->sharded() && train.files->index_cached;

  data::LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.num_workers = o.workers;
  lo.seed = o.seed;
  lo.per_sample_streams = true;
  lo.transform.image_size = o.image_size;
  lo.transform.random_resized_crop = true;
  lo.transform.horizontal_flip = true;
  lo.transform.decode = o.decode;
  lo.transform.normalize = data::Normalize::kImagenet;
  lo.transform.dataset_mean = splits.mean;
  lo.transform.dataset_std = splits.std;
  data::DataLoader loader(train, lo);
  std::vector<int64_t> order(static_cast<size_t>(r.images));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(o.seed));
  loader.start_epoch(order, 0);
  const int64_t available = loader.num_batches();
  const int64_t timed = o.batches > 0 ? o.batches : available - o.warmup;
  DDPX_CHECK(timed >= 1 && o.warmup + timed <= available, ErrorKind::kUsage,
             "bench loader: {} images in {} make {} batch(es) of {}: too few for {} warmup and {} "
             "timed; lower --warmup, --batches or --batch_size, or use a larger folder",
             r.images, o.data_url.empty() ? o.data_dir : o.data_url, available, o.batch_size,
             o.warmup, std::max<int64_t>(timed, 1));

  auto take = [&] {
    auto batch = loader.next();
    DDPX_CHECK(batch.has_value(), ErrorKind::kInternal, "bench loader: the epoch ended early");
    DDPX_CHECK(batch->images.dim() == 4 && batch->images.size(1) == 3 &&
                   batch->images.size(2) == o.image_size && batch->images.size(3) == o.image_size,
               ErrorKind::kInternal, "bench loader: a batch of shape {}, expected (B, 3, {}, {})",
               fmt::format("{}", fmt::join(batch->images.sizes(), ", ")), o.image_size,
               o.image_size);
    return batch->images.size(0);
  };
  take();
  r.first_batch_s = job_age_seconds();
  r.loader_first_batch_s = loader_clock.seconds();
  r.first_batch_cpu_s = cpu_seconds();
  for (int64_t k = 1; k < o.warmup; ++k) take();
  Stopwatch timer;
  const double cpu0 = cpu_seconds();
  for (int64_t k = 0; k < timed; ++k) r.timed_images += take();
  const double seconds = timer.seconds();
  r.images_per_sec = static_cast<double>(r.timed_images) / seconds;
  r.cpu_ms_per_image = 1000.0 * (cpu_seconds() - cpu0) / static_cast<double>(r.timed_images);
  r.peak_rss_mib = proc_status_mib("VmHWM");
  r.pss_mib = pss_mib();

  log::out(
      "bench loader: {} {} ({} images), {} worker thread(s), batch {}, {} decode, "
      "RandomResizedCrop({}) + flip + ImageNet normalisation to float",
      data::name(o.dataset), o.data_url.empty() ? o.data_dir : o.data_url, r.images, o.workers,
      o.batch_size, data::name(o.decode), o.image_size);
  log::out(
      "images/s: {:.1f} ({} images in {:.2f} s after {} warmup batches) | CPU {:.2f} ms an image",
      r.images_per_sec, r.timed_images, seconds, o.warmup, r.cpu_ms_per_image);
  log::out(
      "first batch: {:.3f} s from process start ({:.3f} s start-up, then {:.3f} s in the loader: "
      "index, threads, the first batch), {:.2f} CPU s | index: {:.3f} s ({})",
      r.first_batch_s, r.startup_s, r.loader_first_batch_s, r.first_batch_cpu_s, r.index_s,
      o.dataset == data::DatasetId::kShards ? "tar headers scanned"
      : r.index_cached                      ? "read from its cache"
                                            : "built, then cached");
  log::out("memory: peak resident {:.1f} MiB, proportional (PSS) {:.1f} MiB at the end",
           r.peak_rss_mib, r.pss_mib);
  if (!o.json.empty()) {
    nlohmann::json line = {{"dataset", data::name(o.dataset)},
                           {"images", r.images},
                           {"workers", o.workers},
                           {"decode", data::name(o.decode)},
                           {"batch_size", o.batch_size},
                           {"image_size", o.image_size},
                           {"timed_images", r.timed_images},
                           {"images_per_sec", r.images_per_sec},
                           {"cpu_ms_per_image", r.cpu_ms_per_image},
                           {"first_batch_s", r.first_batch_s},
                           {"startup_s", r.startup_s},
                           {"loader_first_batch_s", r.loader_first_batch_s},
                           {"first_batch_cpu_s", r.first_batch_cpu_s},
                           {"index_s", r.index_s},
                           {"index_cached", r.index_cached},
                           {"peak_rss_mib", r.peak_rss_mib},
                           {"pss_mib", r.pss_mib}};
    std::ofstream out(o.json, std::ios::app);
    DDPX_CHECK(out.good(), ErrorKind::kIo, "bench loader: --json {}: cannot be written", o.json);
    out << line.dump() << "\n";
  }
  return r;
}

}  // namespace ddpx::bench
