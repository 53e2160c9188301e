// The model zoo by name. Each entry builds a torchvision-faithful module (same structure,
// parameter names and initialisation) and carries the recommended training settings that
// `ddpx models` and `ddpx train --show_recommendations` print. The entries themselves are one
// table in zoo/models.cpp (one line per name, through zoo/entry.h's helpers); this file is the
// lookup, validation and counting over that table.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/stem.h"

namespace ddpx::models {

struct ModelConfig {
  int64_t num_classes = 1000;
  int64_t image_size = 224;     // input height = width
  Stem stem = Stem::kImagenet;  // kCifar: 3x3 stride-1 stem, no max-pool (resnet family)
  // A language model built with this many blocks instead of its own (0: its own): `ddpx plan`
  // probes a shallow copy of a deep model and carries the figures to its depth.
  int64_t layers = 0;
  // A GPT's biases in its Linears and LayerNorms, as GPT-2's (false: none, nanoGPT's
  // bias=False). The other families keep their own.
  bool bias = true;
};

struct Recommendation {
  std::string optimizer = "sgd";  // sgd | adam | adamw
  double learning_rate = 0.1;
  int64_t batch_size = 128;
  double weight_decay = 0.0;
  std::string normalize = "imagenet";
  std::string note;  // e.g. "quick test"
};

struct ModelInfo {
  std::string name;
  std::string family;
  int64_t default_image_size = 224;
  // The input sizes the model takes: at least min_image_size, a multiple of image_multiple (a
  // ViT's patch). fit_image_size() finds the nearest one for a dataset's images.
  int64_t min_image_size = 1;
  int64_t image_multiple = 1;
  bool has_cifar_stem = false;  // accepts ModelConfig::stem == Stem::kCifar (the resnet family)
  Recommendation recommendation;
  std::function<torch::nn::AnyModule(const ModelConfig&)> build;
  // Optional: the exact parameter count without building (big models take seconds to
  // initialise). When empty, model_parameter_count() builds the model and counts.
  std::function<int64_t(const ModelConfig&)> parameter_count;
  // A language model's (GPT, BERT): its transformer blocks and the vocabulary of the tokenizer
  // it is trained with (GPT-2's 50257, bert-base-uncased's 30522). 0 for the image models.
  int64_t blocks = 0;
  int64_t vocab_size = 0;
};

inline bool is_language_model(const ModelInfo& info) { return info.blocks > 0; }

// All registered models, in a stable display order.
const std::vector<ModelInfo>& model_table();
// The entries in display order, unchecked (zoo/models.cpp); model_table() checks and keeps them.
std::vector<ModelInfo> build_model_table();
// Throws ddpx::Error(kUsage) listing the known names when `name` is unknown.
const ModelInfo& find_model(const std::string& name);
torch::nn::AnyModule create_model(const std::string& name, const ModelConfig& config);
// Parameter count of a module (all parameters, as sum(p.numel() for p in model.parameters())).
int64_t count_parameters(const torch::nn::Module& module);
// Parameter count of `info` built with `config`, from the formula when the family has one.
int64_t model_parameter_count(const ModelInfo& info, const ModelConfig& config);
// The smallest input size >= `size` that `info` takes (`size` itself when it takes it).
int64_t fit_image_size(const ModelInfo& info, int64_t size);
// What `info` asks of its input size, e.g. "vit_b_16 takes multiples of its 16-px patch" or
// "vgg11 takes at least 32 px"; "" when it takes any size.
std::string image_size_rule(const ModelInfo& info);
// Throws ddpx::Error(kUsage) when a field is out of range (num_classes < 1, image_size < 1).
void validate_config(const ModelConfig& config);
// Throws ddpx::Error(kUsage) naming --no_bias when `bias` is false for a model outside the GPT
// family (the others keep their own biases); create_model() checks it too.
void check_bias(const ModelInfo& info, bool bias);

}  // namespace ddpx::models
