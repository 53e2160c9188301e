// CIFAR batch bytes (io/cifar.h): a batch pickled by Python (numpy array, list of labels) and
// records in the binary layout read back pixel for pixel; damaged ones are refused.
#include "io/cifar.h"

#include <gtest/gtest.h>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

// Row r of the batch has pixel (c, y, x) = (r*7 + c*3 + y*5 + x) % 256 in CHW order.
TEST(CifarBytesTest, PythonAndBinaryBatchesReadBackAsNhwc) {
  test::TempDir dir;
  auto result = test::run_python(fmt::format(R"(
import pickle, numpy as np
r, c, y, x = np.meshgrid(np.arange(3), np.arange(3), np.arange(32), np.arange(32), indexing='ij')
rows = ((r * 7 + c * 3 + y * 5 + x) % 256).astype(np.uint8).reshape(3, 3072)
with open('{0}/batch', 'wb') as f:
    pickle.dump({{'data': rows, 'fine_labels': [98, 0, 42], 'coarse_labels': [1, 2, 3]}}, f, 2)
with open('{0}/batch.bin', 'wb') as f:
    for i, label in enumerate([98, 0, 42]):
        f.write(bytes([i, label]) + rows[i].tobytes())
)",
                                             dir.path()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  for (bool binary : {false, true}) {
    SCOPED_TRACE(binary ? "binary" : "python");
    std::string bytes = read_file(dir.file(binary ? "batch.bin" : "batch"));
    CifarBatch batch = binary ? parse_cifar_binary(bytes, "batch", true)
                              : parse_cifar_python(bytes, "batch", true);
    EXPECT_EQ(batch.num_classes, 100);
    EXPECT_TRUE(torch::equal(batch.labels, torch::tensor({98, 0, 42}, torch::kInt64)));
    ASSERT_EQ(batch.images.sizes(), (std::vector<int64_t>{3, 32, 32, 3}));
    auto img = batch.images.accessor<uint8_t, 4>();
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 3; ++c)
        for (int y : {0, 17, 31})
          for (int x : {0, 9, 31}) ASSERT_EQ(img[r][y][x][c], (r * 7 + c * 3 + y * 5 + x) % 256);
  }
}

TEST(CifarBytesTest, CorruptBatchesAreRejected) {
  std::string record(3073, '\0');
  EXPECT_THROW(parse_cifar_binary(record.substr(0, 3000), "short.bin", false), Error);
  record[0] = 10;  // label out of range for CIFAR-10
  EXPECT_THROW(parse_cifar_binary(record, "label.bin", false), Error);
  record[0] = 9;
  EXPECT_EQ(parse_cifar_binary(record, "ok.bin", false).labels[0].item<int64_t>(), 9);
  EXPECT_THROW(parse_cifar_python("\x80\x02}.", "empty.pkl", false), Error);  // no 'data'
}

}  // namespace
}  // namespace ddpx::io
