#include "models/hf_config.h"

#include <filesystem>

#include "core/atomic_file.h"

namespace ddpx::models {

HfConfig::HfConfig(const std::string& dir, const HfFamily& family)
    : path_((std::filesystem::path(dir) / "config.json").string()), family_(family) {
  DDPX_CHECK(std::filesystem::is_regular_file(path_), ErrorKind::kData,
             "{} has no config.json: a Hugging Face {} is a folder as transformers' "
             "save_pretrained writes it (config.json and model.safetensors)",
             dir, family_.name);
  try {
    json_ = nlohmann::json::parse(read_file(path_));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kData, "{}: not JSON ({}); write the folder again with save_pretrained", path_,
         e.what());
  }
  DDPX_CHECK(json_.is_object(), ErrorKind::kData, "{}: a {}, expected a JSON object", path_,
             json_.type_name());
  const std::string type = get<std::string>("model_type", "");
  DDPX_CHECK(type == family_.model_type, ErrorKind::kData,
             "{}: model_type is \"{}\", expected \"{}\": ddpx reads {} folders here "
             "(transformers' {})",
             path_, type, family_.model_type, family_.name, family_.hf_class);
}

void HfConfig::expect_positive(std::initializer_list<std::pair<const char*, int64_t>> sizes) const {
  for (const auto& [key, value] : sizes)
    DDPX_CHECK(value > 0, ErrorKind::kData, "{}: {} is {}, expected a positive integer", path_, key,
               value);
}

void HfConfig::refuse(const char* key, const std::string& value, const char* expected) const {
  fail(ErrorKind::kData,
       "{}: {} is {}, but ddpx's {} computes {}; it takes {} as transformers' {} defines it by "
       "default",
       path_, key, value, family_.ddpx_model, expected, family_.name, family_.hf_class);
}

}  // namespace ddpx::models
