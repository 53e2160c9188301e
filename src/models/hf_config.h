// The config.json of a folder that transformers' save_pretrained wrote, read for a model family
// ddpx computes (models/hf_gpt2.h, models/hf_bert.h): its fields typed, with the config class's
// default where a field is absent or null (save_pretrained leaves defaults out), and the one-line
// kData errors naming the file that every family gives alike.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"

namespace ddpx::models {

// What a family's folder holds, for the errors: {"gpt2", "GPT-2", "GPT2LMHeadModel", "GPT"}.
struct HfFamily {
  const char* model_type;  // config.json's "model_type"
  const char* name;        // "GPT-2"
  const char* hf_class;    // transformers' class that save_pretrained wrote
  const char* ddpx_model;  // ddpx's model that computes it
};

class HfConfig {
 public:
  // Reads DIR/config.json: kData for a folder without one, a file that is not a JSON object, or
  // a model_type other than the family's.
  HfConfig(const std::string& dir, const HfFamily& family);

  const std::string& path() const { return path_; }

  // The field, or `fallback` when it is absent or null; a value of another type is kData.
  template <typename T>
  T get(const char* key, T fallback) const {
    if (!json_.contains(key) || json_.at(key).is_null()) return fallback;
    try {
      return json_.at(key).get<T>();
    } catch (const nlohmann::json::exception&) {
      fail(ErrorKind::kData, "{}: \"{}\" is {}, which is not a {}", path_, key,
           json_.at(key).dump(),
           std::is_same_v<T, bool>          ? "boolean"
           : std::is_same_v<T, std::string> ? "string"
                                            : "number");
    }
  }

  // kData naming the first size that is not positive.
  void expect_positive(std::initializer_list<std::pair<const char*, int64_t>> sizes) const;

  // kData: `key` is `value`, which ddpx's model does not compute (it computes `expected`).
  [[noreturn]] void refuse(const char* key, const std::string& value, const char* expected) const;

 private:
  std::string path_;
  HfFamily family_;
  nlohmann::json json_;
};

}  // namespace ddpx::models
