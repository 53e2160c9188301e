// CIFAR readers on small folders written by Python with the official files' structure (fewer
// rows) and the official archives' layout (the byte parsers: tests/io/cifar_test.cpp; archive
// safety: tests/io/archive_test.cpp).
#include "data/cifar.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/dataset.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;

// Python helpers shared by the fixtures: row r of a batch with offset o has pixel
// (c, y, x) = (o + r*7 + c*3 + y*5 + x) % 256 in CHW order, label (o + r) % classes.
const char* kPythonPrelude = R"(
import os, pickle, tarfile, numpy as np
def rows(o, n):
    r, c, y, x = np.meshgrid(np.arange(n), np.arange(3), np.arange(32), np.arange(32),
                             indexing='ij')
    return ((o + r * 7 + c * 3 + y * 5 + x) % 256).astype(np.uint8).reshape(n, 3072)
def labels(o, n, k): return [int((o + r) % k) for r in range(n)]
)";

void run(const std::string& script) {
  auto result = test::run_python(std::string(kPythonPrelude) + script);
  ASSERT_EQ(result.exit_code, 0) << result.output;
}

// Checks the NHWC pixels of split row i, produced from batch offset o and row r.
void expect_row(const Dataset& d, int64_t i, int o, int r, int classes) {
  auto img = d.images[i];
  for (int c = 0; c < 3; ++c)
    for (int y : {0, 13, 31})
      for (int x : {0, 7, 31})
        ASSERT_EQ(img[y][x][c].item<int>(), (o + r * 7 + c * 3 + y * 5 + x) % 256)
            << "row " << i << " c" << c << " y" << y << " x" << x;
  EXPECT_EQ(d.labels[i].item<int64_t>(), (o + r) % classes);
}

void expect_cifar10(const DatasetSplits& s) {
  ASSERT_EQ(s.train.size(), 15);  // 5 batches of 3 rows
  ASSERT_EQ(s.test.size(), 2);
  EXPECT_EQ(s.train.images.sizes(), (std::vector<int64_t>{15, 32, 32, 3}));
  EXPECT_EQ(s.train.num_classes, 10);
  expect_row(s.train, 0, 10, 0, 10);
  expect_row(s.train, 4, 20, 1, 10);  // batch 2, row 1
  expect_row(s.train, 14, 50, 2, 10);
  expect_row(s.test, 1, 99, 1, 10);
}

const char* kWriteCifar10Python = R"(
def cifar10_py(root, protocol):
    d = os.path.join(root, 'cifar-10-batches-py'); os.makedirs(d)
    for b in range(1, 6):
        batch = {b'batch_label': b'training batch', b'labels': labels(10 * b, 3, 10),
                 b'data': rows(10 * b, 3), b'filenames': [b'x.png'] * 3}
        pickle.dump(batch, open(os.path.join(d, 'data_batch_%d' % b), 'wb'), protocol=protocol)
    pickle.dump({b'data': rows(99, 2), b'labels': labels(99, 2, 10)},
                open(os.path.join(d, 'test_batch'), 'wb'), protocol=protocol)
    names = [b'airplane', b'automobile', b'bird', b'cat', b'deer', b'dog', b'frog', b'horse',
             b'ship', b'truck']
    pickle.dump({b'label_names': names, b'num_vis': 3072},
                open(os.path.join(d, 'batches.meta'), 'wb'), protocol=protocol)
)";

TEST(CifarTest, Cifar10PythonVersionProtocol2) {
  test::TempDir dir;
  run(std::string(kWriteCifar10Python) + "cifar10_py('" + dir.path() + "', 2)\n");
  auto s = load_dataset({DatasetId::kCifar10, dir.path()});
  expect_cifar10(s);
  ASSERT_EQ(s.train.class_names.size(), 10u);
  EXPECT_EQ(s.train.class_names[9], "truck");
}

TEST(CifarTest, Cifar10PythonVersionProtocol4) {
  test::TempDir dir;
  run(std::string(kWriteCifar10Python) + "cifar10_py('" + dir.path() + "', 4)\n");
  expect_cifar10(load_dataset({DatasetId::kCifar10, dir.path()}));
}

