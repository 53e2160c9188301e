// Everything `ddpx train` can be told, with the defaults `--help` shows. The flag names are
// the seed's (run-ddp.sh users pass them unchanged); the defaults are the demo's recipe for
// ResNet-18 on Fashion-MNIST at 28x28, which reaches > 0.85 test accuracy in one epoch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/token_windows.h"
#include "data/transforms.h"
#include "distributed/choices.h"
#include "models/stem.h"
#include "optim/amp.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage_split.h"
#include "parallel/sharded/shard_mode.h"
#include "train/optim.h"

namespace ddpx::train {

// --image_size model: the model's own input size (ModelInfo::default_image_size).
inline constexpr int64_t kModelImageSize = -1;

// --shard_gather_dtype (shard_units' neighbour below).
enum class GatherDtype { kAuto, kFp32, kBf16, kFp16 };
inline constexpr NameTable<GatherDtype, 4> kGatherDtypeNames{{{GatherDtype::kAuto, "auto"},
                                                              {GatherDtype::kFp32, "fp32"},
                                                              {GatherDtype::kBf16, "bf16"},
                                                              {GatherDtype::kFp16, "fp16"}}};
inline const char* name(GatherDtype dtype) { return name_of(kGatherDtypeNames, dtype); }

// --checkpoint_format (keep_checkpoints' neighbour below).
enum class CheckpointFormat { kAuto, kWhole, kSharded };
inline constexpr NameTable<CheckpointFormat, 3> kCheckpointFormatNames{
    {{CheckpointFormat::kAuto, "auto"},
     {CheckpointFormat::kWhole, "whole"},
     {CheckpointFormat::kSharded, "sharded"}}};
inline const char* name(CheckpointFormat format) { return name_of(kCheckpointFormatNames, format); }

struct TrainOptions {
  // model and data
  std::string model = "resnet18";
  models::Stem stem = models::Stem::kImagenet;
  bool bias = true;        // a GPT's biases (--no_bias: nanoGPT's bias=False)
  std::string pretrained;  // a torch.save'd state_dict to start from
  data::DatasetId dataset = data::DatasetId::kFashionMnist;
  std::string data_dir;    // empty: the dataset's default folder
  std::string data_url;    // shards: URLs on an HTTP server (data/shard_urls.h), not data_dir
  std::string val_url;     // shards: the validation shards' URLs (data/shard_urls.h)
  std::string val_dir;     // image folders: the validation folder
  double val_split = 0.1;  // imagefolder without val_dir: the share held out for validation
  int64_t image_size = 0;  // 0: the dataset's native size (resized where the model needs);
                           // kModelImageSize: the model's input size
  data::Normalize normalize = data::Normalize::kDataset;
  bool random_crop = false;  // random crop with 4-pixel zero padding
  bool horizontal_flip = true;
  double random_erasing = 0.0;    // probability per image (timm's --reprob); 0: off
  int64_t synthetic_size = 2048;  // --dataset synthetic: training images
  int64_t synthetic_image = 32;   // --dataset synthetic: height = width
  int64_t synthetic_classes = 10;
  int64_t seq_len = 0;     // --dataset tokens: the window's input length (0: the model's context)
  int64_t vocab_size = 0;  // --dataset tokens: 0: the largest token + 1
  data::Windows windows = data::Windows::kStride;  // --dataset tokens: training windows' cut

  // optimisation
  Optimizer optimizer = Optimizer::kSgd;
  double learning_rate = 0.05;  // at --base_batch_size when --lr_scale is not none
  double weight_decay = 5e-4;
  double momentum = 0.9;
  double adam_beta1 = 0.9;    // adam, adamw, lamb: the first moment's decay
  double adam_beta2 = 0.999;  // and the second's (nanoGPT's small models take 0.99)
  Schedule lr_schedule = Schedule::kCosine;
  double lr_step_epochs = 0.0;  // step: x lr_gamma every this many epochs (0: at 1/2 and 3/4)
  double lr_gamma = 0.1;        // step: the factor
  double warmup_epochs = 0.0;
  int64_t warmup_steps = 0;  // in optimizer steps, as nanoGPT, llm.c and torchtitan count it
  double min_lr = 0.0;  // cosine: where the decay ends (nanoGPT's min_lr; absolute, not scaled)
  int64_t batch_size = 128;        // per process, as in the seed
  int64_t eval_batch_size = 512;   // per process, for the test set (no gradients: larger is fine)
  bool batch_size_scaled = false;  // keep the global batch at batch_size: batch/world per rank
  int64_t accumulation_steps = 1;
  LrScale lr_scale = LrScale::kNone;  // learning rate times (global batch / base_batch_size)^p
  int64_t base_batch_size = 256;
  double clip_grad_norm = 0.0;  // max L2 norm of the averaged gradient; 0: no clipping

  // regularization
  double label_smoothing = 0.0;
  double mixup = 0.0;      // mixup alpha (Beta(a, a)); 0: off
  double cutmix = 0.0;     // cutmix alpha; 0: off (both: half the batches each)
  double ema_decay = 0.0;  // EMA of the weights, evaluated and saved beside them; 0: off
  bool sync_bn = false;    // BatchNorm statistics over all ranks' batches
  int64_t num_epochs = 10;
  uint64_t seed = 0;

