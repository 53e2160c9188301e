// MNIST and Fashion-MNIST data sets: IDX files written by numpy (raw and gzip), Debian's real
// Fashion-MNIST, and the errors a user sees for corrupt or missing files (the byte parser's own
// tests are tests/io/idx_test.cpp).
#include "data/idx_dataset.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

// Writes a tiny IDX dataset with numpy: pixel (n, y, x) = (n*31 + y*7 + x) % 256,
// label n = (3n + 1) % 10. gz selects gzip files.
void write_idx_with_numpy(const std::string& dir, bool gz) {
  auto result =
      test::run_python(fmt::format(R"(
import gzip, numpy as np
def write(path, magic, arr):
    head = np.array([magic] + list(arr.shape), dtype='>u4').tobytes()
    data = head + arr.astype(np.uint8).tobytes()
    if {gz}:
        with gzip.open(path + '.gz', 'wb') as f: f.write(data)
    else:
        open(path, 'wb').write(data)
for prefix, n in (('train', 12), ('t10k', 5)):
    n_, y, x = np.meshgrid(np.arange(n), np.arange(6), np.arange(4), indexing='ij')
    write('{dir}/%s-images-idx3-ubyte' % prefix, 0x803, (n_ * 31 + y * 7 + x) % 256)
    write('{dir}/%s-labels-idx1-ubyte' % prefix, 0x801, (3 * np.arange(n) + 1) % 10)
)",
                                   fmt::arg("gz", gz ? "True" : "False"), fmt::arg("dir", dir)));
  ASSERT_EQ(result.exit_code, 0) << result.output;
}

void expect_numpy_pattern(const DatasetSplits& splits) {
  ASSERT_EQ(splits.train.size(), 12);
  ASSERT_EQ(splits.test.size(), 5);
  EXPECT_EQ(splits.train.images.sizes(), (std::vector<int64_t>{12, 6, 4, 1}));
  auto img = splits.train.images.accessor<uint8_t, 4>();
  for (int n = 0; n < 12; ++n)
    for (int y = 0; y < 6; ++y)
      for (int x = 0; x < 4; ++x) ASSERT_EQ(img[n][y][x][0], (n * 31 + y * 7 + x) % 256);
  for (int n = 0; n < 5; ++n) EXPECT_EQ(splits.test.labels[n].item<int64_t>(), (3 * n + 1) % 10);
}

TEST(IdxDatasetTest, ReadsRawFilesWrittenByNumpy) {
  test::TempDir dir;
  write_idx_with_numpy(dir.path(), false);
  expect_numpy_pattern(load_dataset({DatasetId::kMnist, dir.path()}));
}

TEST(IdxDatasetTest, ReadsGzipFilesWrittenByNumpy) {
  test::TempDir dir;
  write_idx_with_numpy(dir.path(), true);
  auto splits = load_dataset({DatasetId::kFashionMnist, dir.path()});
  expect_numpy_pattern(splits);
  EXPECT_EQ(splits.train.class_names.at(9), "Ankle boot");
}

