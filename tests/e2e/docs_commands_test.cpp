// Every example command in the README and docs/ still parses as printed: each line of their
// code blocks with a `ddpx` command (support/doc_commands.h: also behind a launcher, `taskset -c 0
// ddpx ...`, `srun ... ddpx ...`, or an installed `~/.local/bin/ddpx`) is checked by the real
// binary under DDPX_PARSE_ONLY=lines (it parses and checks each line's flags, values and required
// arguments as DDPX_PARSE_ONLY=1 checks one command, without running it: one process, libtorch
// loaded once, for all of them), the `train ...` after a `ddpx run ... --` too, and each
// `./run-ddp.sh ...` line through the launcher's --dry_run. A flag renamed or removed in the code
// fails here, naming the file and the line. Every training command that this host runs as printed
// (`ddpx train ...`, `ddpx run N -- train ...`, behind environment assignments or taskset) then
// runs for real, shortened only by the environment (one epoch of one step and one test batch of
// 16, as train/env_limits.h names them in the run's header, on one intra-op thread a process:
// DDPX_THREADS=1), and must end with exit code 0
// having trained and tested: its `Epoch - 0/1` line and `Training took`, with an appended
// `--learning_rate` that its header must show (a flag given twice: the last value wins);
// `ddpx models` must list the zoo. A command printed on several pages runs once. Every other
// command runs on a fixture in docs_fixtures_test.cpp (or says there why it cannot run here), and
// docs/serve.md's quick start in tests/serve/quick_start_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "e2e/token_fixture.h"
#include "support/doc_commands.h"
#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;
using namespace docs_testing;

// `text` with one of its own single-word flag values given again, as a user appends an override
// to a printed command: the last `--flag value` before a ` -- ` (the launcher's or the verb's
// own), else the line's last, repeated at the end of that part (`ddpx plan --model vit_b_16
// --gpus 8` gets another ` --gpus 8`). "" when the part has no such pair.
std::string with_a_flag_repeated(const std::string& text) {
  const size_t dash = text.find(" -- ");
  const std::string head = text.substr(0, dash);
  const std::string tail = dash == std::string::npos ? "" : text.substr(dash);
  std::vector<std::string> words;
  for (size_t at = 0; at < head.size();) {
    const size_t space = head.find(' ', at);
    words.push_back(head.substr(at, space == std::string::npos ? space : space - at));
    at = space == std::string::npos ? head.size() : space + 1;
  }
  for (size_t i = words.size(); i-- > 1;) {
    const std::string& flag = words[i - 1];
    const std::string& value = words[i];
    const bool plain = flag.find_first_of("\"'=") == std::string::npos &&
                       value.find_first_of("\"'") == std::string::npos;
    if (flag.size() > 2 && flag.rfind("--", 0) == 0 && !value.empty() && value[0] != '-' && plain)
      return head + " " + flag + " " + value + tail;
  }
  return "";
}

