// The image folder's listing against torchvision's ImageFolder on the same tree (class order,
// nested files, extensions in any case, hidden and symlinked folders, the errors), and its index:
// cached beside the folder and rescanned when the folder changes.
#include "data/image_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "data/image_index.h"
#include "support/support.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;

void touch(const std::string& path) {
  fs::create_directories(fs::path(path).parent_path());
  test::write_bytes(path, "");
}

// torchvision's ImageFolder(root) for each root (one Python start: importing torchvision takes
// seconds): "classes" then one "label<TAB>path below root" a sample, or "error" and the message.
std::vector<std::string> torchvision_listings(const std::vector<std::string>& roots) {
  std::string list;
  for (const auto& root : roots) list += test::shell_quote(root) + ", ";
  const auto r = test::run_python(
      "import torchvision\n"
      "for root in [" +
      list +
      "]:\n"
      "    try:\n"
      "        d = torchvision.datasets.ImageFolder(root)\n"
      "        print('classes', '|'.join(d.classes))\n"
      "        for path, label in d.samples:\n"
      "            print(label, path[len(root) + 1:], sep='\\t')\n"
      "    except Exception as e:\n"
      "        print('error', type(e).__name__, e)\n"
      "    print('=====')\n");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> out(1);
  for (size_t start = 0, end; (end = r.output.find('\n', start)) != std::string::npos;
       start = end + 1) {
    const std::string line = r.output.substr(start, end - start);
    if (line == "=====")
      out.emplace_back();
    else
      out.back() += line + "\n";
  }
  out.pop_back();
  EXPECT_EQ(out.size(), roots.size()) << r.output;
  out.resize(roots.size());
  return out;
}

std::string ddpx_listing(const std::string& root) {
  std::string out;
  try {
    const FolderListing l = list_image_folder(root);
    out = "classes ";
    for (size_t i = 0; i < l.classes.size(); ++i) out += (i ? "|" : "") + l.classes[i];
    out += "\n";
    for (size_t i = 0; i < l.paths.size(); ++i)
      out += std::to_string(l.labels[i]) + "\t" + l.paths[i].substr(root.size() + 1) + "\n";
  } catch (const Error& e) {
    out = std::string("error ") + e.what() + "\n";
  }
  return out;
}

TEST(ImageFolderTest, ListsWhatTorchvisionsImageFolderLists) {
  test::TempDir dir;
  const std::string root = dir.file("root");
  // Class names that sort differently by bytes and by locale; nested folders whose paths sort
  // around their siblings ("x-y" < "x/y"); extensions in any case; files that are not images.
  for (const char* f : {"b/1.jpg", "b/x/2.JPG", "b/x-y/3.png", "b/x/y/4.jpeg", "b/x/notes.txt",
                        "B/5.Png", "B/sub.jpg/6.webp", "a b/7.tif", "a b/8.TIFF", "a b/.hidden.bmp",
                        ".dot/9.ppm", "_u/10.pgm", "_u/archive.tar", "é/11.jpg", "a b/12.jpg.txt"})
    touch(root + "/" + f);
  fs::create_directories(dir.file("elsewhere/deeper"));
  touch(dir.file("elsewhere/deeper/13.jpg"));
  touch(dir.file("elsewhere/14.png"));
  fs::create_directory_symlink(dir.file("elsewhere"), root + "/linked");   // a class by a link
  fs::create_directory_symlink(dir.file("elsewhere"), root + "/b/inner");  // nested by a link
  fs::create_symlink(dir.file("elsewhere/14.png"), root + "/b/15.jpg");    // a file by a link
  touch(root + "/top.jpg");  // a file beside the classes: not a sample
  const std::string expected = torchvision_listings({root})[0];
  ASSERT_TRUE(test::has(expected, "classes .dot|B|_u|a b|b|linked|é")) << expected;
  EXPECT_EQ(ddpx_listing(root), expected);
}

TEST(ImageFolderTest, RefusesWhatTorchvisionRefuses) {
  test::TempDir dir;
  fs::create_directories(dir.file("none"));
  touch(dir.file("none/loose.jpg"));
  touch(dir.file("empty/cat/1.jpg"));
  touch(dir.file("empty/dog/readme.txt"));
  fs::create_directories(dir.file("empty/eel"));
  const auto theirs = torchvision_listings({dir.file("none"), dir.file("empty")});
  EXPECT_TRUE(test::has(theirs[0], "Couldn't find any class folder")) << theirs[0];
  EXPECT_TRUE(test::has(ddpx_listing(dir.file("none")), "Couldn't find any class folder in"));
  ASSERT_TRUE(test::has(theirs[1],
                        "Found no valid file for the classes dog, eel. Supported "
                        "extensions are: .jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, "
                        ".tiff, .webp"))
      << theirs[1];
  const std::string ours = ddpx_listing(dir.file("empty"));
  EXPECT_TRUE(test::has(ours,
                        "Found no valid file for the classes dog, eel. Supported "
                        "extensions are: .jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, "
                        ".tiff, .webp"))
      << ours;
  EXPECT_TRUE(test::has(ddpx_listing(dir.file("missing")), "no such folder")) << ours;
}

