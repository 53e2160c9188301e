// The registry core: lookup by name with an actionable error, config validation, counting.
#include "models/zoo/registry.h"

#include <fmt/ranges.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace ddpx::models {

const std::vector<ModelInfo>& model_table() {
  // Built once, on first use; thread-safe by the magic-static rule.
  static const std::vector<ModelInfo> table = [] {
    std::vector<ModelInfo> t = build_model_table();
    std::set<std::string> seen;
    for (const ModelInfo& info : t) {
      DDPX_CHECK(seen.insert(info.name).second, ErrorKind::kInternal,
                 "model '{}' is registered twice; each name must be unique", info.name);
    }
    return t;
  }();
  return table;
}

const ModelInfo& find_model(const std::string& name) {
  std::vector<std::string> names;
  for (const ModelInfo& info : model_table()) {
    if (info.name == name) return info;
    names.push_back(info.name);
  }
  fail(ErrorKind::kUsage, "unknown model '{}'; known models: {} (run `ddpx models` for details)",
       name, fmt::join(names, ", "));
}

int64_t fit_image_size(const ModelInfo& info, int64_t size) {
  size = std::max(size, info.min_image_size);
  const int64_t multiple = std::max<int64_t>(info.image_multiple, 1);
  return (size + multiple - 1) / multiple * multiple;
}

std::string image_size_rule(const ModelInfo& info) {
  if (info.image_multiple > 1)
    return fmt::format("{} takes multiples of its {}-px patch", info.name, info.image_multiple);
  if (info.min_image_size > 1)
    return fmt::format("{} takes at least {} px", info.name, info.min_image_size);
  return "";
}

void validate_config(const ModelConfig& config) {
  DDPX_CHECK(config.num_classes >= 1, ErrorKind::kUsage,
             "num_classes is {}; expected a positive number of classes", config.num_classes);
  DDPX_CHECK(config.image_size >= 1, ErrorKind::kUsage,
             "image_size is {}; expected a positive input height/width", config.image_size);
}

void check_bias(const ModelInfo& info, bool bias) {
  DDPX_CHECK(bias || info.family == "gpt", ErrorKind::kUsage,
             "--no_bias: {} keeps its own biases; only the GPT family (gpt-nano, gpt2, ...) "
             "trains without them: drop --no_bias",
             info.name);
}

torch::nn::AnyModule create_model(const std::string& name, const ModelConfig& config) {
  const ModelInfo& info = find_model(name);
  validate_config(config);
  check_bias(info, config.bias);
  DDPX_CHECK(config.stem == Stem::kImagenet || info.has_cifar_stem, ErrorKind::kUsage,
             "{} has no '{}' stem; --stem applies to the resnet family only", name,
             models::name(config.stem));
  return info.build(config);
}

int64_t count_parameters(const torch::nn::Module& module) {
  int64_t total = 0;
  for (const torch::Tensor& p : module.parameters(/*recurse=*/true)) total += p.numel();
  return total;
}

int64_t model_parameter_count(const ModelInfo& info, const ModelConfig& config) {
  validate_config(config);
  if (info.parameter_count) return info.parameter_count(config);
  torch::nn::AnyModule model = info.build(config);
  return count_parameters(*model.ptr());
}

}  // namespace ddpx::models
