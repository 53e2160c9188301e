// `ddpx plan`'s arithmetic: what one rank will hold under DDP and each ZeRO stage, before launch.
//
// measure_model() builds nothing itself: it takes the model as the trainer builds it and
// measures, in this process on the CPU, what does not follow from a formula:
// - the parameters, and how the sharded plan would group and split them (units.h, each
//   parameter along dim 0, padded: shard_layout.h), so shard sizes are exact for any world size;
// - the activations: one forward, cross-entropy and backward at two batch sizes into allocated
//   gradients (DDP's buckets stay allocated between steps), counting the bytes tensors hold at
//   the allocator (tensor_bytes.h) over the parameters and gradients, fitted as fixed +
//   per_sample x batch (saved activations and backward's temporaries). With `amp`
//   the passes run under bf16 autocast (fp16 saves the same bytes), so the low-precision weight
//   copies and the halved activations are measured, not guessed.
//
// plan_memory() then adds, for a world of N ranks with K optimizer bytes a parameter (Psi
// parameters, fp32 weights and master state: ddpx's autocast keeps no low-precision copies
// between steps), what each plan holds (sharded_plan.h):
//   none       params 4 Psi, grads 4 Psi, optimizer K Psi; on more than one rank the bucket
//              rebuild after the first step (reducer.h) holds a second 4 Psi once
//   optimizer  + an fp32 shard of the parameters and of the gradients (4 S each, S the padded
//              shard elements), optimizer K S; two unit reduce-scatter inputs in flight
//   gradients  params 4 Psi + 4 S, grads 4 S, optimizer K S; during backward a unit's whole
//              gradients and two reduce-scatter inputs
//   full       params 4 S, grads 4 S, optimizer K S; gathered: the root unit, the unit running
//              and the one prefetched, the running unit's gradients, two reduce-scatter inputs
// and the measured activations at the batch. The peak is the model states plus the larger of
// the activations and the transient buffers: activations peak as backward starts, the
// buffers come later in backward and in the step, as activations are freed; and at least the
// whole model, 4 Psi, which every rank holds at start, before the plan shards it. On a GPU, usable
// memory is --gpu_memory less a reserve for what is not tensors (CUDA context, cuBLAS and cuDNN
// workspaces, the caching allocator's rounding).
#pragma once

#include <torch/nn/modules/container/any.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/sharded/shard_mode.h"

namespace ddpx::parallel {

// One parameter as the sharded plan splits it: dim 0 rows, elements a row.
struct ParamRows {
  int64_t rows = 1;
  int64_t row_numel = 1;
  // A tensor-parallel piece: the dim the ranks split (0: rows, 1: within a row); -1: whole.
  int tensor_dim = -1;
};

struct UnitParams {
  std::string name;
  bool root = false;
  std::vector<ParamRows> params;
};

// The sharded plan's units of `module` (sharded/units.h's default choice) and their parameters'
// rows, in the plan's order; `tensor_dim` (if given) names each parameter's tensor-parallel dim.
std::vector<UnitParams> unit_params(
    torch::nn::Module& module, const std::function<int(const std::string&)>& tensor_dim = nullptr);

struct ModelMemory {
  int64_t parameters = 0;  // Psi
  std::vector<UnitParams> units;
  // Activation bytes (above parameters and gradients) at the two probed batches, and the fit.
  int64_t probe_batch_small = 0, probe_batch_large = 0;
  int64_t probe_bytes_small = 0, probe_bytes_large = 0;
  double activation_fixed = 0;       // bytes
  double activation_per_sample = 0;  // bytes
  bool amp = false;
  // A sample's input image (fp32) and label, or a language model's window of token ids and its
  // labels: the batch the loader hands every rank of a replica. predict() and the mesh rows
  // (mesh_plan.h) add the rank's batch of them; the activations above leave it out.
  double sample_bytes = 0;

  double activation_bytes(int64_t batch) const;
};

struct ProbeOptions {
  int64_t image_size = 224;
  int64_t num_classes = 1000;  // a language model's: the vocabulary
  int64_t batch_small = 2;     // the larger probe is twice this
  bool amp = false;            // bf16 autocast on the CPU
  // A language model's (GPT, BERT): > 0, the tokens of a sequence; the input is (B, seq_len)
  // token ids, the labels one a token, the loss the mean over every token's prediction (as ddpx
  // train's), vocabulary-parallel under tensor parallelism, the vocabulary padded to a multiple
  // of vocab_divisible_by x T as ddpx train pads it.
  int64_t seq_len = 0;
  int64_t vocab_divisible_by = 128;
};

// One probe batch: images and a class each, or token windows and a label a token.
struct ProbeBatch {
  torch::Tensor input, labels;
};
ProbeBatch probe_batch(const ProbeOptions& options, int64_t batch);
// The mean cross-entropy of `output` against the labels, the class dimension last (a language
// model's (B, T, V) logits), as ddpx train's loss.
torch::Tensor probe_loss(const torch::Tensor& output, const torch::Tensor& labels);

// Measures `model` (fp32, on the CPU, in train mode); see above. The model's gradients are left
// allocated.
ModelMemory measure_model(torch::nn::AnyModule& model, const ProbeOptions& options);

struct PlanRequest {
  int world_size = 1;
  int64_t batch_size = 1;                  // per rank
  double optimizer_bytes_per_param = 4;    // K: SGD momentum 4, Adam 8, SGD without momentum 0
  double gpu_memory = 80.0 * (1LL << 30);  // bytes a GPU has
  double reserve = 1.0 * (1LL << 30);      // bytes that are not tensors
};

struct ModePrediction {
  ShardMode mode = ShardMode::kNone;
  // The whole model, 4 Psi: every rank builds it (and moves it to its GPU) before a plan shards it.
  double start = 0;
  double params = 0, grads = 0, optimizer = 0, transient = 0, activations = 0;
  // Buffers alive beside the whole activations: ZeRO-2 and -3 free a unit's gradients only once
  // the whole unit's are in, and backward reaches the last (usually largest) units first.
  double backward_transient = 0;
  // Activations peak where backward starts; the other transient buffers come later in backward
  // and in the step, as activations are freed: the peak holds the larger of the two.
  double peak() const {
    return std::max(
        start, params + grads + optimizer + std::max(transient, activations + backward_transient));
  }
  bool fits = false;
};

struct MemoryPlan {
  std::vector<ModePrediction> modes;  // none, optimizer, gradients, full
  std::optional<ShardMode> recommended;
  double usable = 0;  // gpu_memory - reserve
  // When nothing fits: the largest batch per rank `full` fits (0: none), and the fewest ranks at
  // which `full` fits this batch (0: no count up to 4096 does: activations do not shard).
  int64_t full_max_batch = 0;
  int full_min_world = 0;
};

ModePrediction predict(const ModelMemory& model, ShardMode mode, const PlanRequest& request);
MemoryPlan plan_memory(const ModelMemory& model, const PlanRequest& request);

// "80G", "80GB", "80GiB", "81920M", "512K", "1.5T", plain bytes: binary units. Throws
// ddpx::Error(kUsage) naming `flag` otherwise.
double parse_bytes(const std::string& text, const std::string& flag);

}  // namespace ddpx::parallel
