// Weights I/O compatible with torchvision state_dicts: read a torch.save'd {name: tensor} dict
// and copy tensors into a module's parameters and buffers by name. This is the base of
// `--pretrained`: torchvision's .pth files are exactly such dicts.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <map>
#include <string>

namespace ddpx::models {

// Copies every tensor of `tensors` into the parameter or buffer of the same name (the
// named_parameters()/named_buffers() keys, e.g. "layer1.0.bn1.running_mean"), converting dtype.
// All-or-nothing: throws ddpx::Error(kData) before copying anything when keys are missing or
// unexpected or shapes differ, listing the offending names.
void load_named_tensors(torch::nn::Module& module,
                        const std::map<std::string, torch::Tensor>& tensors);

// Reads a file written by Python's torch.save(dict_of_tensors, path) (a state_dict, plain dict
// or OrderedDict). Throws ddpx::Error(kIo) if unreadable, kData if it is not a dict of tensors.
std::map<std::string, torch::Tensor> read_state_dict(const std::string& path);

// The same on the file's bytes already in memory; `path` labels errors. The fuzz target's
// entry point: any input gives a dict or a ddpx::Error(kData).
std::map<std::string, torch::Tensor> read_state_dict_bytes(const std::string& bytes,
                                                           const std::string& path);

}  // namespace ddpx::models
