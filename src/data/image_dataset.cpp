#include "data/image_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "data/http_range.h"
#include "data/transforms.h"
#include "data/val_split.h"
#include "io/tar_shard.h"

namespace ddpx::data {
namespace folders_detail {

bool is_dir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A folder with unreadable files: refused (training would stop at the first in some batch), or
// with --bad_images skip said once and left out by readable().
void check_readable(const ImageIndex& index, BadImages policy) {
  if (index.errors.empty()) return;
  const size_t bad = index.errors.size();
  const std::string& first = index.errors.begin()->second;
  DDPX_CHECK(policy == BadImages::kSkip, ErrorKind::kData,
             "{} of {} files in {} cannot be read; the first: {} (`ddpx data info {}` lists "
             "them all: remove or convert them, or pass --bad_images skip to train without them)",
             bad, index.records.size(), index.listing.root, first, index.listing.root);
  log::warn(
      "{} of {} files in {} cannot be read and are left out (--bad_images skip); the "
      "first: {} (`ddpx data info {}` lists them all)",
      bad, index.records.size(), index.listing.root, first, index.listing.root);
}

// `picks` without the files whose header could not be read.
std::vector<size_t> readable(const ImageIndex& index, std::vector<size_t> picks) {
  picks.erase(std::remove_if(picks.begin(), picks.end(),
                             [&](size_t i) { return !index.records[i].readable; }),
              picks.end());
  return picks;
}

// Says where a folder's index came from: the observable of the cache (docs/data.md).
void log_index(const ImageIndex& index) {
  log::info("index: {} ({} images, {:.3f} s): {}",
            index.from_cache ? "cached" : "built, then cached", index.records.size(), index.seconds,
            index.listing.root);
}

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The samples `picks` of an index (in that order) as a streamed Dataset with `labels`.
Dataset make_split(const std::string& name, const ImageIndex& index,
                   const std::vector<size_t>& picks, const std::vector<int64_t>& labels,
                   const std::vector<std::string>& classes) {
  auto files = std::make_shared<ImageFiles>();
  files->root = index.listing.root;
  files->paths = PathList(index.listing.root);
  files->index_cached = index.from_cache;
  files->index_seconds = index.seconds;
  std::vector<int64_t> heights, widths;
  heights.reserve(picks.size());
  widths.reserve(picks.size());
  size_t chars = 0;
  for (size_t i : picks) chars += index.listing.paths.relative(i).size();
  files->paths.reserve(picks.size(), chars);
  for (size_t i : picks) {
    files->paths.push_back(index.listing.paths.relative(i));
    heights.push_back(index.records[i].height);
    widths.push_back(index.records[i].width);
  }
  Dataset d;
  d.name = name;
  d.labels = torch::tensor(labels, torch::kInt64);
  d.num_classes = static_cast<int64_t>(classes.size());
  d.class_names = classes;
  d.median_height = median(heights);
  d.median_width = median(widths);
  d.files = std::move(files);
  return d;
}

std::vector<int64_t> labels_of(const ImageIndex& index, const std::vector<size_t>& picks) {
  std::vector<int64_t> labels;
  labels.reserve(picks.size());
  for (size_t i : picks) labels.push_back(index.listing.labels[i]);
  return labels;
}

std::vector<size_t> all(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), size_t{0});
  return v;
}

}  // namespace folders_detail

std::string ImageFiles::read(int64_t i) const {
  if (!sharded()) return read_file(paths[i]);
  if (is_url(paths[i])) return http_read_range(paths[i], offsets[i], records[i].bytes);
  return io::read_tar_member(paths[i], offsets[i], records[i].bytes);
}

std::string ImageFiles::name(int64_t i) const {
  return sharded() ? paths[i] + ":" + members[i] : paths[i];
}

std::string image_train_root(const DatasetSpec& spec, const std::string& data_dir) {
  return spec.dataset == DatasetId::kImagenet ? data_dir + "/train" : data_dir;
}

int64_t image_folder_classes(const DatasetSpec& spec, const std::string& data_dir) {
  return static_cast<int64_t>(list_image_folder(image_train_root(spec, data_dir)).classes.size());
}

