// --dataset shards (data/shard_dataset.h) on shards written by two real writers from a folder of
// photographs: Python's tarfile in WebDataset's layout (with a member to pass over), and
// `ddpx data pack`'s (data/shard_pack.h). A shard sample's bytes and label are the folder
// file's, and the loader's batches from the shards equal those from the folder, sample for
// sample and pixel for pixel (the same transforms, keyed by the same sample index). A sample
// without a label and a label outside classes.txt are refused, naming the shard and the key.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/image_dataset.h"
#include "data/loader.h"
#include "data/shard_pack.h"
#include "io/tar_index.h"
#include "io/tar_shard.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;

class ShardDatasetTest : public ::testing::Test {
 protected:
  // The folder as a whole training set (validated on itself).
  DatasetSplits folder() const {
    DatasetSpec spec;
    spec.dataset = DatasetId::kImageFolder;
    spec.data_dir = root_;
    spec.val_dir = root_;
    return load_dataset(spec);
  }
  static DatasetSplits shards(const std::string& dir) {
    DatasetSpec spec;
    spec.dataset = DatasetId::kShards;
    spec.data_dir = dir;
    return load_dataset(spec);
  }
  // Python's tarfile writes the folder, in ImageFolder's order (torchvision's own listing), as
  // PREFIX-00000K.tar shards of `per_shard` samples (KEY.EXT, KEY.cls and KEY.json), for each
  // PREFIX of `prefixes` (a Python list's items).
  void python_shards(const std::string& out, int per_shard, const std::string& prefixes) const {
    const std::string script = R"(
import io, json, os, sys, tarfile
from torchvision.datasets import ImageFolder
root, out, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
samples = ImageFolder(root).samples
os.makedirs(out, exist_ok=True)
def add(t, name, data):
    info = tarfile.TarInfo(name); info.size = len(data); t.addfile(info, io.BytesIO(data))
for prefix in [PREFIXES]:
    for s in range(0, len(samples), per):
        with tarfile.open(out + "/" + prefix + "-%06d.tar" % (s // per), "w") as t:
            for k, (path, label) in enumerate(samples[s:s + per]):
                key = "sample%06d" % (s + k)
                add(t, key + os.path.splitext(path)[1].lower(), open(path, "rb").read())
                add(t, key + ".cls", str(label).encode())
                add(t, key + ".json", json.dumps({"path": path}).encode())
)";
    const std::string path = dir_.file("write_shards.py");
    std::string text = script;
    text.replace(text.find("PREFIXES"), 8, prefixes);
    test::write_bytes(path, text);
    auto r = test::run_command(test::python_binary() + " " + path + " " + root_ + " " + out + " " +
                               std::to_string(per_shard));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static Batch epoch(const Dataset& d, int64_t n) {
    LoaderOptions o;
    o.batch_size = 7;
    o.num_workers = 2;
    o.seed = 5;
    o.transform.image_size = 24;
    o.transform.random_resized_crop = true;
    o.transform.horizontal_flip = true;
    o.transform.normalize = Normalize::kImagenet;
    DataLoader loader(d, o);
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = (i * 7) % n;  // any order, the same for both
    loader.start_epoch(order, 2);
    std::vector<torch::Tensor> images, labels;
    while (auto b = loader.next()) {
      images.push_back(b->images);
      labels.push_back(b->labels);
    }
    return {torch::cat(images), torch::cat(labels)};
  }
  test::PhotoFolder dir_{5};
  const std::string root_ = dir_.root();
};

TEST_F(ShardDatasetTest, PythonWrittenShardsStreamTheFoldersSamplesAndPixels) {
  const std::string out = dir_.file("shards");
  python_shards(out, 8, "'train', 'val'");  // 20 samples: shards of 8, 8 and 4
  const DatasetSplits f = folder(), s = shards(out);
  const int64_t n = f.train.size();
  ASSERT_EQ(n, 20);
  ASSERT_EQ(s.train.size(), n);
  EXPECT_EQ(s.test.size(), n);
  EXPECT_EQ(s.train.num_classes, 4) << "labels 0..3 without classes.txt";
  EXPECT_TRUE(torch::equal(s.train.labels, f.train.labels));
  EXPECT_EQ(s.train.files->shards,
            (std::vector<int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2}));
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(s.train.files->read(i), read_file(f.train.files->paths[i])) << i;
  EXPECT_TRUE(test::has(s.train.files->name(3), out + "/train-000000.tar:sample000003."))
      << s.train.files->name(3);
  const Batch a = epoch(f.train, n), b = epoch(s.train, n);
  EXPECT_TRUE(torch::equal(a.labels, b.labels));
  EXPECT_TRUE(torch::equal(a.images, b.images))
      << "max difference " << (a.images - b.images).abs().max().item<float>();
}

TEST_F(ShardDatasetTest, PackedShardsHoldTheFoldersFilesLabelledByClassName) {
  const std::string out = dir_.file("packed");
  PackOptions o;
  o.folder = root_;
  o.out_dir = out;
  o.shard_bytes = 60 << 10;  // several shards
  const PackResult r = pack_image_folder(o);
  EXPECT_EQ(r.samples, 20);
  EXPECT_GE(r.shards.size(), 3u);
  const DatasetSplits f = folder();
  DatasetSpec spec;
  spec.dataset = DatasetId::kShards;
  spec.data_dir = out;
  spec.val_split = 0.25;
  const DatasetSplits s = load_dataset(spec);
  EXPECT_EQ(s.train.size() + s.test.size(), 20);
  EXPECT_EQ(s.test.size(), 5);
  EXPECT_EQ(s.train.class_names, f.train.class_names) << "classes.txt";
  std::map<std::string, int64_t> label_of;  // a file's bytes -> its folder label
  for (int64_t i = 0; i < f.train.size(); ++i)
    label_of[read_file(f.train.files->paths[i])] = f.train.labels[i].item<int64_t>();
  std::map<std::string, int64_t> packed;
  for (const Dataset* d : {&s.train, &s.test})
    for (int64_t i = 0; i < d->size(); ++i)
      packed[d->files->read(i)] = d->labels[i].item<int64_t>();
  EXPECT_EQ(packed, label_of) << "every file once, with its class";
  // Packing again with fewer, larger shards replaces the old set whole.
  o.shard_bytes = int64_t{1} << 30;
  EXPECT_EQ(pack_image_folder(o).shards.size(), 1u);
  size_t tars = 0;
  for (const auto& e : fs::directory_iterator(out)) tars += e.path().extension() == ".tar";
  EXPECT_EQ(tars, 1u) << "no shard of the older set stays behind";
  size_t indexes = 0;
  for (const auto& e : fs::directory_iterator(out)) indexes += e.path().extension() == ".idx";
  EXPECT_EQ(indexes, 1u) << "nor an index of one";
}

// `ddpx data pack` writes SHARD.tar.idx beside each shard, holding what listing the tar gives;
// a start reads it instead of the tar's headers (an index edited by hand is what the samples
// follow), and an index older than its tar, of another size, or damaged is passed over for the
// tar's own listing.
TEST_F(ShardDatasetTest, PackWritesAnIndexBesideEachShardThatAStartReadsWhileItIsCurrent) {
  const std::string out = dir_.file("packed");
  PackOptions o;
  o.folder = root_;
  o.out_dir = out;
  o.shard_bytes = 60 << 10;
  const PackResult r = pack_image_folder(o);
  ASSERT_GE(r.shards.size(), 3u);
  for (const std::string& tar : r.shards) {
    ASSERT_TRUE(fs::exists(io::tar_index_path(tar))) << tar;
    const auto indexed = io::read_tar_index(tar);
    ASSERT_TRUE(indexed.has_value()) << tar;
    const auto listed = io::list_tar(tar);
    ASSERT_EQ(indexed->size(), listed.size()) << tar;
    for (size_t k = 0; k < listed.size(); ++k) {
      EXPECT_EQ((*indexed)[k].name, listed[k].name);
      EXPECT_EQ((*indexed)[k].offset, listed[k].offset);
      EXPECT_EQ((*indexed)[k].size, listed[k].size);
      EXPECT_EQ((*indexed)[k].data, listed[k].data);
    }
  }
  // The index is what a start reads: a label changed in it (the first sample's `.cls`, hex of
  // its digits) is the label the sample gets.
  const std::string tar = r.shards[0];
  std::string text = read_file(io::tar_index_path(tar));
  const auto listed = io::list_tar(tar);
  ASSERT_EQ(listed[1].name.substr(listed[1].name.size() - 4), ".cls");
  const std::string label_hex =
      fmt::format("{:02x}", static_cast<unsigned char>(listed[1].data[0]));
  const std::string other = listed[1].data == "0" ? "31" : "30";  // "1" or "0"
  const std::string line = fmt::format("{} 1 {} {}", listed[1].offset, label_hex, listed[1].name);
  ASSERT_NE(text.find(line), std::string::npos) << text;
  text.replace(text.find(line), line.size(),
               fmt::format("{} 1 {} {}", listed[1].offset, other, listed[1].name));
  write_file_atomic(io::tar_index_path(tar), text);
  auto first_label = [&] {
    DatasetSpec spec;
    spec.dataset = DatasetId::kShards;
    spec.data_dir = out;
    spec.val_dir = out;  // every sample in training order: the first shard's first sample first
    return load_dataset(spec).train.labels[0].item<int64_t>();
  };
  const int64_t packed = std::stoll(listed[1].data);
  EXPECT_EQ(first_label(), packed == 0 ? 1 : 0) << "the label the index says";
  // A tar newer than its index: listed again, the packed label back.
  fs::last_write_time(tar, fs::last_write_time(io::tar_index_path(tar)) + std::chrono::seconds(2));
  EXPECT_FALSE(io::read_tar_index(tar).has_value());
  EXPECT_EQ(first_label(), packed);
  // A damaged index: the same.
  write_file_atomic(io::tar_index_path(tar), "ddpx-tar-index 1 12\n7 x");
  EXPECT_FALSE(io::read_tar_index(tar).has_value());
  EXPECT_EQ(first_label(), packed);
}

TEST_F(ShardDatasetTest, ASampleWithoutALabelOrOutsideTheClassesIsRefusedByName) {
  const std::string out = dir_.file("bad");
  PackOptions o;
  o.folder = root_;
  o.out_dir = out;
  pack_image_folder(o);
  auto message = [&] {
    try {
      shards(out);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  write_file_atomic(out + "/classes.txt", "a\nb\n");
  std::string m = message();
  EXPECT_TRUE(test::has(m, out + "/train-000000.tar:000000")) << m;
  EXPECT_TRUE(test::has(m, " but " + out + "/classes.txt names 2 classes")) << m;
  fs::remove(out + "/classes.txt");
  auto r = test::run_python(R"(
import io, tarfile
with tarfile.open(")" + out +
                            R"(/train-000000.tar", "w") as t:
    i = tarfile.TarInfo("k1.jpg"); i.size = 3; t.addfile(i, io.BytesIO(b"abc"))
)");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  m = message();
  EXPECT_TRUE(test::has(m, out + "/train-000000.tar:k1: a sample without a .cls label")) << m;
  fs::remove(out + "/train-000000.tar");
  m = message();
  EXPECT_TRUE(test::has(m, out + ": no tar shard (train-000000.tar, ...)")) << m;
  EXPECT_TRUE(test::has(m, "ddpx data pack")) << m;
}

TEST(ShardPackTest, ShardSizesParseAsBytesOrWithAUnit) {
  EXPECT_EQ(parse_byte_size("1G", "--shard_size"), int64_t{1} << 30);
  EXPECT_EQ(parse_byte_size("256M", "--shard_size"), int64_t{256} << 20);
  EXPECT_EQ(parse_byte_size("64KB", "--shard_size"), int64_t{64} << 10);
  EXPECT_EQ(parse_byte_size("5000", "--shard_size"), 5000);
  const std::string m = test::usage_error([] { parse_byte_size("lots", "--shard_size"); });
  EXPECT_TRUE(test::has(m, "--shard_size lots: expected a size in bytes")) << m;
}

}  // namespace
}  // namespace ddpx::data
