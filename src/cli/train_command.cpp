// `ddpx train`: the seed's training script, flag for flag.
#include <CLI/CLI.hpp>

#include "cli/choices.h"
#include "cli/commands.h"
#include "cli/help_format.h"
#include "cli/model_data_flags.h"
#include "cli/parallel_flags.h"
#include "cli/recommendations.h"
#include "core/error.h"
#include "train/env_limits.h"
#include "train/options.h"
#include "train/recipes.h"
#include "train/trainer.h"

namespace ddpx::cli {
namespace {

// Sets every flag of the recipe that the command line did not give, as if it had been typed.
void apply_recipe(CLI::App& cmd, const std::string& name) {
  const train::Recipe* recipe = train::find_recipe(name);
  if (recipe == nullptr) {
    std::string names;
    for (const auto& r : train::recipes()) names += (names.empty() ? "" : ", ") + r.name;
    fail(ErrorKind::kUsage, "--recipe '{}' is not one of {} (--show_recommendations lists them)",
         name, names);
  }
  for (const auto& [flag, value] : recipe->flags) {
    CLI::Option* option = cmd.get_option(flag);
    if (option->count() > 0) continue;  // the user's value wins
    option->clear();
    option->add_result(value);
    option->run_callback();
  }
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("train",
                                 "train an image classifier (one worker; run it under "
                                 "`ddpx run N --` for N workers)");
  cmd->option_defaults()->always_capture_default();
  auto o = std::make_shared<train::TrainOptions>();
  auto show_recommendations = std::make_shared<bool>(false);
  auto script_options = std::make_shared<bool>(false);
  auto recipe = std::make_shared<std::string>();

  // model and data: the group `bench train` and `tune batch_size` take too
  auto md = std::make_shared<ModelDataOptions>();
  md->model = o->model;
  md->stem = o->stem;
  md->dataset = o->dataset;
  md->image_size = o->image_size;
  md->synthetic_image = o->synthetic_image;
  md->synthetic_classes = o->synthetic_classes;
  add_model_data_flags(cmd, *md);
  add_bias_flag(cmd, o->bias);
  cmd->add_option("--pretrained", o->pretrained,
                  "start from a state_dict saved in Python (torch.save(model.state_dict(), PATH))");
  add_choice(cmd, "--normalize", o->normalize, data::kNormalizeNames,
             "imagenet | dataset | neg_one_one | none");
  add_switch(cmd, "random_crop", o->random_crop, "random crop with 4-pixel padding");
  add_switch(cmd, "flip", o->horizontal_flip, "random horizontal flip");
  cmd->add_option("--random_erasing", o->random_erasing,
                  "random erasing probability per image (timm's --reprob; 0: off)");
  cmd->add_option("--synthetic_size", o->synthetic_size, "synthetic: training images");
  // optimisation
  add_choice(cmd, "--optimizer", o->optimizer, train::kOptimizerNames,
             "sgd | adam | adamw | lars | lamb");
  cmd->add_option("--learning_rate,--lr", o->learning_rate, "peak learning rate");
  cmd->add_option("--weight_decay", o->weight_decay, "weight decay");
  cmd->add_option("--momentum", o->momentum, "SGD momentum");
  cmd->add_option("--adam_beta1", o->adam_beta1, "adam, adamw, lamb: beta1 (Hugging Face's name)");
  cmd->add_option("--adam_beta2", o->adam_beta2,
                  "adam, adamw, lamb: beta2 (nanoGPT's small models: 0.99)");
  add_choice(cmd, "--lr_schedule", o->lr_schedule, train::kScheduleNames,
             "constant | step | cosine (per step)");
  cmd->add_option("--lr_step_epochs", o->lr_step_epochs,
                  "--lr_schedule step: x --lr_gamma every this many epochs (0: at 1/2 and 3/4 of "
                  "training)");
  cmd->add_option("--lr_gamma", o->lr_gamma, "--lr_schedule step: the factor at each step");
  cmd->add_option("--warmup_epochs", o->warmup_epochs, "linear warmup length in epochs");
  cmd->add_option("--warmup_steps", o->warmup_steps,
                  "linear warmup length in optimizer steps (instead of --warmup_epochs)");
  cmd->add_option("--min_lr", o->min_lr,
                  "--lr_schedule cosine: the learning rate it decays to (nanoGPT's min_lr)");
  cmd->add_option("--batch_size", o->batch_size, "batch size per process (as in the seed)");
  cmd->add_flag("--batch_size_scaled", o->batch_size_scaled,
                "keep the global batch at --batch_size: each rank gets batch_size/world");
  cmd->add_option("--eval_batch_size", o->eval_batch_size,
                  "test-set batch size per process (whatever --batch_size is)");
  cmd->add_option("--accumulation_steps", o->accumulation_steps,
                  "micro-batches per optimizer step (gradient accumulation)");
  add_choice(cmd, "--lr_scale", o->lr_scale, train::kLrScaleNames,
             "none | linear | sqrt: scale --learning_rate by (global batch / --base_batch_size)");
  cmd->add_option("--base_batch_size", o->base_batch_size,
                  "the global batch --learning_rate is meant for (with --lr_scale)");
  cmd->add_option("--clip_grad_norm", o->clip_grad_norm,
                  "clip the averaged gradient to this L2 norm (0: off); the step then runs "
                  "after backward");
  // regularization
  cmd->add_option("--label_smoothing", o->label_smoothing, "label smoothing of the targets");
  cmd->add_option("--mixup", o->mixup, "mixup alpha (0: off)");
  cmd->add_option("--cutmix", o->cutmix, "cutmix alpha (0: off; with --mixup, half the batches)");
  cmd->add_option("--ema_decay", o->ema_decay,
                  "keep an EMA of the weights with this decay (e.g. 0.999), evaluated and saved "
                  "beside them (0: off)");
  cmd->add_flag("--sync_bn", o->sync_bn, "BatchNorm statistics over all ranks' batches");
  cmd->add_option("--num_epochs", o->num_epochs, "epochs to train");
  cmd->add_option("--seed", o->seed, "random seed (model init, shuffling, augmentation)");
  // device
  add_choice(cmd, "--device", o->device, dist::kDeviceNames,
             "auto (the GPU of LOCAL_RANK when one is visible) | cpu | cuda (also ROCm GPUs)");
  add_choice(cmd, "--amp", o->amp, optim::kAmpNames,
             "mixed precision: off | bf16 (also on CPU) | fp16 (GPU, with loss scaling) | auto "
             "(bf16 where the device computes it natively: a GPU of compute capability 8.0 or "
             "newer, a CPU with AVX512-BF16 or AMX-BF16; else off; the header says which)");
  cmd->add_flag("--channels_last", o->channels_last,
                "NHWC memory format for convolution weights and images (faster on GPUs)");
  add_switch(cmd, "cudnn_benchmark", o->cudnn_benchmark,
             "let cuDNN pick the fastest convolution algorithms for the fixed shapes");
  // running
  cmd->add_option("--threads", o->threads,
                  "intra-op threads (0: $DDPX_THREADS, $OMP_NUM_THREADS, or cores / local ranks)");
  add_choice(cmd, "--bad_images", o->bad_images, data::kBadImagesNames,
             "imagefolder, imagenet, shards: an image that cannot be read or decoded stops the "
             "run naming it (error), or is left out, named once and counted (skip; in a batch "
             "the next sample stands in, so every rank keeps its batch count)");
  add_choice(cmd, "--decode", o->decode, data::kImageDecodeNames,
             "imagefolder, imagenet, shards: decode only the crop, at the DCT scale it needs, and "
             "resize on uint8 (fast), or decode whole and resize on float as torchvision's "
             "tensor transforms (exact)");
  cmd->add_option("--loader_workers", o->loader_workers,
                  "data loader threads (0: chosen from the cores per rank, at most 8)");
  cmd->add_option("--limit_train_batches", o->limit_train_batches, "batches per epoch (0: all)");
  cmd->add_option("--limit_test_batches", o->limit_test_batches, "test batches (0: all)");
  cmd->add_option("--log_every", o->log_every, "report test accuracy every N epochs");
  add_choice(cmd, "--backend", o->backend, dist::kBackendNames, "auto | gloo | nccl");
  add_choice(cmd, "--transport", o->transport, dist::kTransportNames,
             "all-reduce transport: auto (shared memory when all ranks share this host), shm, "
             "gloo");
  cmd->add_option("--timeout", o->timeout_s, "collective and rendezvous timeout in seconds");
  add_switch(cmd, "broadcast_buffers", o->broadcast_buffers,
             "DDP: broadcast buffers (BatchNorm statistics) from rank 0 before each forward");
  cmd->add_flag("--find_unused_parameters", o->find_unused_parameters,
                "DDP: allow parameters that get no gradient");
  add_choice(cmd, "--comm_hook", o->comm_hook, dist::kCommHookNames,
             "DDP gradient reduction: allreduce | fp16 | bf16 | powersgd");
  cmd->add_option("--powersgd_rank", o->powersgd_rank,
                  "with --comm_hook powersgd: the rank of each gradient matrix's approximation");
  cmd->add_option("--powersgd_start_iter", o->powersgd_start_iter,
                  "with --comm_hook powersgd: steps of plain all-reduce before compressing");
  // parallelism: the group `bench train`, `bench memory` and `plan` take too
  auto parallelism = std::make_shared<ParallelOptions>();
  add_parallel_flags(cmd, *parallelism, kAllParallelFlags);
  cmd->add_flag("--deterministic", o->deterministic,
                "bitwise the same weights on 1, 2, 4, ... processes for one seed and global batch "
                "(--batch_size_scaled): the batch in atoms, each its own forward and backward, "
                "summed in a fixed tree; BatchNorm over each atom; --threads fixed (1 unless "
                "given); slower");
  cmd->add_option("--deterministic_atom", o->deterministic_atom,
                  "with --deterministic: samples an atom (the same on every run)");
  add_switch(cmd, "progress", o->progress, "progress bar on a terminal");
  cmd->add_option("--metrics_json", o->metrics_json, "append per-epoch metrics as JSON lines");
  cmd->add_option("--tensorboard", o->tensorboard,
                  "write TensorBoard event files here (rank 0): loss, accuracy, lr, speed");
  cmd->add_option("--profile", o->profile,
                  "record steps with the profiler: one Chrome trace per rank here, and a phase "
                  "table");
  cmd->add_option("--profile_steps", o->profile_steps, "steps to record with --profile");
  cmd->add_option("--profile_skip", o->profile_skip, "steps to skip before recording");
  // checkpoints
  cmd->add_option("--save_dir", o->save_dir, "write a checkpoint here after every epoch");
  cmd->add_option("--resume", o->resume,
                  "checkpoint path, or auto (newest good one in --save_dir)");
  cmd->add_option("--keep_checkpoints", o->keep_checkpoints, "checkpoints kept in --save_dir");
  add_choice(cmd, "--checkpoint_format", o->checkpoint_format, train::kCheckpointFormatNames,
             "auto (with --shard on 2+ ranks or --pipeline_parallel: each rank writes its "
             "part, else one file) | whole "
             "(one file: for a --save_dir not shared across nodes) | sharded");
  cmd->add_option("--recipe", *recipe,
                  "start from named settings (--show_recommendations lists them); flags given "
                  "here win");
  // seed helpers
  cmd->add_flag("--show_recommendations", *show_recommendations,
                "print recommended settings per model and exit");
  cmd->add_flag("--script_options", *script_options, "print example commands and exit");

  cmd->callback(
      [cmd, o, md, parallelism, recipe, show_recommendations, script_options, &exit_code] {
        if (*show_recommendations) {
          print_recommendations();
          return;
        }
        if (*script_options) {
          print_script_options();
          return;
        }
        if (!recipe->empty()) apply_recipe(*cmd, *recipe);
        o->model = md->model;
        o->stem = md->stem;
        o->dataset = md->dataset;
        o->data_dir = md->data_dir;
        o->data_url = md->data_url;
        o->val_url = md->val_url;
        o->val_dir = md->val_dir;
        o->val_split = md->val_split;
        o->image_size = md->image_size;
        o->synthetic_image = md->synthetic_image;
        o->synthetic_classes = md->synthetic_classes;
        o->seq_len = md->seq_len;
        o->vocab_size = md->vocab_size;
        o->windows = md->windows;
        apply_parallel_options(*parallelism, *o);
        train::apply_env_limits(*o);  // DDPX_EPOCHS and the like, named in the header
        train::run_training(*o);
        exit_code = 0;
      });
}

}  // namespace ddpx::cli
