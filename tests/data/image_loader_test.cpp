// An image folder streamed through the DataLoader: batches identical whatever the loader thread
// count and batch boundaries (each sample's crop and flip come from (seed, epoch, sample)), a
// resumed epoch's batches equal to the rest of the whole epoch, labels from the folder (the
// validation folder's taken by class name), and the bad cases named: an unreadable file at start,
// a file that vanished since indexing; with --bad_images skip left out, or stood in for by the
// next sample in a batch, and counted.
#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/image_dataset.h"
#include "data/image_source.h"
#include "data/loader.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;

class ImageLoaderTest : public ::testing::Test {
 protected:
  DatasetSplits load(double val_split = 0.25) {
    DatasetSpec spec;
    spec.dataset = DatasetId::kImageFolder;
    spec.data_dir = root_;
    spec.val_split = val_split;
    return load_dataset(spec);
  }
  static LoaderOptions options(bool train, int workers, int64_t batch) {
    LoaderOptions o;
    o.batch_size = batch;
    o.num_workers = workers;
    o.seed = 11;
    o.transform.image_size = 24;
    o.transform.random_resized_crop = train;
    o.transform.horizontal_flip = train;
    o.transform.normalize = Normalize::kImagenet;
    return o;
  }
  // The epoch's batches, images and labels each concatenated.
  static Batch epoch(const Dataset& d, const LoaderOptions& o, std::vector<int64_t> order,
                     int64_t e, int64_t first = 0) {
    DataLoader loader(d, o);
    loader.start_epoch(std::move(order), e, first);
    std::vector<torch::Tensor> images, labels;
    while (auto b = loader.next()) {
      images.push_back(b->images);
      labels.push_back(b->labels);
    }
    return {torch::cat(images), torch::cat(labels)};
  }
  test::PhotoFolder dir_{6};
  const std::string root_ = dir_.root();
};

std::vector<int64_t> shuffled(int64_t n, uint64_t seed) {
  std::vector<int64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  return v;
}

TEST_F(ImageLoaderTest, SplitsTheFolderAndStreamsIt) {
  const DatasetSplits s = load();
  EXPECT_TRUE(s.train.streamed());
  EXPECT_FALSE(s.train.images.defined());  // nothing decoded is held
  EXPECT_EQ(s.train.size(), 18);
  EXPECT_EQ(s.test.size(), 6);
  EXPECT_EQ(s.train.class_names,
            (std::vector<std::string>{"astronaut", "cat", "coffee", "rocket"}));
  EXPECT_EQ(s.train.num_classes, 4);
  EXPECT_FLOAT_EQ(s.mean[0], 0.485f);  // ImageNet's normalisation
  // The held-out files do not depend on anything but the folder.
  EXPECT_TRUE(load().test.files->paths == s.test.files->paths);
  // Train and validation together are the folder, each file once.
  std::vector<std::string> all = s.train.files->paths.to_vector();
  const std::vector<std::string> test_paths = s.test.files->paths.to_vector();
  all.insert(all.end(), test_paths.begin(), test_paths.end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
  EXPECT_EQ(all.size(), 24u);
}

TEST_F(ImageLoaderTest, BatchesDoNotDependOnThreadsOrBatchBoundaries) {
  const DatasetSplits s = load();
  const auto order = shuffled(s.train.size(), 5);
  const Batch inline_one = epoch(s.train, options(true, 0, 4), order, 3);
  ASSERT_EQ(inline_one.images.sizes(), (std::vector<int64_t>{18, 3, 24, 24}));
  EXPECT_TRUE(epoch(s.train, options(true, 1, 4), order, 3).images.equal(inline_one.images));
  EXPECT_TRUE(epoch(s.train, options(true, 3, 4), order, 3).images.equal(inline_one.images));
  EXPECT_TRUE(epoch(s.train, options(true, 2, 7), order, 3).images.equal(inline_one.images));
  EXPECT_TRUE(epoch(s.train, options(true, 2, 7), order, 3).labels.equal(inline_one.labels));
  // Labels are the folder's, in the sampler's order.
  auto idx = torch::tensor(order, torch::kInt64);
  EXPECT_TRUE(inline_one.labels.equal(s.train.labels.index_select(0, idx)));
  // Another epoch draws other crops; evaluation draws none.
  EXPECT_FALSE(epoch(s.train, options(true, 2, 4), order, 4).images.equal(inline_one.images));
  EXPECT_TRUE(epoch(s.train, options(false, 2, 4), order, 3)
                  .images.equal(epoch(s.train, options(false, 1, 5), order, 4).images));
}

TEST_F(ImageLoaderTest, ResumedEpochSeesTheRestOfTheSameEpoch) {
  const DatasetSplits s = load();
  const auto order = shuffled(s.train.size(), 9);
  const Batch whole = epoch(s.train, options(true, 2, 4), order, 2);
  const Batch rest = epoch(s.train, options(true, 2, 4), order, 2, /*first=*/2);
  EXPECT_TRUE(rest.images.equal(whole.images.narrow(0, 8, 10)));
  EXPECT_TRUE(rest.labels.equal(whole.labels.narrow(0, 8, 10)));
}

TEST_F(ImageLoaderTest, ValidationFolderTakesTheTrainingLabelsByName) {
  // imagenet's layout, the validation folder lacking "cat": its "rocket" is still label 3.
  fs::create_directories(dir_.file("in"));
  fs::rename(root_, dir_.file("in/train"));
  fs::create_directories(dir_.file("in/val"));
  for (const char* c : {"astronaut", "coffee", "rocket"})
    fs::copy(dir_.file(std::string("in/train/") + c), dir_.file(std::string("in/val/") + c),
             fs::copy_options::recursive);
  DatasetSpec spec;
  spec.dataset = DatasetId::kImagenet;
  spec.data_dir = dir_.file("in");
  const DatasetSplits s = load_dataset(spec);
  EXPECT_EQ(s.train.size(), 24);
  EXPECT_EQ(s.test.size(), 18);
  for (int64_t i = 0; i < s.test.size(); ++i) {
    const std::string& path = s.test.files->paths[i];
    const int64_t label = s.test.labels[i].item<int64_t>();
    EXPECT_TRUE(test::has(path, "/val/" + s.train.class_names[label] + "/")) << path;
  }
  fs::remove_all(dir_.file("in/val"));
  try {
    load_dataset(spec);
    ADD_FAILURE() << "loaded imagenet without its val folder";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), dir_.file("in/val") + ": no validation folder")) << e.what();
  }
}

