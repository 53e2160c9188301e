// `--pretrained PATH`: start from weights saved in Python with
// torch.save(model.state_dict(), PATH) (torchvision's .pth files are exactly that). When only
// the classifier head differs in shape (another num_classes), the head keeps its fresh
// initialisation and everything else is loaded, with one line saying so. Any other mismatch
// is an error listing the keys. A folder is a Hugging Face GPT-2 (config.json and
// model.safetensors as transformers' save_pretrained writes them; models/hf_gpt2.h), for a GPT,
// or a BertForMaskedLM (models/hf_bert.h), for a BERT.
#pragma once

#include <torch/nn/module.h>

#include <string>

namespace ddpx::train {

// Returns a one-line summary of what was loaded (for the run's header).
std::string load_pretrained(const std::string& path, torch::nn::Module& model);

// Writes the model's parameters and buffers as a state_dict that Python's torch.load reads
// (the torch.save zip format, keys as in torchvision), atomically.
void export_state_dict(torch::nn::Module& model, const std::string& path);

}  // namespace ddpx::train
