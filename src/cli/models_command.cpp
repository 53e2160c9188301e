// `ddpx models`: the model zoo as a table, one line per name, with the true parameter count
// (from each family's formula, checked against torchvision by the tests; no model is built, so
// the listing takes milliseconds) and the recommended training settings.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/table.h"
#include "core/error.h"
#include "core/log.h"
#include "models/zoo/registry.h"

namespace ddpx::cli {
namespace {

// 11689512 -> "11,689,512": counts this large are unreadable without grouping.
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

void add_models_command(CLI::App& app, int& exit_code) {
  struct Args {
    int64_t num_classes = 1000;
    std::string stem = "imagenet";
    std::string name;
  };
  auto args = std::make_shared<Args>();
  auto* models = app.add_subcommand(
      "models", "List the model zoo: parameter count, input size and recommended settings");
  models->add_option("name", args->name, "Show only this model (default: all)");
  models->add_option("--num_classes", args->num_classes, "Classes the counts assume")
      ->capture_default_str();
  models->add_option("--stem", args->stem, "ResNet stem the counts assume: imagenet or cifar")
      ->capture_default_str();
  models->callback([args, &exit_code] {
    models::ModelConfig config;
    config.num_classes = args->num_classes;
    config.stem = models::stem_from_name(args->stem, "--stem");
    models::validate_config(config);
    std::vector<const models::ModelInfo*> rows;
    if (args->name.empty()) {
      for (const auto& info : models::model_table()) rows.push_back(&info);
    } else {
      rows.push_back(&models::find_model(args->name));  // unknown -> usage error with the list
    }
    log::out("# {} model{}; parameters at {} classes, {} stem", rows.size(),
             rows.size() == 1 ? "" : "s", config.num_classes, models::name(config.stem));
    std::vector<std::vector<std::string>> table = {{"name", "family", "params", "size", "optimizer",
                                                    "lr", "batch", "wd", "normalize", "note"}};
    for (const models::ModelInfo* info : rows) {
      const models::Recommendation& r = info->recommendation;
      config.image_size = info->default_image_size;  // counts that depend on it (mlp)
      table.push_back({info->name, info->family,
                       grouped(models::model_parameter_count(*info, config)),
                       std::to_string(info->default_image_size), r.optimizer,
                       fmt::format("{:g}", r.learning_rate), std::to_string(r.batch_size),
                       fmt::format("{:g}", r.weight_decay), r.normalize, r.note});
    }
    std::vector<std::string> lines =
        align_columns(table, {false, false, true, true, true, true, true, true, false, false});
    for (size_t i = 0; i < lines.size(); ++i) log::out("{}{}", i == 0 ? "# " : "  ", lines[i]);
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