TEST_F(ImageLoaderTest, BadFilesAreNamed) {
  const DatasetSplits s = load();
  // A file that vanished after indexing: the batch that needs it names it.
  const std::string gone = s.train.files->paths[2];
  fs::remove(gone);
  DataLoader loader(s.train, options(true, 2, 4));
  loader.start_epoch({0, 1, 2, 3}, 0);
  try {
    loader.next();
    ADD_FAILURE() << "a batch without its file";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), gone)) << e.what();
  }
  // An unreadable file in the folder: refused at start, naming it and `ddpx data info`.
  test::write_bytes(gone, "");
  try {
    load();
    ADD_FAILURE() << "loaded a folder with an empty image";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(test::has(m, "1 of 24 files in " + root_ + " cannot be read")) << m;
    EXPECT_TRUE(test::has(m, gone + ": empty file (0 bytes)")) << m;
    EXPECT_TRUE(test::has(m, "ddpx data info " + root_)) << m;
  }
}

TEST_F(ImageLoaderTest, SkippedBadFilesAreLeftOutOrStoodInForAndCounted) {
  const DatasetSplits s = load();
  // A file that breaks after indexing (its header still good, its data cut): with skip, the
  // batch keeps its size and the next sample stands in, image and label; without, one line
  // names the file and the flag.
  const int64_t broken = 2;
  const std::string path = s.train.files->paths[broken];
  const std::string bytes = read_file(path);
  test::write_bytes(path, bytes.substr(0, bytes.size() / 3));
  LoaderOptions skip = options(true, 2, 4);
  skip.bad_images = BadImages::kSkip;
  const Batch got = epoch(s.train, skip, {0, 1, broken, 3}, 0);
  const Batch want = epoch(s.train, skip, {0, 1, broken + 1, 3}, 0);
  EXPECT_EQ(got.labels.size(0), 4);
  EXPECT_TRUE(got.labels.equal(want.labels));
  EXPECT_TRUE(got.images.equal(want.images));
  ImageSource source(s.train, skip.transform, skip.seed, BadImages::kSkip);
  const int64_t order[] = {broken, broken, 5};
  source.gather(order, 3, 0, 0);
  EXPECT_EQ(source.skipped(), 1) << "a file is counted once";
  try {
    epoch(s.train, options(true, 2, 4), {0, 1, broken, 3}, 0);
    ADD_FAILURE() << "a batch from a cut file";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), path + ": corrupt or truncated")) << e.what();
    EXPECT_TRUE(test::has(e.what(), "or pass --bad_images skip")) << e.what();
  }
  // Unreadable at start: with skip, left out of the split (the others' split unchanged). The
  // file is replaced (removed, written anew), which its folder's time records: one cut in place
  // is found by the batch that reads it, as above.
  fs::remove(path);
  test::write_bytes(path, "");
  DatasetSpec spec;
  spec.dataset = DatasetId::kImageFolder;
  spec.data_dir = root_;
  spec.val_split = 0.25;
  spec.bad_images = BadImages::kSkip;
  const DatasetSplits left = load_dataset(spec);
  EXPECT_EQ(left.train.size() + left.test.size(), 23);
  EXPECT_TRUE(left.test.files->paths == s.test.files->paths ||
              left.train.files->paths.size() == s.train.files->paths.size())
      << "only the bad file goes";
  for (const Dataset* d : {&left.train, &left.test})
    for (const auto& p : d->files->paths.to_vector()) EXPECT_NE(p, path);
  try {
    load();
    ADD_FAILURE() << "loaded a folder with an empty image";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), "or pass --bad_images skip to train without them")) << e.what();
  }
}

}  // namespace
}  // namespace ddpx::data
