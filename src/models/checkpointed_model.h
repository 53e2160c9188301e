// A zoo model whose blocks recompute their forward in backward (--activation_checkpointing with
// the data-parallel and sharded plans; a pipeline checkpoints inside its stages instead). The
// wrapper holds the model's own parameters, buffers and children under their own names and in
// their order, so its state_dict, parameter order and units are the model's: checkpoints,
// export, EMA and --shard see no difference. Its forward runs the model's layer sequence
// (layer_sequence.h), each chosen layer through checkpoint().
#pragma once

#include <torch/nn/modules/container/any.h>

#include <string>

#include "models/activation_checkpoint.h"

namespace ddpx::models {

// Throws ddpx::Error(kUsage) naming `model_name` when the model is not a sequence of layers.
// `policy` none returns `model` as it is.
torch::nn::AnyModule with_activation_checkpointing(const torch::nn::AnyModule& model,
                                                   const ActivationCheckpointing& policy,
                                                   const std::string& model_name);

}  // namespace ddpx::models