TEST(CifarTest, Cifar10BinaryVersion) {
  test::TempDir dir;
  run(R"(
def rec(o, n):
    return b''.join(bytes([labels(o, n, 10)[r]]) + rows(o, n)[r].tobytes() for r in range(n))
d = os.path.join(')" +
      dir.path() + R"(', 'cifar-10-batches-bin'); os.makedirs(d)
for b in range(1, 6): open(os.path.join(d, 'data_batch_%d.bin' % b), 'wb').write(rec(10 * b, 3))
open(os.path.join(d, 'test_batch.bin'), 'wb').write(rec(99, 2))
names = '\n'.join('c%d' % i for i in range(10)) + '\n\n'
open(os.path.join(d, 'batches.meta.txt'), 'w').write(names)
)");
  auto s = load_dataset({DatasetId::kCifar10, dir.path()});
  expect_cifar10(s);
  EXPECT_EQ(s.test.class_names.at(3), "c3");
}

TEST(CifarTest, Cifar100PythonAndBinaryTrainOnFineLabels) {
  test::TempDir py, bin;
  run(R"(
def c100(o, n): return {b'data': rows(o, n), b'fine_labels': labels(o, n, 100),
                        b'coarse_labels': labels(o, n, 20), b'filenames': [b'f'] * n}
d = os.path.join(')" +
      py.path() + R"(', 'cifar-100-python'); os.makedirs(d)
pickle.dump(c100(95, 4), open(os.path.join(d, 'train'), 'wb'), protocol=2)
pickle.dump(c100(3, 2), open(os.path.join(d, 'test'), 'wb'), protocol=2)
pickle.dump({b'fine_label_names': [b'n%d' % i for i in range(100)]},
            open(os.path.join(d, 'meta'), 'wb'))
def rec(o, n):
    return b''.join(bytes([labels(o, n, 20)[r], labels(o, n, 100)[r]]) + rows(o, n)[r].tobytes()
                    for r in range(n))
d = os.path.join(')" +
      bin.path() + R"(', 'cifar-100-binary'); os.makedirs(d)
open(os.path.join(d, 'train.bin'), 'wb').write(rec(95, 4))
open(os.path.join(d, 'test.bin'), 'wb').write(rec(3, 2))
)");
  for (const auto& root : {py.path(), bin.path()}) {
    auto s = load_dataset({DatasetId::kCifar100, root});
    ASSERT_EQ(s.train.size(), 4);
    EXPECT_EQ(s.train.num_classes, 100);
    expect_row(s.train, 3, 95, 3, 100);  // label 98: fine, not coarse
    expect_row(s.test, 0, 3, 0, 100);
  }
  EXPECT_EQ(load_dataset({DatasetId::kCifar100, py.path()}).train.class_names.at(42), "n42");
}

TEST(CifarTest, UnpacksTheOfficialArchiveWhenTheFolderIsMissing) {
  test::TempDir staging, dir;
  run(std::string(kWriteCifar10Python) + "cifar10_py('" + staging.path() + "', 2)\n" +
      "with tarfile.open('" + dir.file("cifar-10-python.tar.gz") + "', 'w:gz') as t:\n" +
      "    t.add('" + staging.path() + "/cifar-10-batches-py', arcname='cifar-10-batches-py')\n");
  expect_cifar10(load_dataset({DatasetId::kCifar10, dir.path()}));
  EXPECT_TRUE(fs::is_regular_file(dir.file("cifar-10-batches-py/data_batch_5")));
}

TEST(CifarTest, MissingEverythingNamesTheDirAndTheDownloadCommand) {
  test::TempDir dir;
  try {
    load_dataset({DatasetId::kCifar10, dir.path()});
    FAIL();
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find(dir.path()), std::string::npos) << what;
    EXPECT_NE(what.find("ddpx data download cifar10 --data_dir " + dir.path()), std::string::npos)
        << what;
  }
}

}  // namespace
}  // namespace ddpx::data
