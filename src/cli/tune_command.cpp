// `ddpx tune batch_size`: the batch-size finder (bench/batch_finder.h).
#include <CLI/CLI.hpp>

#include "bench/batch_finder.h"
#include "cli/choices.h"
#include "cli/commands.h"

namespace ddpx::cli {

void add_tune_command(CLI::App& app, int& exit_code) {
  auto* tune = app.add_subcommand("tune", "find settings for this machine: batch_size");
  tune->require_subcommand(1);
  auto* batch = tune->add_subcommand(
      "batch_size",
      "the batch per device to train with: the largest that fits on a GPU (with a margin), the "
      "knee of images/s on a CPU");
  batch->option_defaults()->always_capture_default();
  auto b = std::make_shared<bench::BatchFinderOptions>();
  batch->add_option("--model", b->model, "model name (`ddpx models` lists them)");
  batch->add_option("--stem", b->stem, "imagenet | cifar");
  batch->add_option("--image_size", b->image_size, "input height = width");
  batch->add_option("--num_classes", b->num_classes, "classifier outputs");
  batch->add_option("--start_batch", b->start_batch, "first batch size tried");
  batch->add_option("--max_batch", b->max_batch, "largest batch size tried");
  batch->add_option("--steps", b->steps,
                    "timed steps per size, at least (and at least 1 s), after one warm-up step");
  batch->add_option("--margin", b->margin, "GPU: share of memory kept free");
  batch->add_option("--memory_budget_gib", b->memory_budget_gib,
                    "CPU: peak resident memory allowed (0: half of MemAvailable)");
  batch->add_option(
      "--threads", b->threads,
      "intra-op threads (0: $DDPX_THREADS, $OMP_NUM_THREADS, or cores / local ranks)");
  add_choice(batch, "--device", b->device, kDeviceNames, "auto | cpu | cuda");
  add_choice(batch, "--amp", b->amp, kAmpNames, "off | bf16 | fp16");
  batch->add_flag("--channels_last", b->channels_last, "NHWC weights and images");
  batch->callback([b, &exit_code] {
    bench::print_batch_finder(*b, bench::find_batch_size(*b));
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
