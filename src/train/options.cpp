#include "train/options.h"

#include "core/error.h"
#include "models/activation_checkpoint.h"
#include "models/zoo/registry.h"
#include "parallel/pipeline/pipeline_defaults.h"

namespace ddpx::train {
namespace {

// The pipeline's flags, checked before the job joins: a layout refused here never starts a
// collective. The world size is checked by the plan (it needs the job).
void validate_pipeline(const TrainOptions& o) {
  const auto usage = ErrorKind::kUsage;
  DDPX_CHECK(o.pipeline_parallel >= 1, usage,
             "--pipeline_parallel must be at least 1 (1: no pipeline), got {}",
             o.pipeline_parallel);
  DDPX_CHECK(o.microbatches >= 0 && o.stages_per_rank >= 0, usage,
             "--microbatches and --stages_per_rank must be >= 0 (0: automatic), got {} and {}",
             o.microbatches, o.stages_per_rank);
  if (o.pipeline_parallel == 1) {
    DDPX_CHECK(o.microbatches == 0 && o.stages_per_rank == 0, usage,
               "--microbatches and --stages_per_rank set a pipeline: add --pipeline_parallel 2 "
               "(or more), or drop them");
    return;
  }
  const int p = o.pipeline_parallel;
  // (--batch_size_scaled: the replica's batch is known once the job has joined; the same
  // check runs then, before the first collective: check_pipeline_batch.)
  const int m = pipeline_microbatches(o, o.batch_size_scaled ? 0 : o.batch_size);
  const std::string problem =
      parallel::schedule_problem(o.pipeline_schedule, {p, m, pipeline_stages_per_rank(o)});
  DDPX_CHECK(problem.empty(), usage, "--pipeline_schedule {} with --pipeline_parallel {}: {}",
             parallel::name(o.pipeline_schedule), p, problem);
  if (!o.batch_size_scaled) check_pipeline_batch(o, o.batch_size);
  DDPX_CHECK(o.shard_units.empty(), usage,
             "--shard_units with --pipeline_parallel {}: a pipeline shards each of its stages as "
             "one unit; drop --shard_units",
             p);
  DDPX_CHECK(!o.sync_bn, usage,
             "--sync_bn with --pipeline_parallel {}: a pipeline normalises each micro-batch by its "
             "own statistics; drop --sync_bn",
             p);
  DDPX_CHECK(o.comm_hook == dist::CommHook::kAllreduce, usage,
             "--comm_hook {} with --pipeline_parallel {}: a pipeline stage's replicas average "
             "their gradients uncompressed; drop --comm_hook",
             dist::name(o.comm_hook), p);
}

// Tensor parallelism's flags, checked before the job joins (the world and the model's heads
// and widths are checked by the plan, before its first collective).
void validate_tensor_parallel(const TrainOptions& o) {
  const auto usage = ErrorKind::kUsage;
  const int t = o.tensor_parallel;
  DDPX_CHECK(t >= 1, usage, "--tensor_parallel must be at least 1 (1: none), got {}", t);
  DDPX_CHECK(t > 1 || !o.sequence_parallel, usage,
             "--sequence_parallel splits the tokens among the ranks of --tensor_parallel: add "
             "--tensor_parallel 2 (or more), or drop --sequence_parallel");
  if (t == 1) return;
  DDPX_CHECK(o.vocab_divisible_by >= 1, usage,
             "--vocab_divisible_by must be at least 1 (1: pad the vocabulary to a multiple of "
             "--tensor_parallel only), got {}",
             o.vocab_divisible_by);
  DDPX_CHECK(!o.sequence_parallel || o.dataset != data::DatasetId::kTokens || o.seq_len == 0 ||
                 o.seq_len % t == 0,
             usage,
             "--sequence_parallel with --tensor_parallel {}: --seq_len {} does not split into {} "
             "equal shares of tokens; use a --seq_len that {} divides",
             t, o.seq_len, t, t);
  DDPX_CHECK(!o.sync_bn, usage,
             "--tensor_parallel {} with --sync_bn: the models with a tensor-parallel plan have no "
             "BatchNorm; drop --sync_bn",
             t);
  DDPX_CHECK(o.comm_hook == dist::CommHook::kAllreduce, usage,
             "--comm_hook {} with --tensor_parallel {}: the replicas average their pieces "
             "uncompressed; drop --comm_hook",
             dist::name(o.comm_hook), t);
  DDPX_CHECK(o.checkpoint_format != CheckpointFormat::kSharded, usage,
             "--checkpoint_format sharded with --tensor_parallel {}: the plan writes the whole "
             "model's checkpoint; use auto or whole",
             t);
}

// The deterministic mode's flags: what would make a run depend on the world size or the rank
// is refused (the world size itself is checked by the plan, before its first collective).
void validate_deterministic(const TrainOptions& o) {
  const auto usage = ErrorKind::kUsage;
  DDPX_CHECK(o.deterministic || o.deterministic_atom == 8, usage,
             "--deterministic_atom sets the deterministic mode's atoms: add --deterministic, or "
             "drop --deterministic_atom");
  if (!o.deterministic) return;
  DDPX_CHECK(o.deterministic_atom >= 1, usage,
             "--deterministic_atom {}: expected at least 1 sample an atom", o.deterministic_atom);
  DDPX_CHECK(o.batch_size_scaled || o.batch_size % o.deterministic_atom == 0, usage,
             "--deterministic: --batch_size {} is not a whole number of atoms of {} "
             "(--deterministic_atom); pick a multiple of {}",
             o.batch_size, o.deterministic_atom, o.deterministic_atom);
  auto refuse = [&](bool bad, const std::string& flag, const char* why) {
    DDPX_CHECK(!bad, usage, "--deterministic with {}: {}; drop one of the two", flag, why);
  };
  const bool sharded = o.shard != parallel::ShardMode::kNone;
  DDPX_CHECK(!(sharded && o.clip_grad_norm > 0), usage,
             "--deterministic with --shard {} and --clip_grad_norm: the norm over the shards "
             "sums the ranks' squares in the transport's order; drop --clip_grad_norm or --shard",
             parallel::name(o.shard));
  refuse(sharded && (o.shard_gather_dtype == GatherDtype::kBf16 ||
                     o.shard_gather_dtype == GatherDtype::kFp16),
         "--shard_gather_dtype " + std::string(name(o.shard_gather_dtype)),
         "the atoms run on the parameters as the optimizer left them (fp32 gathers)");
  refuse(o.pipeline_parallel > 1, "--pipeline_parallel " + std::to_string(o.pipeline_parallel),
         "a pipeline's micro-batches are not the atoms");
  refuse(o.tensor_parallel > 1, "--tensor_parallel " + std::to_string(o.tensor_parallel),
         "the tensor ranks' partial sums follow the all-reduce's order");
  refuse(o.comm_hook != dist::CommHook::kAllreduce,
         "--comm_hook " + std::string(dist::name(o.comm_hook)),
         "the gradients are gathered whole and summed in a fixed order, never compressed");
  refuse(o.sync_bn, "--sync_bn",
         "BatchNorm normalizes each atom by its own statistics, the same on any world size");
  refuse(o.accumulation_steps > 1, "--accumulation_steps " + std::to_string(o.accumulation_steps),
         "raise --batch_size instead (the atoms already split the batch)");
  refuse(o.mixup > 0 || o.cutmix > 0, o.mixup > 0 ? "--mixup" : "--cutmix",
         "their mixing draws per batch, and a batch differs with the world size");
}

}  // namespace

int pipeline_microbatches(const TrainOptions& o, int64_t replica_batch) {
  // Neither 2P nor P dividing the batch is refused by check_pipeline_batch.
  return parallel::pipeline_microbatches(o.microbatches, o.pipeline_parallel, replica_batch);
}

void check_pipeline_batch(const TrainOptions& o, int64_t replica_batch) {
  const int m = pipeline_microbatches(o, replica_batch);
  if (replica_batch % m == 0) return;
  const int64_t below = replica_batch / m * m;  // two batches that divide, nearest first
  const int64_t a = below > 0 ? below : m, b = below > 0 ? below + m : 2 * m;
  const std::string flag =
      o.batch_size_scaled ? "--batch_size_scaled's per-replica batch" : "--batch_size";
  if (o.microbatches > 0) {
    fail(ErrorKind::kUsage,
         "{} {} does not divide into --microbatches {}: each micro-batch takes the same "
         "rows; pick a batch that {} divides ({} or {}) or other --microbatches",
         flag, replica_batch, m, m, a, b);
  }
  fail(ErrorKind::kUsage,
       "{} {} divides into neither {} nor {} micro-batches (--pipeline_parallel {}): pick a "
       "batch that {} divides ({} or {}) or give --microbatches M with M dividing {}",
       flag, replica_batch, 2 * o.pipeline_parallel, o.pipeline_parallel, o.pipeline_parallel, m, a,
       b, replica_batch);
}

int pipeline_stages_per_rank(const TrainOptions& o) {
  return parallel::pipeline_stages_per_rank(o.stages_per_rank, o.pipeline_schedule);
}

void validate(const TrainOptions& o) {
  auto usage = ErrorKind::kUsage;
  models::check_bias(models::find_model(o.model), o.bias);
  DDPX_CHECK(o.batch_size > 0, usage, "--batch_size must be positive, got {}", o.batch_size);
  DDPX_CHECK(o.eval_batch_size > 0, usage, "--eval_batch_size must be positive, got {}",
             o.eval_batch_size);
  DDPX_CHECK(o.num_epochs > 0, usage, "--num_epochs must be positive, got {}", o.num_epochs);
  DDPX_CHECK(o.learning_rate > 0, usage, "--learning_rate must be positive, got {}",
             o.learning_rate);
  DDPX_CHECK(o.weight_decay >= 0, usage, "--weight_decay must be >= 0, got {}", o.weight_decay);
  DDPX_CHECK(o.momentum >= 0 && o.momentum < 1, usage, "--momentum must be in [0, 1), got {}",
             o.momentum);
  DDPX_CHECK(o.log_every > 0, usage, "--log_every must be positive, got {}", o.log_every);
  DDPX_CHECK(o.accumulation_steps > 0, usage, "--accumulation_steps must be positive, got {}",
             o.accumulation_steps);
  DDPX_CHECK(o.image_size >= 0 || o.image_size == kModelImageSize, usage,
             "--image_size must be a size in pixels, model (the model's input size) or 0 (the "
             "dataset's size)");
  DDPX_CHECK(o.warmup_epochs >= 0, usage, "--warmup_epochs must be >= 0");
  DDPX_CHECK(o.warmup_steps >= 0, usage, "--warmup_steps must be >= 0 optimizer steps, got {}",
             o.warmup_steps);
  DDPX_CHECK(o.warmup_steps == 0 || o.warmup_epochs == 0, usage,
             "--warmup_steps {} and --warmup_epochs {} both set the warmup; give one",
             o.warmup_steps, o.warmup_epochs);
  DDPX_CHECK(o.adam_beta1 >= 0 && o.adam_beta1 < 1 && o.adam_beta2 >= 0 && o.adam_beta2 < 1, usage,
             "--adam_beta1 {} --adam_beta2 {}: each must be in [0, 1) (0.9 and 0.999: "
             "torch.optim's)",
             o.adam_beta1, o.adam_beta2);
  DDPX_CHECK(o.min_lr >= 0 && o.min_lr <= o.learning_rate, usage,
             "--min_lr {}: expected a rate in [0, --learning_rate {}] for the cosine decay to "
             "end at",
             o.min_lr, o.learning_rate);
  DDPX_CHECK(o.min_lr == 0 || o.lr_schedule == Schedule::kCosine, usage,
             "--min_lr goes with --lr_schedule cosine (it is {}); drop --min_lr",
             name(o.lr_schedule));
  DDPX_CHECK(o.lr_step_epochs >= 0, usage,
             "--lr_step_epochs {}: expected >= 0 epochs between decays (0: at 1/2 and 3/4 of "
             "training)",
             o.lr_step_epochs);
  DDPX_CHECK(o.lr_gamma > 0 && o.lr_gamma <= 1, usage,
             "--lr_gamma {}: expected a factor in (0, 1] (0.1: the rate x0.1 at each step)",
             o.lr_gamma);
  DDPX_CHECK(o.lr_schedule == Schedule::kStep || (o.lr_step_epochs == 0 && o.lr_gamma == 0.1),
             usage, "--lr_step_epochs and --lr_gamma go with --lr_schedule step (it is {})",
             name(o.lr_schedule));
  DDPX_CHECK(o.limit_train_batches >= 0 && o.limit_test_batches >= 0, usage,
             "--limit_train_batches and --limit_test_batches must be >= 0 (0 means all)");
  DDPX_CHECK(o.threads >= 0, usage, "--threads must be >= 0 (0: automatic)");
  DDPX_CHECK(o.loader_workers >= 0, usage,
             "--loader_workers must be >= 0 (0: chosen from the cores per rank)");
  DDPX_CHECK(o.timeout_s > 0, usage, "--timeout must be positive seconds");
  DDPX_CHECK(o.keep_checkpoints >= 1, usage, "--keep_checkpoints must be at least 1");
  DDPX_CHECK(o.checkpoint_format != CheckpointFormat::kSharded ||
                 o.shard != parallel::ShardMode::kNone || o.pipeline_parallel > 1,
             usage,
             "--checkpoint_format sharded writes each rank's part: it goes with --shard "
             "optimizer|gradients|full or --pipeline_parallel (with neither every rank holds the "
             "whole state; use auto or whole)");
  DDPX_CHECK(o.base_batch_size > 0, usage, "--base_batch_size must be positive, got {}",
             o.base_batch_size);
  DDPX_CHECK(o.clip_grad_norm >= 0, usage, "--clip_grad_norm must be >= 0 (0: off), got {}",
             o.clip_grad_norm);
  DDPX_CHECK(o.label_smoothing >= 0 && o.label_smoothing < 1, usage,
             "--label_smoothing must be in [0, 1), got {}", o.label_smoothing);
  DDPX_CHECK(o.mixup >= 0 && o.cutmix >= 0, usage,
             "--mixup and --cutmix are Beta(alpha, alpha) parameters: >= 0 (0: off), got {} and "
             "{}",
             o.mixup, o.cutmix);
  DDPX_CHECK(o.random_erasing >= 0 && o.random_erasing <= 1, usage,
             "--random_erasing is a probability per image: in [0, 1], got {}", o.random_erasing);
  DDPX_CHECK(o.ema_decay == 0 || (o.ema_decay > 0 && o.ema_decay < 1), usage,
             "--ema_decay must be in (0, 1) (e.g. 0.999), or 0 for no EMA; got {}", o.ema_decay);
  DDPX_CHECK(o.profile_steps > 0 && o.profile_skip >= 0, usage,
             "--profile_steps must be positive and --profile_skip >= 0, got {} and {}",
             o.profile_steps, o.profile_skip);
  if (o.comm_hook == dist::CommHook::kPowerSgd) {
    DDPX_CHECK(o.powersgd_rank >= 1, usage,
               "--powersgd_rank {}: expected a matrix approximation rank of at least 1 (PowerSGD's "
               "papers use 1 to 4)",
               o.powersgd_rank);
    DDPX_CHECK(o.powersgd_start_iter >= 0, usage,
               "--powersgd_start_iter {}: expected a number of steps, 0 or more",
               o.powersgd_start_iter);
    DDPX_CHECK(o.amp != optim::Amp::kFp16, usage,
               "--comm_hook powersgd with --amp fp16: an overflowed step's inf would enter "
               "PowerSGD's error feedback and every later step; use --amp bf16 (no loss scaling) "
               "or --amp off");
  } else {
    DDPX_CHECK(o.powersgd_rank == 1 && o.powersgd_start_iter == 1000, usage,
               "--powersgd_rank and --powersgd_start_iter set PowerSGD: add --comm_hook powersgd, "
               "or drop them");
  }
  if (o.shard != parallel::ShardMode::kNone) {
    const char* shard = parallel::name(o.shard);
    DDPX_CHECK(o.comm_hook == dist::CommHook::kAllreduce, usage,
               "--comm_hook {} compresses DDP's all-reduce; --shard {} reduce-scatters gradients "
               "uncompressed: drop one of the two flags",
               dist::name(o.comm_hook), shard);
    DDPX_CHECK(o.optimizer != Optimizer::kLars && o.optimizer != Optimizer::kLamb, usage,
               "--optimizer {} scales each parameter by its whole norm, which a shard of --shard "
               "{} does not hold: use sgd, adam or adamw with --shard, or --shard none",
               name(o.optimizer), shard);
  } else {
    DDPX_CHECK(o.shard_units.empty(), usage,
               "--shard_units names the units of a sharded plan: add --shard full (or optimizer, "
               "gradients), or drop --shard_units");
    DDPX_CHECK(
        o.shard_gather_dtype == GatherDtype::kAuto || o.shard_gather_dtype == GatherDtype::kFp32,
        usage,
        "--shard_gather_dtype {} sets what a sharded plan's all-gathers send: add --shard "
        "full (or optimizer, gradients), or drop --shard_gather_dtype",
        name(o.shard_gather_dtype));
  }
  validate_pipeline(o);
  validate_tensor_parallel(o);
  validate_deterministic(o);
  models::parse_activation_checkpointing(o.activation_checkpointing);  // refuses bad values
  DDPX_CHECK(o.resume.empty() || o.resume != "auto" || !o.save_dir.empty(), usage,
             "--resume auto needs --save_dir to know where to look for checkpoints");
}

}  // namespace ddpx::train
