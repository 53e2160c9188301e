#include "data/idx.h"

#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/gzip.h"

namespace ddpx::data {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;
constexpr uint32_t kLabelsMagic = 0x00000801;
constexpr int64_t kMaxSide = 1 << 14;

uint32_t be32(std::string_view bytes, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(bytes[at + i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

// Validates magic and exact length; returns the dimensions.
std::vector<int64_t> parse_header(std::string_view bytes, const std::string& source, uint32_t magic,
                                  const char* what) {
  DDPX_CHECK(bytes.size() >= 4, ErrorKind::kData,
             "{}: {} bytes is too short for an IDX {} file; delete it and download it again",
             source, bytes.size(), what);
  uint32_t got = be32(bytes, 0);
  DDPX_CHECK(got == magic, ErrorKind::kData,
             "{}: IDX magic is 0x{:08x}, expected 0x{:08x} for {}; is this the right file?", source,
             got, magic, what);
  size_t ndim = magic & 0xff;
  size_t header = 4 + 4 * ndim;
  DDPX_CHECK(bytes.size() >= header, ErrorKind::kData,
             "{}: truncated IDX header ({} bytes, expected {}); delete it and download it again",
             source, bytes.size(), header);
  std::vector<int64_t> dims;
  uint64_t total = 1;
  for (size_t i = 0; i < ndim; ++i) {
    int64_t d = be32(bytes, 4 + 4 * i);
    DDPX_CHECK(i == 0 || (d > 0 && d <= kMaxSide), ErrorKind::kData,
               "{}: IDX dimension {} is {}, expected 1..{}", source, i, d, kMaxSide);
    dims.push_back(d);
    total *= static_cast<uint64_t>(d);
  }
  DDPX_CHECK(bytes.size() - header == total, ErrorKind::kData,
             "{}: IDX {} file has {} data bytes, its header promises {} ({}); delete it and "
             "download it again",
             source, what, bytes.size() - header, total,
             bytes.size() - header < total ? "truncated" : "trailing bytes");
  return dims;
}

}  // namespace

torch::Tensor parse_idx_images(std::string_view bytes, const std::string& source) {
  auto dims = parse_header(bytes, source, kImagesMagic, "images");
  auto images = torch::empty({dims[0], dims[1], dims[2], 1}, torch::kUInt8);
  if (images.numel() > 0)
    std::memcpy(images.data_ptr<uint8_t>(), bytes.data() + 16, images.numel());
  return images;
}

torch::Tensor parse_idx_labels(std::string_view bytes, const std::string& source,
                               int64_t num_classes) {
  auto dims = parse_header(bytes, source, kLabelsMagic, "labels");
  auto labels = torch::empty({dims[0]}, torch::kInt64);
  auto* out = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < dims[0]; ++i) {
    int64_t label = static_cast<uint8_t>(bytes[8 + i]);
    DDPX_CHECK(label < num_classes, ErrorKind::kData,
               "{}: label {} of sample {} is out of range, expected 0..{}", source, label, i,
               num_classes - 1);
    out[i] = label;
  }
  return labels;
}

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
  split.images = parse_idx_images(io::read_maybe_gzip(images_path), images_path);
  split.labels = parse_idx_labels(io::read_maybe_gzip(labels_path), labels_path, split.num_classes);
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
  channel_stats(splits.train.images, splits.mean, splits.std);
  return splits;
}

}  // namespace ddpx::data
