// Named training settings (`ddpx train --recipe NAME`): each is a list of `ddpx train` flags
// with the result it reached, where and how fast (docs/recipes.md has the runs). Flags given on
// the command line win over the recipe's. Torch-free data.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddpx::train {

struct Recipe {
  std::string name;
  std::string summary;
  // (flag, value) as typed after `ddpx train`; a flag without a value has "true", a flag turned
  // off "false" (typed as its --no_ form).
  std::vector<std::pair<std::string, std::string>> flags;
  int workers = 1;     // the `ddpx run N` it was measured with
  std::string result;  // measured: accuracy, time, machine; or "not yet run: why"
};

const std::vector<Recipe>& recipes();
// nullptr when there is no such recipe.
const Recipe* find_recipe(const std::string& name);
// "--flag value --flag2 ..." as a user would type it.
std::string recipe_command(const Recipe& recipe);

}  // namespace ddpx::train
