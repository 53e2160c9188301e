// Every example command in the README and docs/ still parses as printed: each `ddpx ...` and
// `./run-ddp.sh ...` line of their code blocks is run with DDPX_PARSE_ONLY=1 (the real binary
// parses and checks flags, values and required arguments, then exits 0 without running), the
// `train ...` after a `ddpx run ... --` too, and run-ddp.sh through the launcher's --dry_run. A
// flag renamed or removed in the code fails here, naming the file and the line. Every training
// command (`ddpx train ...`, `ddpx run N -- train ...`) then runs for real as printed, shortened
// only by the environment (one epoch of one step and one test batch of 16, as
// train/env_limits.h names them in the run's header), and must end with exit code 0; so must
// `ddpx models`. Every other command runs on a fixture in docs_fixtures_test.cpp (or says there
// why it cannot run here), and docs/serve.md's quick start in tests/serve/quick_start_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "e2e/token_fixture.h"
#include "support/doc_commands.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;
using namespace docs_testing;

TEST(DocsCommandsTest, EveryExampleCommandInTheReadmeAndDocsParsesAsPrinted) {
  auto commands = all_doc_commands();
  EXPECT_GE(commands.size(), 40u) << "the extraction found too few commands; has the docs' "
                                     "code-block form changed?";
  test::TempDir dir;
  const std::string env = "cd " + test::shell_quote(dir.path()) + " && DDPX_PARSE_ONLY=1 ";
  const std::string ddpx = test::shell_quote(test::ddpx_binary());
  int checked = 0;
  for (const auto& c : commands) {
    std::string text = filled(c.text);
    SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + ": " + c.text);
    std::vector<std::string> lines;
    if (text.rfind("./run-ddp.sh ", 0) == 0) {
      lines.push_back("DDPX_BIN=" + ddpx + " DDPX_RUN_ARGS=--dry_run " +
                      test::shell_quote(test::source_dir() + "/run-ddp.sh") +
                      text.substr(std::string("./run-ddp.sh").size()));
    } else {
      std::string args = text.substr(5);
      lines.push_back(ddpx + " " + args);
      // The program of `ddpx run ... -- train ARGS`: its flags parse too.
      size_t dash = args.find(" -- train ");
      if (args.rfind("run ", 0) == 0 && dash != std::string::npos)
        lines.push_back(ddpx + " " + args.substr(dash + 4));
    }
    for (const auto& line : lines) {
      auto r = run_command(env + line, 60);
      EXPECT_EQ(r.exit_code, 0) << c.file << ":" << c.line << ": `" << c.text
                                << "` does not parse as printed:\n"
                                << r.output;
      ++checked;
    }
  }
  EXPECT_GE(checked, 40);
}

// A language model's command reads token files: its --data_dir (the shakespeare-char recipe's
// when it names none) gets real text's, in the command's folder.
void write_tokens_for(const std::string& text, const std::string& folder) {
  if (text.find("--dataset tokens") == std::string::npos &&
      text.find("--recipe shakespeare-char") == std::string::npos)
    return;
  std::smatch m;
  std::string dir = "data/shakespeare-char";
  if (std::regex_search(text, m, std::regex(R"(--data_dir (\S+))"))) dir = m[1];
  std::filesystem::create_directories(folder + "/" + dir);
  test::write_char_tokens(folder + "/" + dir);
}

// Every training command of the README and docs/ runs as printed (one step of each, on this CPU,
// in a folder of its own: Fashion-MNIST is the embedded default), and the zoo lists.
TEST(DocsCommandsTest, EveryTrainingCommandInTheReadmeAndDocsTrainsAsPrinted) {
  const std::string limits =
      "DDPX_EPOCHS=1 DDPX_MAX_STEPS=1 DDPX_MAX_TEST_BATCHES=1 DDPX_BATCH_SIZE=16 ";
  const std::string ddpx = test::shell_quote(test::ddpx_binary());
  test::TempDir dir;
  int ran = 0;
  for (const auto& c : all_doc_commands()) {
    const std::string& text = c.text;
    const bool trains = trains_here(text);
    if (!trains && text != "ddpx models") continue;
    SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + ": " + text);
    const std::string folder = dir.file(std::to_string(ran));
    std::filesystem::create_directories(folder);
    write_tokens_for(text, folder);
    auto r = run_command(
        "cd " + test::shell_quote(folder) + " && " + limits + ddpx + " " + filled(text).substr(5),
        300);
    EXPECT_EQ(r.exit_code, 0) << c.file << ":" << c.line << ": `" << text
                              << "` does not run as printed:\n"
                              << r.output;
    if (trains && text.find("--show_recommendations") == std::string::npos) {
      EXPECT_NE(r.output.find("limits from the environment: DDPX_EPOCHS=1"), std::string::npos)
          << "a shortened run says so\n"
          << r.output;
    }
    ++ran;
  }
  EXPECT_GE(ran, 25) << "the extraction found too few training commands";
}

// The parse-only mode runs nothing but still refuses what the real run would refuse at parse.
TEST(DocsCommandsTest, ParseOnlyRunsNothingAndStillRefusesUnknownFlags) {
  test::TempDir dir;
  const std::string env = "cd " + test::shell_quote(dir.path()) + " && DDPX_PARSE_ONLY=1 ";
  auto ok =
      run_command(env + test::ddpx_command("run 2 --log_dir logs -- train --num_epochs 1"), 60);
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("logs"))) << "parse only: nothing may start";
  auto bad = run_command(env + test::ddpx_command("train --no_such_flag 1"), 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--no_such_flag"), std::string::npos) << bad.output;
  auto value = run_command(env + test::ddpx_command("train --amp fp8"), 60);
  EXPECT_EQ(value.exit_code, 2) << value.output;
}

}  // namespace
}  // namespace ddpx
