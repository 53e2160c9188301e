#include "serve/job_metrics.h"

#include <regex>
#include <sstream>

namespace ddpx::serve {

nlohmann::json epoch_metrics(const std::string& log) {
  static const std::regex epoch(
      R"(Epoch - (\d+)/(\d+): time - ([\d.]+)s \|\| (?:mlm_)?loss_train - ([\d.eE+-]+|nan|inf) \|\| )"
      R"(accuracy_train - ([\d.]+)(?: \|\| images_per_sec - ([\d.]+))?)");
  static const std::regex test(R"(^Accuracy on test dataset - ([\d.]+)$)");
  nlohmann::json out = nlohmann::json::array();
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_search(line, m, epoch)) {
      nlohmann::json e = {{"epoch", std::stoll(m[1])},
                          {"epochs", std::stoll(m[2])},
                          {"time_s", std::stod(m[3])},
                          {"accuracy_train", std::stod(m[5])}};
      e["loss_train"] = m[4] == "nan" || m[4] == "inf" ? nlohmann::json(nullptr)
                                                       : nlohmann::json(std::stod(m[4]));
      if (m[6].matched) e["images_per_sec"] = std::stod(m[6]);
      out.push_back(std::move(e));
    } else if (std::regex_match(line, m, test) && !out.empty()) {
      out.back()["accuracy_test"] = std::stod(m[1]);
    }
  }
  return out;
}

}  // namespace ddpx::serve
