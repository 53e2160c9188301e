// GPT-2 weights both ways with Hugging Face transformers: a folder as save_pretrained writes it
// (config.json + model.safetensors) to and from ddpx's GPT, whose modules carry the names of
// transformers' GPT2LMHeadModel (transformer.wte, transformer.h.{i}.attn.c_attn, ..., lm_head
// tied to wte). Two differences are bridged here: GPT-2's Conv1D layers keep their weights as
// (in, out) where ddpx's nn.Linear keeps (out, in), so c_attn, c_proj and c_fc are transposed;
// and transformers leaves the tied lm_head.weight out of the file.
//
// Reading accepts what the hub's GPT-2 folders hold too: names without the "transformer." prefix
// (saved from GPT2Model), the causal-mask buffers of older versions (attn.bias,
// attn.masked_bias; dropped), an index of shards (model.safetensors.index.json) and, without
// safetensors, pytorch_model.bin.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>

#include "models/gpt.h"

namespace ddpx::models {

// The GPT2Config fields a ddpx GPT must agree with to hold the weights (the rest of config.json
// is checked to describe GPT-2's arithmetic: gelu_new, epsilon 1e-5, tied embeddings, ...).
struct HfGpt2Shape {
  int64_t vocab_size = 0;
  int64_t n_positions = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
};

// config.json as transformers' GPT2Config writes it for `shape` (architectures GPT2LMHeadModel,
// gelu_new, layer_norm_epsilon 1e-5, tied embeddings, `dropout` for the three dropouts).
std::string hf_gpt2_config_json(const HfGpt2Shape& shape, double dropout);

// Reads DIR/config.json; throws kData naming the file when it is not GPT-2's (model_type,
// activation, epsilon, untied embeddings, cross-attention, ...), kIo when it cannot be read.
HfGpt2Shape read_hf_gpt2_config(const std::string& dir);

// Throws kUsage when the folder's config and the model differ: one line naming the first field
// that differs with both values and the model that would take the weights.
void check_hf_gpt2_shape(const HfGpt2Shape& file, const HfGpt2Shape& model,
                         const std::string& model_name, const std::string& dir);

// ddpx's named parameters (any device or dtype) as the tensors of GPT2LMHeadModel's
// model.safetensors: Conv1D weights transposed, lm_head.weight left out (tied), CPU, contiguous.
std::map<std::string, torch::Tensor> to_hf_gpt2_tensors(const torch::nn::Module& model);

// The folder's tensors under ddpx's names: prefix added where missing, mask buffers dropped,
// Conv1D weights transposed, lm_head.weight checked equal to wte's and dropped (ddpx's head is
// transformer.wte.weight itself).
// `source` names the folder in errors.
std::map<std::string, torch::Tensor> from_hf_gpt2_tensors(std::map<std::string, torch::Tensor> hf,
                                                          const std::string& source);

// The weights of a save_pretrained folder (model.safetensors, its shards, or pytorch_model.bin),
// as transformers named them.
std::map<std::string, torch::Tensor> read_hf_weights(const std::string& dir);

// The shape of ddpx's GPT in GPT2Config's terms.
HfGpt2Shape hf_gpt2_shape(const GptOptions& options);

// Writes DIR/config.json and DIR/model.safetensors (with {"format": "pt"}, which transformers
// asks of the file), each atomically; creates DIR. Throws kUsage for a GPT without biases
// (GPT2LMHeadModel has them).
void export_hf_gpt2(const GptImpl& model, const std::string& dir);

// Loads a save_pretrained folder into `model` after checking its config against the model's
// (`model_name` names it in errors); all-or-nothing (models/weights.h). Returns a one-line
// summary for the run's header.
std::string load_hf_gpt2(const std::string& dir, GptImpl& model, const std::string& model_name);

}  // namespace ddpx::models