// os.walk(followlinks=True) would never end on a link to its own parent: ddpx names the loop.
TEST(ImageFolderTest, RefusesASymlinkLoop) {
  test::TempDir dir;
  touch(dir.file("root/cat/1.jpg"));
  fs::create_directory_symlink(dir.file("root/cat"), dir.file("root/cat/again"));
  const std::string ours = ddpx_listing(dir.file("root"));
  EXPECT_TRUE(test::has(ours, "root/cat/again: a symlink loop")) << ours;
}

// Every folder below `root` as last changed `ago` before now: a folder changed just before its
// listing is rescanned on principle (a coarse clock may not have moved since), so a test of the
// cache itself starts from folders that are not brand new.
void age_folders(const std::string& root, std::chrono::seconds ago) {
  const auto when = fs::file_time_type::clock::now() - ago;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_directory()) fs::last_write_time(e.path(), when);
}

std::vector<std::string> relative_paths(const FolderListing& l) {
  std::vector<std::string> out;
  for (size_t i = 0; i < l.paths.size(); ++i) out.emplace_back(l.paths.relative(i));
  return out;
}

TEST(ImageFolderTest, UnchangedFolderReusesItsIndexReadingNoFile) {
  test::PhotoFolder dir(6);
  const std::string root = dir.root();
  age_folders(root, std::chrono::hours(1));
  const ImageIndex first = index_image_folder(root, 2);
  EXPECT_FALSE(first.from_cache);
  ASSERT_EQ(first.records.size(), 24u);
  for (const auto& r : first.records) {
    EXPECT_TRUE(r.readable);
    EXPECT_GE(r.height, 48);
    EXPECT_LE(r.height, 120);
    EXPECT_GT(r.bytes, 0);
  }
  EXPECT_TRUE(first.errors.empty());
  EXPECT_TRUE(fs::exists(index_cache_path(root)));

  const ImageIndex second = index_image_folder(root, 1);
  EXPECT_TRUE(second.from_cache);
  EXPECT_EQ(relative_paths(second.listing), relative_paths(first.listing));
  EXPECT_EQ(second.listing.labels, first.listing.labels);
  for (size_t i = 0; i < first.records.size(); ++i) {
    EXPECT_EQ(second.records[i].height, first.records[i].height);
    EXPECT_EQ(second.records[i].width, first.records[i].width);
    EXPECT_EQ(second.records[i].format, first.records[i].format);
    EXPECT_EQ(second.records[i].bytes, first.records[i].bytes);
  }

  // A file rewritten in place under its name changes no folder: the cached start reads the
  // folders' entries, not the files, and keeps its record (the batch that reads it reports it).
  test::write_bytes(first.listing.paths[3], "not an image any more");
  const ImageIndex third = index_image_folder(root, 2);
  EXPECT_TRUE(third.from_cache);
  EXPECT_TRUE(third.records[3].readable);
  EXPECT_EQ(third.records[3].bytes, first.records[3].bytes);
}

