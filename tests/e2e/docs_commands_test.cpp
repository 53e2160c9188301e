// Every example command in the README and docs/ still parses as printed: each `ddpx ...` and
// `./run-ddp.sh ...` line of their code blocks is run with DDPX_PARSE_ONLY=1 (the real binary
// parses and checks flags, values and required arguments, then exits 0 without running), the
// `train ...` after a `ddpx run ... --` too, and run-ddp.sh through the launcher's --dry_run. A
// flag renamed or removed in the code fails here, naming the file and the line. Every training
// command (`ddpx train ...`, `ddpx run N -- train ...`) then runs for real as printed, shortened
// only by the environment (one epoch of one step and one test batch of 16, as
// train/env_limits.h names them in the run's header), and must end with exit code 0; so must
// `ddpx models`. Commands for another machine (several nodes, a GPU, a server, a download) parse
// only.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

struct DocCommand {
  std::string file;
  int line = 0;
  std::string text;
};

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

// " # comment" at the end of a command line, outside quotes.
std::string without_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && i > 0 && line[i - 1] == ' ') {
      return trim(line.substr(0, i));
    }
  }
  return trim(line);
}

// Output shown in a block ("ddpx run: job ...", "ddpx 88.3 img/s | ...", "ddpx data wait
// (--loop phases) ...") is not a command: a command's words before its first flag are names,
// numbers and paths, none ending in ':' or holding '(' or '|'.
bool is_command(const std::string& text) {
  std::stringstream words(text);
  std::string word;
  words >> word;  // ddpx or ./run-ddp.sh
  if (!(words >> word) || !std::regex_match(word, std::regex("[a-z0-9][a-z0-9_]*"))) return false;
  while (words >> word && word.rfind("--", 0) != 0) {
    if (word.back() == ':' || word.find_first_of("(|") != std::string::npos) return false;
  }
  return true;
}

// The command lines of the code blocks of `path` (relative to the source tree).
std::vector<DocCommand> commands_in(const std::string& path) {
  std::ifstream in(test::source_dir() + "/" + path);
  std::vector<DocCommand> out;
  bool in_block = false;
  int number = 0;
  std::string pending;
  int pending_line = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (trim(line).rfind("```", 0) == 0) {
      in_block = !in_block;
      continue;
    }
    if (!in_block) continue;
    std::string text = trim(line);
    if (!pending.empty()) {
      text = pending + " " + text;
    } else {
      if (text.rfind("$ ", 0) == 0) text = trim(text.substr(2));
      pending_line = number;
    }
    if (!text.empty() && text.back() == '\\') {  // continued on the next line
      pending = trim(text.substr(0, text.size() - 1));
      continue;
    }
    pending.clear();
    text = without_comment(text);
    // `ddpx jobs; ddpx logs JOB -f` is two commands.
    std::stringstream parts(text);
    for (std::string part; std::getline(parts, part, ';');) {
      part = trim(part);
      if (part.rfind("ddpx ", 0) != 0 && part.rfind("./run-ddp.sh ", 0) != 0) continue;
      if (!is_command(part)) continue;
      out.push_back(DocCommand{path, pending_line, part});
    }
  }
  return out;
}

std::vector<DocCommand> all_doc_commands() {
  std::vector<std::string> files = {"README.md"};
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() + "/docs")) {
    if (entry.path().extension() == ".md")
      files.push_back("docs/" + entry.path().filename().string());
  }
  std::sort(files.begin() + 1, files.end());
  std::vector<DocCommand> all;
  for (const auto& f : files) {
    auto found = commands_in(f);
    all.insert(all.end(), found.begin(), found.end());
  }
  return all;
}

// Placeholders the docs write for what a user fills in, as a user might fill them in.
std::string filled(std::string text) {
  static const std::vector<std::pair<std::regex, std::string>> fills = {
      {std::regex(R"(\bJOB\b)"), "job1"},
      {std::regex(R"(<[^>]+>)"), "x"},
      {std::regex(R"( \[[^\]]*\])"), ""},  // [--stop]: an optional part, left out
      {std::regex(R"( \.\.\.)"), ""},      // "..." : more flags of the user's
  };
  for (const auto& [pattern, value] : fills) text = std::regex_replace(text, pattern, value);
  return text;
}

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
    const bool trains =
        text.rfind("ddpx train ", 0) == 0 ||
        (text.rfind("ddpx run ", 0) == 0 && text.find(" -- train") != std::string::npos);
    const bool elsewhere =
        text.find("...") != std::string::npos || text.find("--help") != std::string::npos ||
        text.find("--nnodes") != std::string::npos || text.find("--dry_run") != std::string::npos;
    if (!(trains && !elsewhere) && text != "ddpx models") continue;
    SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + ": " + text);
    const std::string folder = dir.file(std::to_string(ran));
    std::filesystem::create_directories(folder);
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
