// Which parameters a sharded plan gathers together (shard_unit.h): the units.
//
// Named: each submodule named (by its dotted path, e.g. "layer1", "encoder.layers.encoder_layer_3")
// is a unit of all the parameters below it; names must exist and not nest. Automatic (no
// names): every element of a Sequential or ModuleList container is a unit, the outermost such
// containers first (a ResNet's blocks layer1.0 ... layer4.2, a ViT's encoder layers and its
// head, a VGG's layers, an MLP's Linears), as torchtitan applies fully_shard to each block.
// Either way the parameters no unit holds form the root unit, named "root" (a ResNet's stem
// convolution and fc), which FSDP2 gathers once per step and keeps through backward.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace ddpx::parallel {

struct UnitSpec {
  std::string name;                      // the submodule's path, or "root"
  std::vector<std::string> param_names;  // in the model's parameter order
  bool root = false;
};

// The units of `module`, root last; the union of their parameters is every parameter of the
// module, each once. Throws ddpx::Error(kUsage) for a name that is no submodule or that nests
// in another.
std::vector<UnitSpec> choose_units(torch::nn::Module& module,
                                   const std::vector<std::string>& names);

}  // namespace ddpx::parallel
