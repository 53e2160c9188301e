// Every shipped recipe still trains as its docs say: the first steps of each (`ddpx train
// --recipe NAME` with the flags docs/recipes.md gives beside it, one process, one thread, fixed
// seed) end with the train loss and test accuracy that docs/recipes.md states for them, within
// the tolerance stated there. A recipe whose flags, model, optimizer or data path change
// silently moves these figures. The figures are read from the docs, so docs and test agree.
#include "train/recipes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "e2e/token_fixture.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

struct FirstSteps {
  std::string flags;
  double loss = 0, accuracy = 0;
};

// Tolerances docs/recipes.md states: CPUs with other vector units round differently.
constexpr double kLossTolerance = 0.05;
constexpr double kAccuracyTolerance = 0.06;

// The rows of the "First steps" table: | `NAME` | `FLAGS` | LOSS | ACCURACY |
std::map<std::string, FirstSteps> documented_first_steps() {
  std::ifstream in(test::source_dir() + "/docs/recipes.md");
  std::map<std::string, FirstSteps> rows;
  static const std::regex row(R"(^\| `([a-z0-9-]+)` \| `([^`]+)` \| ([0-9.]+) \| ([0-9.]+) \|)");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, row))
      rows[m[1]] = FirstSteps{m[2], std::stod(m[3]), std::stod(m[4])};
  }
  return rows;
}

double number_after(const std::string& text, const std::string& label) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(label + R"( - ([0-9.]+))"))) return -1;
  return std::stod(m[1]);
}

TEST(RecipeFirstStepsTest, DocsStateTheirToleranceAndEveryRecipeHasARow) {
  std::ifstream in(test::source_dir() + "/docs/recipes.md");
  std::stringstream text;
  text << in.rdbuf();
  std::string docs = text.str();
  std::replace(docs.begin(), docs.end(), '\n', ' ');
  EXPECT_NE(docs.find("within 0.05 of the loss and 0.06 of the accuracy"), std::string::npos)
      << "docs/recipes.md states the tolerances this test uses";
  const auto rows = documented_first_steps();
  for (const auto& recipe : train::recipes())
    EXPECT_EQ(rows.count(recipe.name), 1u) << recipe.name << " has no first-steps row";
  EXPECT_EQ(rows.size(), train::recipes().size()) << "a row for a recipe that does not exist";
}

TEST(RecipeFirstStepsTest, EachRecipeReachesItsDocumentedFirstSteps) {
  // The language-model recipes read ./data/shakespeare-char: real text's characters here ...
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("data/shakespeare-char"));
  test::write_char_tokens(dir.file("data/shakespeare-char"));
  // ... and BERT's ./data/bert-wordpiece the same characters with a [MASK].
  std::filesystem::create_directories(dir.file("data/bert-wordpiece"));
  test::write_masked_lm_chars(dir.file("data/bert-wordpiece"));
  for (const auto& [name, expected] : documented_first_steps()) {
    auto r = run_command("cd " + test::shell_quote(dir.path()) + " && " + test::ddpx_binary() +
                             " train --recipe " + name + " " + expected.flags + " --no_progress",
                         300);
    ASSERT_EQ(r.exit_code, 0) << name << "\n" << r.output;
    EXPECT_NEAR(number_after(r.output, "loss_train"), expected.loss, kLossTolerance) << name << "\n"
                                                                                     << r.output;
    EXPECT_NEAR(number_after(r.output, "Accuracy on test dataset"), expected.accuracy,
                kAccuracyTolerance)
        << name << "\n"
        << r.output;
  }
}

}  // namespace
}  // namespace ddpx
