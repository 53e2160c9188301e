// The helpers that keep a zoo entry to one line (zoo/models.cpp): entry() fills a ModelInfo,
// factory<Module>(options, count) makes both of its closures from one set of options, so a
// model's structure is written once and its builder and parameter formula cannot drift apart.
#pragma once

#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>

#include "models/zoo/registry.h"

namespace ddpx::models {

// What builds a model and, optionally, counts its parameters without building it.
struct Factory {
  std::function<torch::nn::AnyModule(const ModelConfig&)> build;
  std::function<int64_t(const ModelConfig&)> parameter_count;  // empty: count by building
  bool has_cifar_stem = false;                                 // the options take ModelConfig::stem
  int64_t min_image_size = 1;                                  // ModelInfo's input size rule
  int64_t image_multiple = 1;
  int64_t blocks = 0;  // a language model's (ModelInfo's)
  int64_t vocab_size = 0;
};

// Options types with a `stem` field (the resnet family) take ModelConfig::stem.
template <typename Options, typename = void>
struct HasStem : std::false_type {};
template <typename Options>
struct HasStem<Options, std::void_t<decltype(std::declval<Options&>().stem)>> : std::true_type {};

// `base` with the config's class count (and stem, where the family has one). The input size
// does not change these structures: each family pools or resizes to its fixed grid.
template <typename Options>
Options configured(Options base, const ModelConfig& config) {
  base.num_classes = config.num_classes;
  if constexpr (HasStem<Options>::value) base.stem = config.stem;
  return base;
}

// Builds Module(configured(base)); counts with `count` (a formula over the same options) when
// given, since building the big models takes seconds.
template <typename Module, typename Options>
Factory factory(Options base, int64_t (*count)(const Options&) = nullptr) {
  Factory f;
  f.has_cifar_stem = HasStem<Options>::value;
  f.build = [base](const ModelConfig& config) {
    return torch::nn::AnyModule(Module(configured(base, config)));
  };
  if (count) {
    f.parameter_count = [base, count](const ModelConfig& config) {
      return count(configured(base, config));
    };
  }
  return f;
}

// One zoo entry. `recommendation` is {optimizer, lr, batch size, weight decay, normalize, note}.
inline ModelInfo entry(std::string name, std::string family, int64_t default_image_size,
                       Recommendation recommendation, Factory factory) {
  ModelInfo info;
  info.name = std::move(name);
  info.family = std::move(family);
  info.default_image_size = default_image_size;
  info.has_cifar_stem = factory.has_cifar_stem;
  info.min_image_size = factory.min_image_size;
  info.image_multiple = factory.image_multiple;
  info.blocks = factory.blocks;
  info.vocab_size = factory.vocab_size;
  info.recommendation = std::move(recommendation);
  info.build = std::move(factory.build);
  info.parameter_count = std::move(factory.parameter_count);
  return info;
}

}  // namespace ddpx::models
