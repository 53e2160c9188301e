// IDX byte parser (io/idx.h): bytes written by numpy read back exactly, and each kind of damage
// is one kData error naming the source.
#include "io/idx.h"

#include <gtest/gtest.h>

#include <functional>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

std::string idx_bytes(uint32_t magic, std::vector<uint32_t> dims, size_t data_bytes, uint8_t fill) {
  std::string out;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
  };
  be(magic);
  for (auto d : dims) be(d);
  out.append(data_bytes, static_cast<char>(fill));
  return out;
}

void expect_data_error(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    FAIL() << "expected an error containing: " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// numpy writes the header as big-endian uint32 and the data as uint8, as MNIST's files are.
TEST(IdxTest, ParsesBytesWrittenByNumpy) {
  test::TempDir dir;
  auto result = test::run_python(fmt::format(R"(
import numpy as np
def write(path, magic, arr):
    head = np.array([magic] + list(arr.shape), dtype='>u4').tobytes()
    open(path, 'wb').write(head + arr.astype(np.uint8).tobytes())
n, y, x = np.meshgrid(np.arange(3), np.arange(5), np.arange(2), indexing='ij')
write('{0}/images', 0x803, (n * 31 + y * 7 + x) % 256)
write('{0}/labels', 0x801, np.array([9, 0, 4]))
)",
                                             dir.path()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  torch::Tensor images = parse_idx_images(read_file(dir.file("images")), "images");
  ASSERT_EQ(images.sizes(), (std::vector<int64_t>{3, 5, 2, 1}));
  auto img = images.accessor<uint8_t, 4>();
  for (int n = 0; n < 3; ++n)
    for (int y = 0; y < 5; ++y)
      for (int x = 0; x < 2; ++x) ASSERT_EQ(img[n][y][x][0], (n * 31 + y * 7 + x) % 256);
  torch::Tensor labels = parse_idx_labels(read_file(dir.file("labels")), "labels", 10);
  EXPECT_TRUE(torch::equal(labels, torch::tensor({9, 0, 4}, torch::kInt64)));
}

TEST(IdxTest, RejectsWrongMagic) {
  auto bytes = idx_bytes(0x801, {2, 2, 2}, 8, 0);
  expect_data_error([&] { parse_idx_images(bytes, "imgs.idx"); }, "magic");
}

TEST(IdxTest, TruncatedFileNamesTheFile) {
  auto bytes = idx_bytes(0x803, {3, 28, 28}, 3 * 784 - 10, 0);
  expect_data_error([&] { parse_idx_images(bytes, "/x/train-images-idx3-ubyte"); },
                    "/x/train-images-idx3-ubyte");
  expect_data_error([&] { parse_idx_images(bytes, "f"); }, "truncated");
  expect_data_error([&] { parse_idx_images(bytes.substr(0, 10), "f"); }, "truncated");
  expect_data_error(
      [&] {
        parse_idx_images(idx_bytes(0x803, {1, 2, 2}, 5, 0), "f");
      },
      "trailing bytes");
}

TEST(IdxTest, RejectsLabelOutOfRange) {
  auto bytes = idx_bytes(0x801, {4}, 4, 10);
  expect_data_error([&] { parse_idx_labels(bytes, "labels", 10); }, "out of range");
}

}  // namespace
}  // namespace ddpx::io