TEST(DocsCommandsTest, EveryExampleCommandInTheReadmeAndDocsParsesAsPrinted) {
  auto commands = all_doc_commands();
  EXPECT_GE(commands.size(), 40u) << "the extraction found too few commands; has the docs' "
                                     "code-block form changed?";
  test::TempDir dir;
  const std::string ddpx = test::shell_quote(test::ddpx_binary());
  // The ddpx lines, each with the command it came from: all of them are checked by one
  // `DDPX_PARSE_ONLY=lines ddpx` (libtorch loads once), each line as the real binary checks
  // it under DDPX_PARSE_ONLY=1; the run-ddp.sh lines one process each.
  std::vector<std::pair<std::string, const DocCommand*>> lines;
  int repeats = 0, scripts = 0;
  std::set<std::string> parsed;
  // A line printed on two pages parses the same way twice: once is enough.
  auto add = [&](const std::string& line, const DocCommand& c) {
    if (parsed.insert(line).second) lines.emplace_back(line, &c);
  };
  for (const auto& c : commands) {
    std::string text = filled(c.text);
    SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + ": " + c.text);
    if (text.rfind("./run-ddp.sh ", 0) == 0) {
      auto r = run_command("cd " + test::shell_quote(dir.path()) + " && DDPX_PARSE_ONLY=1 " +
                               "DDPX_BIN=" + ddpx + " DDPX_RUN_ARGS=--dry_run " +
                               test::shell_quote(test::source_dir() + "/run-ddp.sh") +
                               text.substr(std::string("./run-ddp.sh").size()),
                           60);
      EXPECT_EQ(r.exit_code, 0) << c.file << ":" << c.line << ": `" << c.text
                                << "` does not parse as printed:\n"
                                << r.output;
      ++scripts;
      continue;
    }
    // Each with one of its flags given again, which must change nothing (the last value wins,
    // as in argparse, in every subcommand of both binaries), so the same check covers both.
    auto repeated = [&](const std::string& command) {
      std::string with = with_a_flag_repeated(command);
      repeats += !with.empty();
      return with.empty() ? command : with;
    };
    add(repeated(text), c);
    // The program of `ddpx run ... -- train ARGS`: its flags parse too.
    size_t dash = text.find(" -- train ");
    if (text.rfind("ddpx run ", 0) == 0 && dash != std::string::npos)
      add(repeated("ddpx " + text.substr(dash + 4)), c);
  }
  std::string input;
  for (const auto& [line, c] : lines) input += line + "\n";
  test::write_bytes(dir.file("lines"), input);
  auto r = run_command(
      "cd " + test::shell_quote(dir.path()) + " && DDPX_PARSE_ONLY=lines " + ddpx + " < lines",
      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Each line's verdict follows what its check printed (an error names the flag).
  static const std::regex verdict(R"(ddpx parse-only: exit (-?[0-9]+)\n)");
  size_t checked = 0, at = 0;
  for (std::smatch m;
       std::regex_search(r.output.cbegin() + static_cast<long>(at), r.output.cend(), m, verdict);
       ++checked) {
    const std::string printed = m.prefix();
    at += m.position(0) + m.length(0);
    if (checked >= lines.size()) break;
    const auto& [line, c] = lines[checked];
    EXPECT_EQ(m[1], "0") << c->file << ":" << c->line << ": `" << c->text
                         << "` does not parse as printed (or with a flag repeated):\n"
                         << line << "\n"
                         << printed;
  }
  EXPECT_EQ(checked, lines.size()) << "one verdict a line\n" << r.output;
  EXPECT_GE(checked + scripts, 40u);
  EXPECT_GE(repeats, 30);
}

// A language model's command reads token files: its --data_dir (the shakespeare-char recipe's
// when it names none) gets real text's, in the command's folder; a BERT's a vocab.json with
// [MASK] past the characters too (masked-LM needs it).
void write_tokens_for(const std::string& text, const std::string& folder) {
  if (text.find("--dataset tokens") == std::string::npos &&
      text.find("--recipe shakespeare-char") == std::string::npos)
    return;
  std::smatch m;
  std::string dir = "data/shakespeare-char";
  if (std::regex_search(text, m, std::regex(R"(--data_dir (\S+))"))) dir = m[1];
  std::filesystem::create_directories(folder + "/" + dir);
  test::write_char_tokens(folder + "/" + dir);
  if (text.find("--model bert-") != std::string::npos)
    test::write_bytes(folder + "/" + dir + "/vocab.json",
                      R"({"tokenizer": "wordpiece", "vocab_size": 256, "special_tokens": )"
                      R"({"[MASK]": 255}})");
}

