#include "data/idx_dataset.h"

#include <filesystem>

#include "core/error.h"
#include "io/gzip.h"
#include "io/idx.h"

namespace ddpx::data {
std::vector<std::string> fashion_mnist_class_names() {
  return {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
          "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
}

namespace {

// `dir/stem` or `dir/stem.gz`, whichever exists.
std::string find_idx_file(const std::string& name, const std::string& dir,
                          const std::string& stem) {
  namespace fs = std::filesystem;
  for (const std::string& candidate : {stem + ".gz", stem}) {
    fs::path path = fs::path(dir) / candidate;
    if (fs::is_regular_file(path)) return path.string();
  }
  fail(ErrorKind::kData, "{}: {}[.gz] not found in {}; run `ddpx data download {} --data_dir {}`",
       name, stem, dir, name, dir);
}

Dataset load_split(const std::string& name, const std::string& dir, const std::string& prefix) {
  std::string images_path = find_idx_file(name, dir, prefix + "-images-idx3-ubyte");
  std::string labels_path = find_idx_file(name, dir, prefix + "-labels-idx1-ubyte");
  Dataset split;
  split.name = name;
  split.num_classes = 10;
  split.images = io::parse_idx_images(io::read_maybe_gzip(images_path), images_path);
  split.labels =
      io::parse_idx_labels(io::read_maybe_gzip(labels_path), labels_path, split.num_classes);
  DDPX_CHECK(split.images.size(0) == split.labels.size(0), ErrorKind::kData,
             "{} has {} images but {} has {} labels; the files are from different sets",
             images_path, split.images.size(0), labels_path, split.labels.size(0));
  if (name == "fashion-mnist") split.class_names = fashion_mnist_class_names();
  return split;
}

}  // namespace

DatasetSplits load_idx_dataset(const std::string& name, const std::string& dir) {
  DatasetSplits splits;
  splits.train = load_split(name, dir, "train");
  splits.test = load_split(name, dir, "t10k");
  splits.source = dir;
  channel_stats(splits.train.images, splits.mean, splits.std);
  return splits;
}

}  // namespace ddpx::data
