// The model zoo by name. Each entry builds a torchvision-faithful module (same structure,
// parameter names and initialisation) and carries the recommended training settings that
// `ddpx models` and `ddpx train --show_recommendations` print. New families add entries in
// their own file through register_family(); nothing else changes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <torch/nn/modules/container/any.h>

namespace ddpx::models {

struct ModelConfig {
  int64_t num_classes = 1000;
  int64_t image_size = 224;      // input height = width
  std::string stem = "imagenet";  // "imagenet" or "cifar" (3x3 stride-1 stem, no max-pool)
};

struct Recommendation {
  std::string optimizer = "sgd";  // sgd | adam | adamw
  double learning_rate = 0.1;
  int64_t batch_size = 128;
  double weight_decay = 0.0;
  std::string normalize = "imagenet";
  std::string note;               // e.g. "quick test"
};

struct ModelInfo {
  std::string name;
  std::string family;
  int64_t default_image_size = 224;
  Recommendation recommendation;
  std::function<torch::nn::AnyModule(const ModelConfig&)> build;
};

// All registered models, in a stable display order.
const std::vector<ModelInfo>& model_table();
// Throws ddpx::Error(kUsage) listing the known names when `name` is unknown.
const ModelInfo& find_model(const std::string& name);
torch::nn::AnyModule create_model(const std::string& name, const ModelConfig& config);
// Parameter count of a module (all parameters, as sum(p.numel() for p in model.parameters())).
int64_t count_parameters(const torch::nn::Module& module);

}  // namespace ddpx::models