DatasetSplits load_image_folder_dataset(const DatasetSpec& spec, const std::string& data_dir) {
  const std::string name = data::name(spec.dataset);
  const std::string train_root = image_train_root(spec, data_dir);
  std::string val_root = spec.val_dir;
  if (spec.dataset == DatasetId::kImagenet && val_root.empty() && spec.with_validation) {
    val_root = data_dir + "/val";
    DDPX_CHECK(folders_detail::is_dir(val_root), ErrorKind::kData,
               "{}: no validation folder; --dataset imagenet reads DATA_DIR/train and "
               "DATA_DIR/val, each a folder per class (docs/data.md shows how to sort ILSVRC's "
               "val images into class folders), or give --val_dir",
               val_root);
  }
  const ImageIndex train = index_image_folder(train_root, spec.index_threads);
  folders_detail::log_index(train);
  folders_detail::check_readable(train, spec.bad_images);
  const auto& classes = train.listing.classes;
  DatasetSplits splits;
  splits.mean.assign(kImagenetMean, kImagenetMean + 3);
  splits.std.assign(kImagenetStd, kImagenetStd + 3);
  const size_t n = train.listing.paths.size();
  if (!spec.with_validation) {  // the training folder alone (a benchmark's): no test split
    const std::vector<size_t> picks = folders_detail::readable(train, folders_detail::all(n));
    splits.train = folders_detail::make_split(name, train, picks,
                                              folders_detail::labels_of(train, picks), classes);
    splits.test = folders_detail::make_split(name, train, {}, {}, classes);
    splits.source = train_root;
    return splits;
  }
  if (!val_root.empty()) {
    const ImageIndex val = index_image_folder(val_root, spec.index_threads);
    folders_detail::log_index(val);
    folders_detail::check_readable(val, spec.bad_images);
    std::map<std::string, int64_t> label_of;
    for (size_t k = 0; k < classes.size(); ++k) label_of[classes[k]] = static_cast<int64_t>(k);
    const std::vector<size_t> val_picks =
        folders_detail::readable(val, folders_detail::all(val.listing.paths.size()));
    std::vector<int64_t> val_labels;
    for (size_t i : val_picks) {
      const std::string& c = val.listing.classes[val.listing.labels[i]];
      auto it = label_of.find(c);
      DDPX_CHECK(it != label_of.end(), ErrorKind::kData,
                 "{}/{}: a validation class that the training folder {} lacks; the two folders "
                 "must name the same classes",
                 val_root, c, train_root);
      val_labels.push_back(it->second);
    }
    const std::vector<size_t> train_picks = folders_detail::readable(train, folders_detail::all(n));
    splits.train = folders_detail::make_split(
        name, train, train_picks, folders_detail::labels_of(train, train_picks), classes);
    splits.test = folders_detail::make_split(name, val, val_picks, val_labels, classes);
    splits.source = fmt::format("{} (validation {})", train_root, val_root);
    return splits;
  }
  DDPX_CHECK(spec.val_split > 0 && spec.val_split < 1, ErrorKind::kUsage,
             "--val_split {}: expected a fraction in (0, 1) of {} held out for validation, or "
             "--val_dir DIR",
             spec.val_split, train_root);
  DDPX_CHECK(n >= 2, ErrorKind::kData, "{}: {} image; --val_split needs at least 2", train_root, n);
  // Held out before the unreadable files are left out: the same good files on either policy.
  const HeldOut held = hold_out(n, spec.val_split);
  const std::vector<size_t> val_picks = folders_detail::readable(train, held.val);
  const std::vector<size_t> train_picks = folders_detail::readable(train, held.train);
  splits.train = folders_detail::make_split(name, train, train_picks,
                                            folders_detail::labels_of(train, train_picks), classes);
  splits.test = folders_detail::make_split(name, train, val_picks,
                                           folders_detail::labels_of(train, val_picks), classes);
  splits.source = fmt::format("{} ({:g} held out for validation)", train_root, spec.val_split);
  return splits;
}

}  // namespace ddpx::data