TEST(IdxDatasetTest, RealFashionMnistMatchesPython) {
  DDPX_SKIP_WITHOUT_TOOL(
      std::filesystem::exists(test::fashion_mnist_dir() + "/train-images-idx3-ubyte.gz"))
      << "Debian's dataset-fashion-mnist is not installed (scripts/bootstrap --tests)";
  auto splits = load_dataset(DatasetSpec{});  // fashion-mnist from its default folder
  EXPECT_EQ(splits.train.size(), 60000);
  EXPECT_EQ(splits.test.size(), 10000);
  EXPECT_EQ(splits.train.images.sizes(), (std::vector<int64_t>{60000, 28, 28, 1}));
  EXPECT_EQ(splits.train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(splits.train.labels.max().item<int64_t>(), 9);
  auto result = test::run_python(fmt::format(R"(
import gzip, numpy as np
d = '{}'
lab = np.frombuffer(gzip.open(d + '/train-labels-idx1-ubyte.gz').read(), np.uint8, offset=8)
img = np.frombuffer(gzip.open(d + '/t10k-images-idx3-ubyte.gz').read(), np.uint8, offset=16)
print(lab[0], lab[59999], int(img[:784].sum()))
)",
                                             test::fashion_mnist_dir()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::string ours = fmt::format("{} {} {}\n", splits.train.labels[0].item<int64_t>(),
                                 splits.train.labels[59999].item<int64_t>(),
                                 splits.test.images[0].sum().item<int64_t>());
  EXPECT_EQ(result.output, ours);
  // Dataset statistics in [0, 1]: Fashion-MNIST's well-known mean is about 0.286.
  EXPECT_NEAR(splits.mean.at(0), 0.286, 0.001);
  EXPECT_NEAR(splits.std.at(0), 0.353, 0.001);
}

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

TEST(IdxDatasetTest, RejectsTruncatedGzip) {
  test::TempDir dir;
  write_idx_with_numpy(dir.path(), true);
  std::string path = dir.file("train-images-idx3-ubyte.gz");
  std::string bytes = read_file(path);
  test::write_bytes(path, bytes.substr(0, bytes.size() / 2));
  expect_data_error([&] { load_dataset({DatasetId::kMnist, dir.path()}); }, path);
}

TEST(IdxDatasetTest, RejectsCountMismatch) {
  test::TempDir dir;
  write_idx_with_numpy(dir.path(), false);
  test::write_bytes(dir.file("t10k-labels-idx1-ubyte"), idx_bytes(0x801, {4}, 4, 1));
  expect_data_error([&] { load_dataset({DatasetId::kMnist, dir.path()}); }, "labels");
}

TEST(IdxDatasetTest, MissingDirectoryNamesItAndTheDownloadCommand) {
  expect_data_error(
      [&] {
        load_dataset({DatasetId::kMnist, "/nonexistent/ddpx-data"});
      },
      "/nonexistent/ddpx-data");
  expect_data_error(
      [&] {
        load_dataset({DatasetId::kMnist, "/nonexistent/ddpx-data"});
      },
      "ddpx data download mnist");
}

TEST(DatasetTest, SyntheticIsDeterministicAndShaped) {
  DatasetSpec spec;
  spec.dataset = DatasetId::kSynthetic;
  spec.synthetic_train_size = 64;
  spec.synthetic_test_size = 16;
  spec.synthetic_height = 8;
  spec.synthetic_width = 6;
  spec.seed = 7;
  auto a = load_dataset(spec), b = load_dataset(spec);
  EXPECT_EQ(a.train.images.sizes(), (std::vector<int64_t>{64, 8, 6, 3}));
  EXPECT_TRUE(a.train.images.equal(b.train.images));
  EXPECT_TRUE(a.test.labels.equal(b.test.labels));
  EXPECT_FALSE(a.train.images.equal(a.test.images.repeat({4, 1, 1, 1})));
  spec.seed = 8;
  EXPECT_FALSE(load_dataset(spec).train.images.equal(a.train.images));
  EXPECT_GE(a.train.labels.min().item<int64_t>(), 0);
  EXPECT_LT(a.train.labels.max().item<int64_t>(), 10);
}

TEST(DatasetTest, ChannelStatsMatchDefinition) {
  // Channel 0 holds 0 and 255 (mean 0.5, std 0.5); channel 1 is constant 51 (std kept at 1).
  auto images = torch::tensor({0, 51, 255, 51}, torch::kUInt8).view({1, 1, 2, 2});
  std::vector<float> mean, std;
  channel_stats(images, mean, std);
  ASSERT_EQ(mean.size(), 2u);
  EXPECT_FLOAT_EQ(mean[0], 0.5f);
  EXPECT_FLOAT_EQ(std[0], 0.5f);
  EXPECT_FLOAT_EQ(mean[1], 0.2f);
  EXPECT_FLOAT_EQ(std[1], 1.0f);
}

// Each dataset has a name --dataset parses back (an unknown one is refused by the CLI, listing
// the table) and the shape tune and bench use without loading it.
TEST(DatasetTest, EveryDatasetHasANameAndAShape) {
  for (DatasetId id :
       {DatasetId::kFashionMnist, DatasetId::kMnist, DatasetId::kCifar10, DatasetId::kCifar100,
        DatasetId::kSynthetic, DatasetId::kImageFolder, DatasetId::kImagenet})
    EXPECT_EQ(parse_name(kDatasetNames, name(id)), id) << name(id);
  EXPECT_EQ(parse_name(kDatasetNames, "imagenet-22k"), std::nullopt);
  EXPECT_NE(list_names(kDatasetNames).find("cifar10"), std::string::npos);

  DatasetSpec spec;
  const DatasetShape fashion = dataset_shape(spec);
  EXPECT_EQ(fashion.image_size, 28);
  EXPECT_EQ(fashion.channels, 1);
  EXPECT_EQ(fashion.num_classes, 10);
  spec.dataset = DatasetId::kCifar100;
  EXPECT_EQ(dataset_shape(spec).num_classes, 100);
  spec.dataset = DatasetId::kSynthetic;
  spec.synthetic_height = spec.synthetic_width = 12;
  spec.synthetic_classes = 7;
  spec.synthetic_train_size = spec.synthetic_test_size = 4;
  const DatasetShape synthetic = dataset_shape(spec);
  const Dataset loaded = load_dataset(spec).train;
  EXPECT_EQ(synthetic.image_size, loaded.height());
  EXPECT_EQ(synthetic.channels, loaded.channels());
  EXPECT_EQ(synthetic.num_classes, loaded.num_classes);
}

}  // namespace
}  // namespace ddpx::data
