#include "data/cifar.h"

#include <filesystem>
#include <fstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/archive.h"
#include "io/cifar.h"
#include "io/pickle.h"

namespace ddpx::data {

namespace pickle = io::pickle;
namespace {

namespace fs = std::filesystem;

std::vector<std::string> string_list(const pickle::Value* v) {
  std::vector<std::string> out;
  if (v == nullptr || v->kind != pickle::Kind::kList) return out;
  for (const pickle::Value* item : v->items)
    if (item->is_string()) out.push_back(item->text);
  return out;
}

std::vector<std::string> read_lines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

struct Layout {
  std::vector<std::string> folders;   // unpacked folder names, python first
  std::vector<std::string> archives;  // official archives, same order
};

Layout layout_of(bool cifar100) {
  if (cifar100)
    return {{"cifar-100-python", "cifar-100-binary"},
            {"cifar-100-python.tar.gz", "cifar-100-binary.tar.gz"}};
  return {{"cifar-10-batches-py", "cifar-10-batches-bin"},
          {"cifar-10-python.tar.gz", "cifar-10-binary.tar.gz"}};
}

bool is_python_folder(const fs::path& dir, bool cifar100) {
  return fs::is_regular_file(dir / (cifar100 ? "train" : "data_batch_1"));
}
bool is_binary_folder(const fs::path& dir, bool cifar100) {
  return fs::is_regular_file(dir / (cifar100 ? "train.bin" : "data_batch_1.bin"));
}

// The folder holding the batches: dir itself, a known subfolder, or one unpacked from an archive.
fs::path find_folder(const std::string& name, const fs::path& dir, bool cifar100) {
  if (is_python_folder(dir, cifar100) || is_binary_folder(dir, cifar100)) return dir;
  Layout layout = layout_of(cifar100);
  for (const auto& folder : layout.folders)
    if (fs::is_directory(dir / folder)) return dir / folder;
  for (size_t i = 0; i < layout.archives.size(); ++i) {
    fs::path archive = dir / layout.archives[i];
    if (!fs::is_regular_file(archive)) continue;
    io::extract_archive(archive.string(), dir.string());
    DDPX_CHECK(fs::is_directory(dir / layout.folders[i]), ErrorKind::kData,
               "{} did not contain {}/; delete it and run `ddpx data download {} --data_dir {}`",
               archive.string(), layout.folders[i], name, dir.string());
    return dir / layout.folders[i];
  }
  fail(ErrorKind::kData,
       "{}: no {} or {} folder (nor {}) in {}; run `ddpx data download {} "
       "--data_dir {}`",
       name, layout.folders[0], layout.folders[1], layout.archives[0], dir.string(), name,
       dir.string());
}

Dataset load_files(const std::string& name, const fs::path& folder,
                   const std::vector<std::string>& files, bool binary, bool cifar100) {
  std::vector<torch::Tensor> images, labels;
  Dataset split;
  for (const auto& file : files) {
    fs::path path = folder / file;
    DDPX_CHECK(fs::is_regular_file(path), ErrorKind::kData,
               "{}: {} is missing; delete {} and run `ddpx data download {} --data_dir {}`", name,
               path.string(), folder.string(), name, folder.parent_path().string());
    std::string bytes = read_file(path.string());
    io::CifarBatch batch = binary ? io::parse_cifar_binary(bytes, path.string(), cifar100)
                                  : io::parse_cifar_python(bytes, path.string(), cifar100);
    split.num_classes = batch.num_classes;
    images.push_back(batch.images);
    labels.push_back(batch.labels);
  }
  split.name = name;
  split.images = torch::cat(images);
  split.labels = torch::cat(labels);
  return split;
}

std::vector<std::string> class_names(const fs::path& folder, bool binary, bool cifar100) {
  if (binary) return read_lines(folder / (cifar100 ? "fine_label_names.txt" : "batches.meta.txt"));
  fs::path meta = folder / (cifar100 ? "meta" : "batches.meta");
  if (!fs::is_regular_file(meta)) return {};
  pickle::Pickle doc = pickle::parse_file(meta.string());
  return string_list(doc.root()->find(cifar100 ? "fine_label_names" : "label_names"));
}

}  // namespace

bool holds_cifar(const std::string& name, const std::string& dir) {
  const bool cifar100 = name == "cifar100";
  if (is_python_folder(dir, cifar100) || is_binary_folder(dir, cifar100)) return true;
  Layout layout = layout_of(cifar100);
  for (const auto& folder : layout.folders)
    if (fs::is_directory(fs::path(dir) / folder)) return true;
  for (const auto& archive : layout.archives)
    if (fs::is_regular_file(fs::path(dir) / archive)) return true;
  return false;
}

DatasetSplits load_cifar_dataset(const std::string& name, const std::string& dir) {
  bool cifar100 = name == "cifar100";
  fs::path folder = find_folder(name, dir, cifar100);
  bool binary = !is_python_folder(folder, cifar100);
  std::vector<std::string> train_files, test_files;
  if (cifar100) {
    train_files = {binary ? "train.bin" : "train"};
    test_files = {binary ? "test.bin" : "test"};
  } else {
    for (int i = 1; i <= 5; ++i)
      train_files.push_back(fmt::format("data_batch_{}{}", i, binary ? ".bin" : ""));
    test_files = {binary ? "test_batch.bin" : "test_batch"};
  }
  DatasetSplits splits;
  splits.train = load_files(name, folder, train_files, binary, cifar100);
  splits.test = load_files(name, folder, test_files, binary, cifar100);
  auto names = class_names(folder, binary, cifar100);
  if (static_cast<int64_t>(names.size()) == splits.train.num_classes) {
    splits.train.class_names = names;
    splits.test.class_names = names;
  }
  channel_stats(splits.train.images, splits.mean, splits.std);
  splits.source = folder.string();
  return splits;
}

}  // namespace ddpx::data
