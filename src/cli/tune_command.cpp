// `ddpx tune batch_size`: the batch-size finder (bench/batch_finder.h).
#include <CLI/CLI.hpp>

#include "bench/batch_finder.h"
#include "cli/choices.h"
#include "cli/commands.h"
#include "cli/model_data_flags.h"

namespace ddpx::cli {

void add_tune_command(CLI::App& app, int& exit_code) {
  auto* tune = app.add_subcommand("tune", "find settings for this machine: batch_size");
  tune->require_subcommand(1);
  auto* batch = tune->add_subcommand(
      "batch_size",
      "the batch per device to train with: the largest that fits on a GPU (with a margin), the "
      "knee of images/s (a language model's tokens/s) on a CPU");
  batch->option_defaults()->always_capture_default();
  auto b = std::make_shared<bench::BatchFinderOptions>();
  // The model and data flags of `ddpx train`: the images are random, in the dataset's shape (a
  // language model's token ids: windows of --seq_len over --vocab_size).
  auto md = std::make_shared<ModelDataOptions>();
  md->dataset = data::DatasetId::kSynthetic;
  md->synthetic_image = b->image_size;
  md->synthetic_classes = b->num_classes;
  add_model_data_flags(batch, *md);
  batch->add_option("--num_classes", md->synthetic_classes, "classifier outputs (synthetic)");
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
  add_choice(batch, "--device", b->device, dist::kDeviceNames, "auto | cpu | cuda");
  add_choice(batch, "--amp", b->amp, optim::kAmpNames,
             "off | bf16 | fp16 | auto (bf16 where the device computes it natively, else off)");
  batch->add_flag("--channels_last", b->channels_last, "NHWC weights and images");
  add_bias_flag(batch, b->bias);
  batch->callback([b, md, &exit_code] {
    b->model = md->model;
    b->stem = md->stem;
    b->image_size = md->input_size();
    b->seq_len = md->seq_len;
    b->vocab_size = md->vocab_size;
    b->num_classes = data::dataset_shape(md->dataset_spec()).num_classes;
    bench::print_batch_finder(*b, bench::find_batch_size(*b));
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
