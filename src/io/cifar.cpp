#include "io/cifar.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "io/pickle.h"

namespace ddpx::io {
namespace {

// (N, 3*32*32) CHW rows -> (N, 32, 32, 3).
torch::Tensor chw_rows_to_nhwc(const uint8_t* data, int64_t n) {
  auto chw = torch::empty({n, 3, kCifarSide, kCifarSide}, torch::kUInt8);
  if (n > 0) std::memcpy(chw.data_ptr<uint8_t>(), data, n * kCifarImageBytes);
  return chw.permute({0, 2, 3, 1}).contiguous();
}

int64_t num_classes_of(bool cifar100) { return cifar100 ? 100 : 10; }

std::vector<int64_t> int_list(const pickle::Value* v, const std::string& source, const char* key) {
  std::vector<int64_t> out;
  if (v->kind == pickle::Kind::kList || v->kind == pickle::Kind::kTuple) {
    for (const pickle::Value* item : v->items) {
      DDPX_CHECK(item->kind == pickle::Kind::kInt, ErrorKind::kData,
                 "{}: '{}' holds a {}, expected ints", source, key, pickle::kind_name(item->kind));
      out.push_back(item->integer);
    }
    return out;
  }
  DDPX_CHECK(v->kind == pickle::Kind::kNdarray && v->array.shape.size() == 1, ErrorKind::kData,
             "{}: '{}' is a {}, expected a list of ints", source, key, pickle::kind_name(v->kind));
  const auto& a = v->array;
  int64_t size = a.item_size();
  char kind = a.dtype.size() > 1 ? a.dtype[1] : '?';
  DDPX_CHECK((kind == 'i' || kind == 'u') && a.dtype[0] != '>' && size >= 1 && size <= 8,
             ErrorKind::kData, "{}: '{}' has dtype {}, expected integers", source, key, a.dtype);
  for (int64_t i = 0; i < a.numel(); ++i) {
    uint64_t raw = 0;
    std::memcpy(&raw, a.data.data() + i * size, size);
    if (kind == 'i' && size < 8 && (raw >> (8 * size - 1)) & 1) raw |= ~uint64_t{0} << (8 * size);
    out.push_back(static_cast<int64_t>(raw));
  }
  return out;
}

}  // namespace

CifarBatch parse_cifar_binary(std::string_view bytes, const std::string& source, bool cifar100) {
  int64_t label_bytes = cifar100 ? 2 : 1;
  int64_t record = label_bytes + kCifarImageBytes;
  DDPX_CHECK(!bytes.empty() && bytes.size() % record == 0, ErrorKind::kData,
             "{}: {} bytes is not a whole number of {}-byte CIFAR records; delete it and "
             "download it again",
             source, bytes.size(), record);
  int64_t n = static_cast<int64_t>(bytes.size()) / record;
  CifarBatch out;
  out.num_classes = num_classes_of(cifar100);
  out.labels = torch::empty({n}, torch::kInt64);
  auto chw = torch::empty({n, kCifarImageBytes}, torch::kUInt8);
  auto* labels = out.labels.data_ptr<int64_t>();
  auto* pixels = chw.data_ptr<uint8_t>();
  const auto* in = reinterpret_cast<const uint8_t*>(bytes.data());
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* rec = in + i * record;
    if (cifar100)
      DDPX_CHECK(rec[0] < 20, ErrorKind::kData,
                 "{}: coarse label {} of record {} is out of range, expected 0..19", source, rec[0],
                 i);
    int64_t label = rec[label_bytes - 1];
    DDPX_CHECK(label < out.num_classes, ErrorKind::kData,
               "{}: label {} of record {} is out of range, expected 0..{}", source, label, i,
               out.num_classes - 1);
    labels[i] = label;
    std::memcpy(pixels + i * kCifarImageBytes, rec + label_bytes, kCifarImageBytes);
  }
  out.images = chw_rows_to_nhwc(pixels, n);
  return out;
}

CifarBatch parse_cifar_python(std::string_view bytes, const std::string& source, bool cifar100) {
  pickle::Pickle doc = pickle::parse(bytes, source);
  const pickle::Value* root = doc.root();
  DDPX_CHECK(root->kind == pickle::Kind::kDict, ErrorKind::kData,
             "{}: the pickle holds a {}, expected a CIFAR batch dict", source,
             pickle::kind_name(root->kind));
  const pickle::Value* data = root->find("data");
  const char* label_key = cifar100 ? "fine_labels" : "labels";
  const pickle::Value* labels_value = root->find(label_key);
  DDPX_CHECK(data != nullptr && labels_value != nullptr, ErrorKind::kData,
             "{}: the batch dict lacks 'data' or '{}'; is this a {} batch?", source, label_key,
             cifar100 ? "CIFAR-100" : "CIFAR-10");
  DDPX_CHECK(data->kind == pickle::Kind::kNdarray, ErrorKind::kData,
             "{}: 'data' is a {}, expected a numpy array", source, pickle::kind_name(data->kind));
  const auto& a = data->array;
  DDPX_CHECK(
      a.dtype == "|u1" && a.shape.size() == 2 && a.shape[1] == kCifarImageBytes && !a.fortran_order,
      ErrorKind::kData, "{}: 'data' is a {} array of {} dims, expected (N, 3072) uint8", source,
      a.dtype, a.shape.size());
  int64_t n = a.shape[0];
  std::vector<int64_t> labels = int_list(labels_value, source, label_key);
  DDPX_CHECK(static_cast<int64_t>(labels.size()) == n, ErrorKind::kData,
             "{}: {} images but {} labels", source, n, labels.size());
  CifarBatch out;
  out.num_classes = num_classes_of(cifar100);
  out.labels = torch::empty({n}, torch::kInt64);
  auto* out_labels = out.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    DDPX_CHECK(labels[i] >= 0 && labels[i] < out.num_classes, ErrorKind::kData,
               "{}: label {} of sample {} is out of range, expected 0..{}", source, labels[i], i,
               out.num_classes - 1);
    out_labels[i] = labels[i];
  }
  out.images = chw_rows_to_nhwc(reinterpret_cast<const uint8_t*>(a.data.data()), n);
  return out;
}

}  // namespace ddpx::io
