// The example commands of the README and docs/: each line of their code blocks with a `ddpx`
// word where a command starts (`ddpx ...`, an installed `~/.local/bin/ddpx ...`, behind
// environment assignments or a launcher: `taskset -c 0 ddpx ...`, `srun ... ddpx ...`,
// `mpirun ... ddpx ...`), and each `./run-ddp.sh ...` line (a `$ ` prompt dropped, `\`
// continuations joined, a trailing `# comment` and ` &` cut, `a; b` split), with the file and
// line it was printed on. Output shown in a block (`round 1: ddpx ...`, a doctor table) is not a
// command. The docs tests run them.
#pragma once

#include <string>
#include <vector>

namespace ddpx::docs_testing {

struct DocCommand {
  std::string file;  // relative to the source tree: "README.md", "docs/serve.md"
  int line = 0;      // where the command starts
  int block = 0;     // which code block of the file (0 is the first)
  // The ddpx command, an installed path written as `ddpx`: "ddpx run 2 -- train --model resnet18"
  std::string text;
  // What the line puts before the ddpx word: "", "taskset -c 0 ", "OMP_NUM_THREADS=2 ",
  // "srun -N 2 --ntasks-per-node 8 ", "~/.local/bin/" (an installed ddpx).
  std::string launcher;
  std::string printed;  // the whole command as printed: launcher and text
};

// Whether the command runs on this host as printed: no launcher, or environment assignments and
// taskset before it (srun, mpirun and torchrun start it elsewhere; an installed path is not the
// build's ddpx).
bool runs_on_this_host(const DocCommand& c);
// What to run in place of the printed launcher, before the build's ddpx (runs_on_this_host).
std::string launcher_here(const DocCommand& c);

// The command lines of `path`'s code blocks (relative to the source tree).
std::vector<DocCommand> commands_in(const std::string& path);
// Those of the README, then of docs/*.md in name order.
std::vector<DocCommand> all_doc_commands();

// Placeholders the docs write for what a user fills in, as a user might fill them in: JOB,
// <...>, an optional " [--flag]" left out, " ..." (more of the user's flags) left out.
std::string filled(std::string text);

// A training command that DocsCommandsTest.EveryTrainingCommand... runs as printed (a
// `ddpx train` or `ddpx run N -- train` that does not need several nodes, more of the user's
// flags, --help, --dry_run, a folder of photos, its shards (on disk or served: --data_url) or
// ImageNet: those are docs_fixtures_test.cpp's).
bool trains_here(const std::string& text);
// The same, for a command this host runs as printed (runs_on_this_host).
bool trains_here(const DocCommand& c);

// `line` without a trailing " # comment" (outside quotes) and surrounding blanks.
std::string without_comment(const std::string& line);

// Every line of `path`'s code block number `block`, as printed.
std::vector<std::string> block_lines(const std::string& path, int block);

}  // namespace ddpx::docs_testing