TEST(ImageFolderTest, ChangedFolderIsRescanned) {
  test::PhotoFolder dir(6);
  const std::string root = dir.root();
  int64_t step = 0;
  // Indexes after `change`, with every folder's time set apart from the last step's (as if an
  // hour had passed between a change and the start that follows it).
  auto after = [&](const std::function<void()>& change) {
    change();
    age_folders(root, std::chrono::hours(1) - std::chrono::seconds(++step));
    return index_image_folder(root, 2);
  };
  auto unchanged = [&] { return index_image_folder(root, 2); };
  const ImageIndex first = after([] {});
  EXPECT_FALSE(first.from_cache);
  EXPECT_TRUE(unchanged().from_cache);
  const std::string cat = root + "/cat/";
  const std::string some = first.listing.paths[8];
  ASSERT_EQ(some.rfind(cat, 0), 0u) << some;

  const ImageIndex added = after([&] { fs::copy_file(some, cat + "zz-added.jpg"); });
  EXPECT_FALSE(added.from_cache) << "a file added";
  EXPECT_EQ(added.records.size(), 25u);
  EXPECT_TRUE(unchanged().from_cache);

  const ImageIndex renamed = after([&] { fs::rename(cat + "zz-added.jpg", cat + "zz-moved.jpg"); });
  EXPECT_FALSE(renamed.from_cache) << "a file renamed";
  EXPECT_EQ(renamed.records.size(), 25u);
  EXPECT_TRUE(unchanged().from_cache);

  const ImageIndex removed = after([&] { fs::remove(cat + "zz-moved.jpg"); });
  EXPECT_FALSE(removed.from_cache) << "a file removed";
  EXPECT_EQ(removed.records.size(), 24u);

  const ImageIndex nested = after([&] {
    fs::create_directories(cat + "more");
    fs::copy_file(some, cat + "more/1.jpg");
  });
  EXPECT_FALSE(nested.from_cache) << "a file added in a new sub-folder";
  EXPECT_EQ(nested.records.size(), 25u);

  const ImageIndex with_class = after([&] {
    fs::create_directories(root + "/zebra");
    fs::copy_file(some, root + "/zebra/1.jpg");
  });
  EXPECT_FALSE(with_class.from_cache) << "a class added";
  ASSERT_EQ(with_class.listing.classes.size(), 5u);
  EXPECT_EQ(with_class.listing.labels.back(), 4);
  EXPECT_TRUE(unchanged().from_cache);

  const ImageIndex without_class = after([&] { fs::remove_all(root + "/zebra"); });
  EXPECT_FALSE(without_class.from_cache) << "a class removed";
  EXPECT_EQ(without_class.listing.classes.size(), 4u);

  // A file replaced by a broken one under the same name (written beside it, then renamed over
  // it, as rsync and editors do): its folder's time moved, so it is read again and named.
  const std::string victim = first.listing.paths[3];
  const ImageIndex replaced = after([&] {
    test::write_bytes(victim + ".part", "not an image any more");
    fs::rename(victim + ".part", victim);
  });
  EXPECT_FALSE(replaced.from_cache);
  EXPECT_FALSE(replaced.records[3].readable);
  ASSERT_EQ(replaced.errors.count(3), 1u);
  EXPECT_TRUE(test::has(replaced.errors.at(3), victim)) << replaced.errors.at(3);
  // ... and the reason again from the cache, which keeps that the file is unreadable.
  const ImageIndex cached = unchanged();
  EXPECT_TRUE(cached.from_cache);
  ASSERT_EQ(cached.errors.count(3), 1u);
  EXPECT_TRUE(test::has(cached.errors.at(3), "not a JPEG, PNG or WebP")) << cached.errors.at(3);
}

// A folder whose time is not well before its listing (changed in the same clock tick, or here,
// deterministically, dated a minute ahead) is indexed again on every start until it is.
TEST(ImageFolderTest, FolderChangedAsItsListingWasReadIsRescanned) {
  test::PhotoFolder dir(2);
  age_folders(dir.root(), -std::chrono::seconds(60));
  EXPECT_FALSE(index_image_folder(dir.root(), 2).from_cache);
  EXPECT_FALSE(index_image_folder(dir.root(), 2).from_cache);
  age_folders(dir.root(), std::chrono::minutes(5));
  EXPECT_FALSE(index_image_folder(dir.root(), 2).from_cache) << "the times changed";
  EXPECT_TRUE(index_image_folder(dir.root(), 2).from_cache);
}

TEST(ImageFolderTest, DamagedCacheIsIgnored) {
  std::vector<ImageRecord> records(3);
  records[1].height = 7;
  records[1].bytes = int64_t{5} << 32;
  records[2].readable = false;
  const int64_t listed_at = int64_t{1700000000} * 1000000000;
  const int64_t changed = listed_at - 200000000;  // 0.2 s before the listing
  const std::string bytes = format_index_cache(records, 42, listed_at);
  ASSERT_TRUE(parse_index_cache(bytes, 3, 42, changed).has_value());
  EXPECT_EQ(parse_index_cache(bytes, 3, 42, changed)->at(1).height, 7);
  EXPECT_EQ(parse_index_cache(bytes, 3, 42, changed)->at(1).bytes, int64_t{5} << 32);
  EXPECT_FALSE(parse_index_cache(bytes, 3, 42, changed)->at(2).readable);
  EXPECT_FALSE(parse_index_cache(bytes, 3, 43, changed).has_value());        // other listing
  EXPECT_FALSE(parse_index_cache(bytes, 4, 42, changed).has_value());        // other count
  EXPECT_FALSE(parse_index_cache(bytes, 3, 42, listed_at - 5).has_value());  // just before
  EXPECT_FALSE(parse_index_cache(bytes.substr(0, 40), 3, 42, changed).has_value());  // cut
  EXPECT_FALSE(parse_index_cache("DDPXIDX1" + bytes.substr(8), 3, 42, changed).has_value());
}

}  // namespace
}  // namespace ddpx::data
