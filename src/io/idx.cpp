#include "io/idx.h"

#include <cstring>

#include "core/error.h"

namespace ddpx::io {
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

}  // namespace ddpx::io
