// What `ddpx plan` measures of the plans that split a model (pipeline and tensor parallelism), in
// this process on the CPU, beside measure_model()'s whole-model probe (memory_plan.h):
// - layers: each layer of a sequential-shaped model (models/layer_sequence.h, as a pipeline cuts
//   it) run alone on its predecessor's output at two micro-batch sizes: the bytes its forward
//   leaves held for backward (saved tensors and its output), the further peak its backward
//   reaches (its input's gradient, temporaries), its input's bytes (what a stage that starts
//   there receives and keeps), its parameters, and its forward-and-backward time (the pipeline's
//   time balance). A pipeline stage's activations then follow from its layers and the micro-batches
//   in flight (mesh_plan.h). Layers that --activation_checkpointing recomputes keep only their
//   input, as in the pipeline.
// - tensor parallelism: the real split model (tensor/parallelize.h) on T ranks that are threads
//   of this process over Gloo (distributed/thread_ranks.h), each building its own whole model
//   (one at a time) and keeping its pieces, one forward, loss and backward at two batch sizes,
//   each rank's tensor bytes counted by the thread that allocated them (tensor_bytes.h's tags):
//   the largest rank's peak. Its own parameters (pieces and whole layers) are counted. Probes at
//   two T serve every T (at_tensor_size()). For the 3-D mesh (a pipeline of tensor-parallel
//   stages) the same thread ranks also run the split model's layers (SplitModel::layers, as the
//   pipeline cuts them) one at a time, as for a pipeline above, each rank's bytes by its tag: a
//   layer's figures are the largest rank's.
// Both fit activations as fixed + per sample x batch, as measure_model() does.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "models/activation_checkpoint.h"
#include "parallel/planner/memory_plan.h"

namespace ddpx::parallel {

// bytes = fixed + per_sample x batch, through two measured points.
struct LinearFit {
  double fixed = 0, per_sample = 0;
  double at(double batch) const { return std::max(0.0, fixed + per_sample * batch); }
  static LinearFit through(int64_t batch_a, double bytes_a, int64_t batch_b, double bytes_b);
};

struct LayerMemory {
  std::string name;
  int64_t parameters = 0;
  double seconds = 0;        // forward + backward at the smaller probe batch
  LinearFit held;            // what its forward leaves alive for backward, its output included
  LinearFit backward_extra;  // the most its backward adds on top of `held`
  LinearFit input;           // its input: a stage starting here receives and keeps it
  bool recomputed = false;   // --activation_checkpointing recomputes it in backward
};

// nullopt for a model that is not sequential-shaped. Leaves the model's gradients allocated.
std::optional<std::vector<LayerMemory>> measure_layers(
    torch::nn::AnyModule& model, const ProbeOptions& options,
    const models::ActivationCheckpointing& checkpointing = {});

struct TensorMemory {
  int ranks = 1;
  bool sequence_parallel = false;
  int64_t whole_parameters = 0;  // Psi
  int64_t parameters = 0;        // Psi_r: a rank's pieces and the whole layers
  int64_t split_parameters = 0;  // the whole model's parameters that are split (held at start)
  LinearFit activations;         // a rank's, above its parameters and gradients
  // Rank 0's pieces and whole layers as the sharded plan groups them (--shard over the replicas),
  // each piece marked with the dim the tensor ranks split.
  std::vector<UnitParams> units;
  // With `layers`: the split model's layers (parameters: a rank's pieces and whole layers), for
  // a pipeline of tensor-parallel stages. Their times are not measured (the 3-D mesh balances
  // its stages by parameters).
  std::vector<LayerMemory> layers;
};

// `build` makes the whole model (fp32, CPU): once a rank, one at a time; each rank keeps its pieces
// and its own unsplit layers, as in a job. Throws ddpx::Error(kUsage) naming --tensor_parallel
// for a model without a plan or sizes `ranks` does not divide (tensor/parallelize.h's check),
// before any thread starts. `layers`: also probe the split model a layer at a time.
TensorMemory measure_tensor_parallel(const std::function<torch::nn::AnyModule()>& build, int ranks,
                                     bool sequence_parallel, const ProbeOptions& options,
                                     const std::string& model_name,
                                     const models::ActivationCheckpointing& checkpointing = {},
                                     bool layers = false);

// The same probe, one for each of `sequence_modes` (false: plain, true: --sequence_parallel), on
// one set of thread ranks: each rank builds its whole model once and splits it once a mode, the
// modes' passes one after the other (`ddpx plan` probes both modes at each size: half the whole
// models built). `first`, when given, is rank 0's whole model (consumed: its split parameters
// are freed), so a caller that has built the model already builds one fewer.
std::vector<TensorMemory> measure_tensor_parallel(
    const std::function<torch::nn::AnyModule()>& build, int ranks,
    const std::vector<bool>& sequence_modes, const ProbeOptions& options,
    const std::string& model_name, const models::ActivationCheckpointing& checkpointing,
    bool layers, torch::nn::AnyModule first = {});

// Probes at two sizes (`ddpx plan`: the two smallest T that split the model) carried to any T: the
// pieces (and the units' pieces, along their split dim) scale as 1/T, and a rank's activations as
// U + S/T (the unsplit layers' and the split
// ones'), fitted through the two; so do each probed layer's parameters and bytes. Probes of one
// size give that size only. The caller checks that T splits the model.
TensorMemory at_tensor_size(const TensorMemory& a, const TensorMemory& b, int ranks);

}  // namespace ddpx::parallel