// Every training command of the README and docs/ runs as printed (one step of each, on this CPU,
// in a folder of its own: Fashion-MNIST is the embedded default), and the zoo lists.
TEST(DocsCommandsTest, EveryTrainingCommandInTheReadmeAndDocsTrainsAsPrinted) {
  // One intra-op thread a process, as `ddpx run N` gives each of its workers on this 2-core
  // machine: a single `ddpx train` would otherwise take two, and under `ctest -j2` its step waits
  // at OpenMP barriers for the core the other test holds (ResNet-101's one step: 10.8 s with two
  // threads, 1.6 s with one, on the loaded machine). The work is the same; the header says
  // "threads 1".
  const std::string limits =
      "DDPX_EPOCHS=1 DDPX_MAX_STEPS=1 DDPX_MAX_TEST_BATCHES=1 DDPX_BATCH_SIZE=16 DDPX_THREADS=1 ";
  const std::string ddpx = test::shell_quote(test::ddpx_binary());
  // Appended to every training command, as a user appends an override: the last value wins,
  // whether the command held the flag (or its --lr alias, or a --recipe's) or not.
  const std::string override_lr = " --learning_rate 0.0123";
  test::TempDir dir;
  int ran = 0, held = 0;
  std::set<std::string> trained;
  for (const auto& c : all_doc_commands()) {
    const std::string& text = c.text;
    const bool trains = trains_here(c);
    if (!trains && c.printed != "ddpx models") continue;
    SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + ": " + text);
    const bool header = trains && text.find("--show_recommendations") == std::string::npos;
    held += header && (text.find(" --learning_rate ") != std::string::npos ||
                       text.find(" --lr ") != std::string::npos);
    // The same command printed on two pages (the README's and a guide's) trains the same way
    // twice, in a fresh folder each time: once is enough.
    const std::string command =
        launcher_here(c) + ddpx + " " + filled(text).substr(5) + (header ? override_lr : "");
    if (!trained.insert(command).second) {
      std::printf("ran above: %s:%d `%s`\n", c.file.c_str(), c.line, text.c_str());
      continue;
    }
    const std::string folder = dir.file(std::to_string(ran));
    std::filesystem::create_directories(folder);
    write_tokens_for(text, folder);
    const auto start = std::chrono::steady_clock::now();
    auto r = run_command("cd " + test::shell_quote(folder) + " && " + limits + command, 300);
    // Where this test's seconds go, for whoever makes it cheaper.
    std::printf("%.1f s: %s:%d `%s`\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
                c.file.c_str(), c.line, text.c_str());
    EXPECT_EQ(r.exit_code, 0) << c.file << ":" << c.line << ": `" << text
                              << "` does not run as printed (with" << override_lr << "):\n"
                              << r.output;
    if (header) {
      EXPECT_NE(r.output.find("limits from the environment: DDPX_EPOCHS=1"), std::string::npos)
          << "a shortened run says so\n"
          << r.output;
      // "optimizer adamw lr 0.0123 ...", or with --lr_scale "(--learning_rate 0.0123 x ...".
      EXPECT_TRUE(r.output.find(" lr 0.0123 ") != std::string::npos ||
                  r.output.find("(--learning_rate 0.0123 x ") != std::string::npos)
          << "the appended" << override_lr << " did not win\n"
          << r.output;
      // It trained (a refusal or a crash exits 0 nowhere, but a run that only parses would) and
      // reached the end. (Mutation run: the trainer's end line reworded fails every command.)
      EXPECT_NE(r.output.find("Epoch - 0/1"), std::string::npos) << "no epoch line\n" << r.output;
      EXPECT_NE(r.output.find("Training took"), std::string::npos) << "no end line\n" << r.output;
    } else if (!trains) {
      EXPECT_NE(r.output.find("resnet18"), std::string::npos) << "the zoo lists\n" << r.output;
    }
    ++ran;
  }
  EXPECT_GE(ran, 25) << "the extraction found too few training commands";
  // The README's quick-start command holds --learning_rate 0.05; the --recipe ones hold it
  // through their recipe; the rest take it over the default.
  EXPECT_GE(held, 1) << "no training command held --learning_rate to override";
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

// DDPX_PARSE_ONLY=lines gives each line of stdin the verdict that DDPX_PARSE_ONLY=1 gives it
// alone, in order, whichever binary's command it is, a refused line stopping nothing.
TEST(DocsCommandsTest, ParseOnlyLinesGiveEachLineItsOwnVerdict) {
  test::TempDir dir;
  test::write_bytes(dir.file("lines"),
                    "ddpx run 2 --log_dir logs -- train --num_epochs 1\n"
                    "ddpx train --no_such_flag 1\n"
                    "ddpx train --amp fp8\n"
                    "ddpx train --model resnet18 --lr 0.1 --lr 0.2 --label_smoothing 0.1\n"
                    "ddpx jobs --no_such_flag\n"
                    "ddpx models 'resnet18' --num_classes \"10\"\n"
                    "ddpx train --model 'a b\n");
  auto r = run_command("cd " + test::shell_quote(dir.path()) + " && DDPX_PARSE_ONLY=lines " +
                           test::ddpx_command("< lines"),
                       60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("logs"))) << "parse only: nothing may start";
  std::vector<std::string> verdicts, printed;
  std::smatch m;
  for (std::string rest = r.output;
       std::regex_search(rest, m, std::regex(R"(ddpx parse-only: exit (-?[0-9]+)\n)"));
       rest = m.suffix()) {
    verdicts.push_back(m[1]);
    printed.push_back(m.prefix());
  }
  ASSERT_EQ(verdicts, (std::vector<std::string>{"0", "2", "2", "0", "2", "0", "2"})) << r.output;
  EXPECT_NE(printed[1].find("--no_such_flag"), std::string::npos) << r.output;
  EXPECT_NE(printed[2].find("fp8"), std::string::npos) << r.output;
  EXPECT_NE(printed[4].find("--no_such_flag"), std::string::npos) << r.output;
  EXPECT_NE(printed[6].find("cannot split"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddpx
