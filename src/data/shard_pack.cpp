#include "data/shard_pack.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/image_index.h"
#include "data/shard_dataset.h"
#include "io/tar_index.h"
#include "io/tar_shard.h"

namespace ddpx::data {
namespace pack_detail {

namespace fs = std::filesystem;

std::string lower_extension(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  if (!ext.empty()) ext.erase(0, 1);
  for (char& c : ext)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return ext;
}

// The label of each of `folder_classes` in the shards: its own index, or for a validation
// folder the index of its name in OUT/classes.txt.
std::vector<int64_t> shard_labels(const std::vector<std::string>& folder_classes,
                                  const std::string& classes_file, bool validation) {
  std::vector<int64_t> labels(folder_classes.size());
  std::ifstream in(classes_file);
  if (!validation || !in) {
    for (size_t k = 0; k < labels.size(); ++k) labels[k] = static_cast<int64_t>(k);
    return labels;
  }
  std::map<std::string, int64_t> known;
  int64_t k = 0;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) known[line] = k++;
  for (size_t c = 0; c < folder_classes.size(); ++c) {
    auto it = known.find(folder_classes[c]);
    DDPX_CHECK(it != known.end(), ErrorKind::kData,
               "{}: class '{}' is not in {}, the training shards' classes; pack the training "
               "folder first, and give the validation folder the same class names",
               classes_file, folder_classes[c], classes_file);
    labels[c] = it->second;
  }
  return labels;
}

}  // namespace pack_detail

int64_t parse_byte_size(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  if (unit.size() == 2 && (unit[1] == 'B' || unit[1] == 'b')) unit.pop_back();
  double scale = 0;
  if (unit.empty()) scale = 1;
  if (unit == "K" || unit == "k") scale = 1024.0;
  if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  DDPX_CHECK(used > 0 && scale > 0 && value * scale >= 1 && value * scale < 1e15, ErrorKind::kUsage,
             "{} {}: expected a size in bytes, or with K, M or G (for example 256M or 1G)", flag,
             text);
  return static_cast<int64_t>(value * scale);
}

PackResult pack_image_folder(const PackOptions& o) {
  namespace fs = std::filesystem;
  DDPX_CHECK(o.shard_bytes >= 1, ErrorKind::kUsage, "--shard_size {}: expected at least 1 byte",
             o.shard_bytes);
  DDPX_CHECK(!o.prefix.empty() && o.prefix.find('/') == std::string::npos, ErrorKind::kUsage,
             "--prefix '{}': expected a name such as train or val", o.prefix);
  const ImageIndex index = index_image_folder(o.folder, o.index_threads);
  const FolderListing& listing = index.listing;
  if (!index.errors.empty())
    fail(ErrorKind::kData,
         "{}; `ddpx data info {}` lists every unreadable file: remove or convert them, then pack "
         "again",
         index.errors.begin()->second, listing.root);
  fs::create_directories(o.out_dir);
  const std::string classes_file = o.out_dir + "/" + kShardClassesFile;
  const std::vector<int64_t> label_of =
      pack_detail::shard_labels(listing.classes, classes_file, o.prefix != "train");

  const size_t n = listing.paths.size();
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(o.seed);
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);

  const fs::path staging = fs::path(o.out_dir) / fmt::format(".pack-{}", ::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);
  PackResult result;
  result.classes = static_cast<int64_t>(listing.classes.size());
  std::vector<std::string> names;
  try {
    std::unique_ptr<io::TarWriter> shard;
    auto close = [&] {
      if (!shard) return;
      result.bytes += shard->bytes();
      shard->finish();
      shard.reset();
      // Its index beside it, from the finished tar itself (what a reader would list).
      const std::string tar = (staging / names.back()).string();
      io::write_tar_index(tar, io::list_tar(tar));
    };
    for (size_t k = 0; k < n; ++k) {
      const size_t i = order[k];
      const std::string bytes = read_file(listing.paths[i]);
      const std::string label = std::to_string(label_of[listing.labels[i]]);
      const int64_t need = 1024 + static_cast<int64_t>(bytes.size()) + 511;
      if (shard && shard->bytes() + need > o.shard_bytes) close();
      if (!shard) {
        names.push_back(fmt::format("{}-{:06d}.tar", o.prefix, names.size()));
        shard = std::make_unique<io::TarWriter>((staging / names.back()).string());
      }
      const std::string key = fmt::format("{:08d}", k);
      shard->add(key + "." + pack_detail::lower_extension(listing.paths[i]), bytes);
      shard->add(key + ".cls", label);
    }
    close();
    // Whole: replace OUT's shards of this prefix (all of them, so none of an older, longer
    // set stays behind) and the class names.
    for (const std::string& old : find_shards(o.out_dir, o.prefix))
      if (fs::path(old).filename().string().rfind(o.prefix + "-", 0) == 0) {
        fs::remove(old);
        fs::remove(io::tar_index_path(old));
      }
    for (const std::string& name : names) {
      // The tar first, then its index: the index is never older than the tar it describes.
      fs::rename(staging / name, fs::path(o.out_dir) / name);
      fs::rename(io::tar_index_path((staging / name).string()),
                 io::tar_index_path((fs::path(o.out_dir) / name).string()));
      result.shards.push_back(o.out_dir + "/" + name);
    }
    fs::remove_all(staging);
  } catch (const fs::filesystem_error& e) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    fail(ErrorKind::kIo, "cannot write the shards into {} ({}); check that it is writable",
         o.out_dir, e.code().message());
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
  if (o.prefix == "train") {
    std::string text;
    for (const auto& c : listing.classes) text += c + "\n";
    write_file_atomic(classes_file, text);
  }
  result.samples = static_cast<int64_t>(n);
  return result;
}

}  // namespace ddpx::data
