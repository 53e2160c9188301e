#include "support/doc_commands.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "support/support.h"

namespace ddpx::docs_testing {

namespace {

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

}  // namespace

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

namespace {

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

bool is_fence(const std::string& line) { return trim(line).rfind("```", 0) == 0; }

// A `ddpx` word where a command starts: at the start (a path before it allowed), or behind
// environment assignments and a launcher of its own (its flags and values up to the word).
// Groups: 1 the launcher, 2 an installed ddpx's folder, 3 the ddpx command's arguments.
const std::regex& ddpx_line() {
  static const std::regex pattern(
      R"(^((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:(?:srun|mpirun|taskset|torchrun|env|exec|nohup))"
      R"(\s+(?:\S+\s+)*?)?)(\S*/)?ddpx\s+(.*)$)");
  return pattern;
}

}  // namespace

std::vector<DocCommand> commands_in(const std::string& path) {
  std::ifstream in(test::source_dir() + "/" + path);
  std::vector<DocCommand> out;
  bool in_block = false;
  int block = -1;
  int number = 0;
  std::string pending;
  int pending_line = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (is_fence(line)) {
      in_block = !in_block;
      if (in_block) ++block;
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
      if (part.size() > 2 && part.compare(part.size() - 2, 2, " &") == 0)
        part = trim(part.substr(0, part.size() - 2));  // started in the background
      if (part.rfind("./run-ddp.sh ", 0) == 0) {
        if (is_command(part)) out.push_back(DocCommand{path, pending_line, block, part, "", part});
        continue;
      }
      std::smatch m;
      if (!std::regex_match(part, m, ddpx_line())) continue;
      const std::string command = "ddpx " + m[3].str();
      if (!is_command(command)) continue;
      out.push_back(DocCommand{path, pending_line, block, command, m[1].str() + m[2].str(), part});
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

bool trains_here(const std::string& text) {
  const bool trains =
      text.rfind("ddpx train ", 0) == 0 ||
      (text.rfind("ddpx run ", 0) == 0 && text.find(" -- train") != std::string::npos);
  const bool elsewhere =
      text.find("...") != std::string::npos || text.find("--help") != std::string::npos ||
      text.find("--nnodes") != std::string::npos || text.find("--dry_run") != std::string::npos ||
      text.find("--dataset imagefolder") != std::string::npos ||    // on docs_fixtures' photos
      text.find("--dataset shards") != std::string::npos ||         // and their shards
      text.find("--data_url") != std::string::npos ||               // served on 127.0.0.1
      text.find("--data_dir /data/imagenet") != std::string::npos;  // ImageNet itself: nowhere
  return trains && !elsewhere;
}

bool runs_on_this_host(const DocCommand& c) {
  static const std::regex here(R"(^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:taskset\s+.*)?$)");
  return std::regex_match(c.launcher, here);
}

std::string launcher_here(const DocCommand& c) { return runs_on_this_host(c) ? c.launcher : ""; }

bool trains_here(const DocCommand& c) { return runs_on_this_host(c) && trains_here(c.text); }

std::vector<std::string> block_lines(const std::string& path, int block) {
  std::ifstream in(test::source_dir() + "/" + path);
  std::vector<std::string> out;
  bool in_block = false;
  int seen = -1;
  for (std::string line; std::getline(in, line);) {
    if (is_fence(line)) {
      in_block = !in_block;
      if (in_block) ++seen;
      if (!in_block && seen == block) break;
      continue;
    }
    if (in_block && seen == block) out.push_back(line);
  }
  return out;
}

}  // namespace ddpx::docs_testing
