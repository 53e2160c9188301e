#include "train/header.h"

#include <fmt/format.h>
#include <torch/utils.h>

#include "distributed/context.h"
#include "distributed/device.h"
#include "models/zoo/registry.h"
#include "train/data_setup.h"
#include "train/env_limits.h"

namespace ddpx::train {

void add_run_facts(RunFacts& f, const TrainOptions& o, dist::Context& context,
                   const data::DatasetSplits& splits, int64_t parameters) {
  f.rank_devices = context.gather_text(dist::describe_device(context.device()));
  const auto& d = splits.train;
  f.parameters_millions = static_cast<double>(parameters) / 1e6;
  f.stem_choice = models::find_model(o.model).has_cifar_stem;
  f.train_size = d.size();
  f.test_size = splits.test.size();
  f.height = d.height();
  f.width = d.width();
  f.channels = d.channels();
  f.streamed = d.streamed();
  f.num_classes = d.num_classes;
  f.threads = torch::get_num_threads();
  f.world_size = context.world_size();
  f.backend = context.backend();
  f.device = context.device().str();
  f.data_source = splits.source;
  f.task = task_of(d);
  f.resize_reason = input_size(o, native_size(o, d)).reason;
  f.loader_workers = loader_workers(o);
  f.env_limits = env_limits_line(o);
  f.amp_note = optim::amp_speed_note(o.amp, context.device(), optim::cpuinfo_flags());
}

namespace {

// The images as stored: HxWxC, or for a streamed set (whose images vary) their median size when
// the index read it, else "images of varying size" (tar shards).
std::string stored_size(const RunFacts& f) {
  if (!f.streamed) return fmt::format("{}x{}x{}", f.height, f.width, f.channels);
  if (f.height > 0 && f.width > 0)
    return fmt::format("images of varying size, median {}x{}", f.height, f.width);
  return "images of varying size";
}

}  // namespace

std::vector<std::string> header_lines(const TrainOptions& o, const RunFacts& f) {
  std::vector<std::string> lines;
  lines.push_back(fmt::format("Training {} on {} dataset", o.model, data::name(o.dataset)));
  if (f.task.next_token) {
    lines.push_back(
        fmt::format("Sequence length: {}, Vocabulary: {}", f.image_size, f.num_classes));
  } else {
    lines.push_back(
        fmt::format("Input size: {}x{}, Classes: {}", f.image_size, f.image_size, f.num_classes));
  }
  if (o.loader_workers == 0)
    lines.push_back(fmt::format("Auto-detected num_workers: {}", f.loader_workers));
  if (f.task.next_token) {
    lines.push_back(fmt::format(
        "ddpx train: model {} ({:.2f}M parameters{}) | dataset {} from {} ({} train / {} test "
        "windows of {}{}, vocabulary {})",
        o.model, f.parameters_millions, o.bias ? "" : ", no biases", data::name(o.dataset),
        f.data_source, f.train_size, f.test_size,
        f.task.masked_lm ? fmt::format("{} tokens, masked-LM", f.image_size)
                         : fmt::format("{} + 1 tokens", f.image_size),
        o.windows == data::Windows::kRandom ? ", training's started at random" : "",
        f.num_classes));
  } else {
    lines.push_back(fmt::format(
        "ddpx train: model {} ({:.2f}M parameters{}) | dataset {} from {} ({} train / {} test, "
        "{} -> 3x{}x{}, {} classes)",
        o.model, f.parameters_millions,
        f.stem_choice ? std::string(", stem ") + models::name(o.stem) : std::string(),
        data::name(o.dataset), f.data_source, f.train_size, f.test_size, stored_size(f),
        f.image_size, f.image_size, f.num_classes));
  }
  if (!f.resize_reason.empty()) {
    lines.push_back(fmt::format("images resized from {}x{} to {}x{}: {}", f.height, f.width,
                                f.image_size, f.image_size, f.resize_reason));
  }
  if (!f.env_limits.empty()) lines.push_back(f.env_limits);
  const bool with_momentum = o.optimizer == Optimizer::kSgd || o.optimizer == Optimizer::kLars;
  lines.push_back(fmt::format(
      "optimizer {} lr {} momentum {} weight_decay {}{} | schedule {}{} warmup {} | "
      "normalize {} | threads {} | loader workers {}",
      name(o.optimizer), f.learning_rate, with_momentum ? o.momentum : 0.0, o.weight_decay,
      // Adam's betas when they are not torch.optim's, the cosine's floor when it has one.
      !with_momentum && (o.adam_beta1 != 0.9 || o.adam_beta2 != 0.999)
          ? fmt::format(" betas ({:g}, {:g})", o.adam_beta1, o.adam_beta2)
          : std::string(),
      o.lr_schedule == Schedule::kStep
          ? fmt::format("step (x{:g} {})", o.lr_gamma,
                        o.lr_step_epochs > 0 ? fmt::format("every {:g} epochs", o.lr_step_epochs)
                                             : std::string("at 1/2 and 3/4 of training"))
          : std::string(name(o.lr_schedule)),
      o.min_lr > 0 ? fmt::format(" to {:g}", o.min_lr) : std::string(),
      o.warmup_steps > 0 ? fmt::format("{} steps", o.warmup_steps)
                         : fmt::format("{} epochs", o.warmup_epochs),
      data::name(o.normalize), f.threads, f.loader_workers));
  lines.push_back(fmt::format(
      "world size {} ({}) | batch size {} per {}, global batch {}, test batch {} | "
      "accumulation steps {} | learning rate {}{}",
      f.world_size, f.backend, f.batch_size,
      o.pipeline_parallel > 1 || o.tensor_parallel > 1 ? "data-parallel replica" : "process",
      f.global_batch, o.eval_batch_size, o.accumulation_steps, f.learning_rate,
      o.lr_scale == LrScale::kNone
          ? std::string()
          : fmt::format(" (--learning_rate {} x ({} / {}), {} scaling)", o.learning_rate,
                        f.global_batch, o.base_batch_size, name(o.lr_scale))));
  if (auto line = regularization_line(o, f); !line.empty()) lines.push_back(line);
  lines.push_back(fmt::format("device {} | amp {}{} | channels_last {} | {}", f.device, name(o.amp),
                              f.amp_reason.empty() ? "" : " (" + f.amp_reason + ")",
                              o.channels_last ? "on" : "off", f.plan));
  if (!f.amp_note.empty()) lines.push_back(f.amp_note);
  for (size_t r = 0; r < f.rank_devices.size(); ++r)
    lines.push_back(fmt::format("  rank {}: {}", r, f.rank_devices[r]));
  if (!f.pretrained_note.empty()) lines.push_back(f.pretrained_note);
  return lines;
}

std::string regularization_line(const TrainOptions& o, const RunFacts& f) {
  std::vector<std::string> parts;
  if (o.label_smoothing > 0) parts.push_back(fmt::format("label_smoothing {}", o.label_smoothing));
  if (o.mixup > 0) parts.push_back(fmt::format("mixup alpha {}", o.mixup));
  if (o.cutmix > 0) parts.push_back(fmt::format("cutmix alpha {}", o.cutmix));
  if (o.random_erasing > 0) parts.push_back(fmt::format("random_erasing p {}", o.random_erasing));
  if (o.ema_decay > 0) parts.push_back(fmt::format("EMA decay {}", o.ema_decay));
  if (o.clip_grad_norm > 0) {
    parts.push_back(
        fmt::format("clip_grad_norm {} (of the averaged gradient: the step runs after backward)",
                    o.clip_grad_norm));
  }
  if (o.sync_bn) {
    parts.push_back(fmt::format("sync_bn ({} BatchNorm layers, statistics over {} ranks)",
                                f.sync_bn_layers, f.world_size));
  }
  if (parts.empty()) return "";
  std::string line = "regularization:";
  for (size_t i = 0; i < parts.size(); ++i) line += (i ? " | " : " ") + parts[i];
  return line;
}

}  // namespace ddpx::train