  // device
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;  // distributed/device.h
  optim::Amp amp = optim::Amp::kOff;  // autocast dtype (optim/amp.h); fp16 adds loss scaling
  bool channels_last = false;         // NHWC convolution weights and images
  bool cudnn_benchmark = true;        // let cuDNN time its algorithms once (fixed shapes)

  // running
  int threads = 0;  // intra-op threads; 0: default_threads() (distributed/threads.h)
  data::BadImages bad_images = data::BadImages::kError;  // streamed sets: unreadable images
  data::ImageDecode decode = data::ImageDecode::kFast;   // streamed sets: crop-only decoding
  int loader_workers = 0;           // background threads building batches; 0: from cores per rank
  int64_t limit_train_batches = 0;  // 0: all
  int64_t limit_test_batches = 0;
  int64_t log_every = 1;  // test accuracy every N epochs (and after the last)
  dist::BackendChoice backend = dist::BackendChoice::kAuto;
  dist::Transport transport = dist::Transport::kAuto;  // shared-memory all-reduce on one host
  double timeout_s = 1800;                             // collective and rendezvous timeout
  bool broadcast_buffers = true;
  bool find_unused_parameters = false;
  dist::CommHook comm_hook = dist::CommHook::kAllreduce;
  int64_t powersgd_rank = 1;           // --comm_hook powersgd: the approximation rank
  int64_t powersgd_start_iter = 1000;  // plain all-reduce for this many steps first
  // Sharded data parallel (parallel/sharded/): what is split across the ranks; kNone is DDP.
  parallel::ShardMode shard = parallel::ShardMode::kNone;
  std::vector<std::string> shard_units;  // submodules gathered together; empty: every block
  // --shard_gather_dtype: what the sharded plan's all-gathers send. auto: --amp's dtype (bf16,
  // fp16), else fp32; fp32: the shards as they are.
  GatherDtype shard_gather_dtype = GatherDtype::kAuto;
  // Pipeline parallel (parallel/pipeline/): P stages a replica; 1 is none. --batch_size stays per
  // data-parallel replica (world / P of them).
  int pipeline_parallel = 1;
  int microbatches = 0;  // per batch; 0: 2 x pipeline_parallel (P where only P divides)
  parallel::PipelineSchedule pipeline_schedule = parallel::PipelineSchedule::k1F1B;
  int stages_per_rank = 0;  // interleaved's V; 0: 2 for interleaved, else 1
  parallel::PipelineBalance pipeline_balance = parallel::PipelineBalance::kTime;
  // Tensor parallel (parallel/tensor/): T ranks split each layer of a replica; 1 is none. The
  // world is world / T data-parallel replicas of T ranks; --batch_size stays per replica.
  int tensor_parallel = 1;
  bool sequence_parallel = false;  // with tensor_parallel: activations cut over tokens
  // With tensor_parallel: a GPT's or BERT's vocabulary padded to a multiple of this x T
  // (Megatron-LM's --make-vocab-size-divisible-by).
  int64_t vocab_divisible_by = 128;
  // --deterministic (parallel/data/deterministic_plan.h): bitwise the same weights on any
  // power-of-two world size for one seed and global batch; atoms of this many samples.
  bool deterministic = false;
  int64_t deterministic_atom = 8;
  // none | blocks | every:K (models/activation_checkpoint.h): blocks recompute their forward in
  // backward.
  std::string activation_checkpointing = "none";
  bool progress = true;      // progress bar when stderr is a terminal
  std::string metrics_json;  // optional JSON-lines file of per-epoch metrics
  std::string tensorboard;   // optional TensorBoard log directory (rank 0 writes)
  std::string profile;       // optional directory for one Chrome trace per rank
  int64_t profile_steps = 5;
  int64_t profile_skip = 3;  // warm-up steps before recording (allocator, cuDNN autotuning)

  // checkpoints
  std::string save_dir;  // empty: no checkpoints
  std::string resume;    // PATH or "auto" (newest good checkpoint in save_dir)
  int keep_checkpoints = 3;
  // auto: a sharded plan on more than one rank writes each rank's part (sharded_checkpoint.h),
  // other plans one file; whole: one file always (rank 0 gathers; for a --save_dir that is not
  // shared across nodes); sharded: as auto, refused without --shard.
  CheckpointFormat checkpoint_format = CheckpointFormat::kAuto;
};

// Throws ddpx::Error(kUsage) naming the flag when a value is out of range.
void validate(const TrainOptions& options);

// --microbatches and --stages_per_rank with their automatic values filled in. Automatic
// micro-batches: 2 x --pipeline_parallel, or --pipeline_parallel where only that divides
// `replica_batch` (the batch of one data-parallel replica; 0: not known yet).
int pipeline_microbatches(const TrainOptions& options, int64_t replica_batch);
// Throws ddpx::Error(kUsage) naming the flags when the micro-batches do not divide
// `replica_batch` evenly (an epoch's last, smaller batch may still split unevenly: each
// micro-batch is then weighted by its rows).
void check_pipeline_batch(const TrainOptions& options, int64_t replica_batch);
int pipeline_stages_per_rank(const TrainOptions& options);

}  // namespace ddpx::train
