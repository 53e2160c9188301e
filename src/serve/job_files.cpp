#include "serve/job_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <tuple>

namespace ddpx::serve {
namespace {

const std::regex& checkpoint_name() {
  static const std::regex name(R"(^checkpoint_epoch(\d{4,9})(?:_step(\d{6,9}))?\.ddpx$)");
  return name;
}

const std::regex& part_name() {
  static const std::regex name(R"(^(index|rank\d{5,9}-of-\d{5,9})\.ddpx$)");
  return name;
}

}  // namespace

std::string job_name(int64_t id) { return "svc" + std::to_string(id); }

std::string job_files_dir(const std::string& state_dir, int64_t id) {
  return state_dir + "/files/" + std::to_string(id);
}

std::string job_checkpoints_dir(const std::string& state_dir, int64_t id) {
  return job_files_dir(state_dir, id) + "/checkpoints";
}

bool is_train_command(const std::vector<std::string>& command) {
  return !command.empty() && command.front() == "train";
}

bool is_checkpoint_name(const std::string& name) {
  return std::regex_match(name, checkpoint_name());
}

bool is_checkpoint_part_name(const std::string& name) {
  return std::regex_match(name, part_name());
}

std::vector<std::pair<std::string, std::string>> checkpoint_files(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string name = fs::path(path).filename().string();
  std::vector<std::pair<std::string, std::string>> files;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return {{name, path}};
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    const std::string part = entry.path().filename().string();
    if (entry.is_regular_file(ec) && is_checkpoint_part_name(part))
      files.emplace_back(name + "/" + part, entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<CheckpointFile> list_checkpoint_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<CheckpointFile> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    std::smatch m;
    if (!std::regex_match(name, m, checkpoint_name())) continue;
    CheckpointFile f;
    f.parts = entry.is_directory(ec);
    if (f.parts ? !fs::exists(entry.path() / "index.ddpx", ec) : !entry.is_regular_file(ec))
      continue;
    f.name = name;
    f.epoch = std::stoll(m[1]);
    f.snapshot = m[2].matched;
    f.step = f.snapshot ? std::stoll(m[2]) : 0;
    for (const auto& [relative, file] : checkpoint_files(entry.path().string()))
      f.bytes += static_cast<int64_t>(fs::file_size(file, ec));
    struct stat info {};
    if (::stat(entry.path().c_str(), &info) == 0) f.modified = info.st_mtime;
    files.push_back(f);
  }
  std::sort(files.begin(), files.end(), [](const CheckpointFile& a, const CheckpointFile& b) {
    return std::tie(a.epoch, a.step) > std::tie(b.epoch, b.step);
  });
  return files;
}

}  // namespace ddpx::serve
