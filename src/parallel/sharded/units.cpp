// The units of a sharded plan (see units.h).
#include "parallel/sharded/units.h"

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>

#include <map>
#include <set>

#include "core/error.h"

namespace ddpx::parallel {
namespace {

bool is_container(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&m) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&m) != nullptr;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Every element (with parameters) of the outermost containers at or below `m`.
void automatic(const torch::nn::Module& m, const std::string& path, std::vector<std::string>& out) {
  if (is_container(m)) {
    for (const auto& element : m.named_children()) {
      if (!element.value()->parameters().empty()) out.push_back(join(path, element.key()));
    }
    return;
  }
  for (const auto& child : m.named_children()) {
    automatic(*child.value(), join(path, child.key()), out);
  }
}

std::string children_of(const torch::nn::Module& m) {
  std::string names;
  for (const auto& child : m.named_children()) names += (names.empty() ? "" : ", ") + child.key();
  return names;
}

}  // namespace

std::vector<UnitSpec> choose_units(torch::nn::Module& module,
                                   const std::vector<std::string>& names) {
  std::vector<std::string> paths = names;
  if (paths.empty()) automatic(module, "", paths);

  const auto modules = module.named_modules("", /*include_self=*/false);
  std::map<std::string, size_t> unit_of;  // parameter name -> unit
  std::vector<UnitSpec> units;
  for (const auto& path : paths) {
    const auto* m = modules.find(path);
    DDPX_CHECK(m != nullptr, ErrorKind::kUsage,
               "sharding unit '{}' is no submodule of the model; name submodules by their dotted "
               "path (the model's children: {})",
               path, children_of(module));
    UnitSpec unit;
    unit.name = path;
    for (const auto& p : (*m)->named_parameters(/*recurse=*/true)) {
      const std::string full = join(path, p.key());
      DDPX_CHECK(!unit_of.count(full), ErrorKind::kUsage,
                 "sharding units '{}' and '{}' both hold parameter {}; name units that do not "
                 "nest",
                 units[unit_of[full]].name, path, full);
      unit_of[full] = units.size();
      unit.param_names.push_back(full);
    }
    if (!unit.param_names.empty()) units.push_back(std::move(unit));
  }
  // Keep each unit's parameters in the model's order, and collect the root's.
  UnitSpec root;
  root.name = "root";
  root.root = true;
  for (auto& unit : units) unit.param_names.clear();
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    auto it = unit_of.find(p.key());
    (it == unit_of.end() ? root : units[it->second]).param_names.push_back(p.key());
  }
  if (!root.param_names.empty()) units.push_back(std::move(root));
  return units;
}

}  // namespace ddpx::parallel
