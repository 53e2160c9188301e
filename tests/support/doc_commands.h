// The example commands of the README and docs/: each `ddpx ...` and `./run-ddp.sh ...` line of
// their code blocks (a `$ ` prompt dropped, `\` continuations joined, a trailing `# comment`
// cut, `a; b` split), with the file and line it was printed on. The docs tests run them.
#pragma once

#include <string>
#include <vector>

namespace ddpx::docs_testing {

struct DocCommand {
  std::string file;  // relative to the source tree: "README.md", "docs/serve.md"
  int line = 0;      // where the command starts
  int block = 0;     // which code block of the file (0 is the first)
  std::string text;  // "ddpx run 2 -- train --model resnet18"
};

// The command lines of `path`'s code blocks (relative to the source tree).
std::vector<DocCommand> commands_in(const std::string& path);
// Those of the README, then of docs/*.md in name order.
std::vector<DocCommand> all_doc_commands();

// Placeholders the docs write for what a user fills in, as a user might fill them in: JOB,
// <...>, an optional " [--flag]" left out, " ..." (more of the user's flags) left out.
std::string filled(std::string text);

// A training command that DocsCommandsTest.EveryTrainingCommand... runs as printed (a
// `ddpx train` or `ddpx run N -- train` that does not need several nodes, more of the user's
// flags, --help, --dry_run or a folder of photos: those run in docs_fixtures_test.cpp).
bool trains_here(const std::string& text);

// `line` without a trailing " # comment" (outside quotes) and surrounding blanks.
std::string without_comment(const std::string& line);

// Every line of `path`'s code block number `block`, as printed.
std::vector<std::string> block_lines(const std::string& path, int block);

}  // namespace ddpx::docs_testing
