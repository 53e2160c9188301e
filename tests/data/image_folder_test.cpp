// The image folder's listing against torchvision's ImageFolder on the same tree (class order,
// nested files, extensions in any case, hidden and symlinked folders, the errors), and its index:
// cached beside the folder and rescanned when the folder changes.
#include "data/image_folder.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

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

TEST(ImageFolderTest, IndexIsCachedAndRescannedWhenTheFolderChanges) {
  test::PhotoFolder dir(6);
  const std::string root = dir.root();
  const ImageIndex first = index_image_folder(root, 2);
  EXPECT_FALSE(first.from_cache);
  ASSERT_EQ(first.records.size(), 24u);
  for (const auto& r : first.records) {
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_GE(r.height, 48);
    EXPECT_LE(r.height, 120);
    EXPECT_GT(r.bytes, 0);
  }
  EXPECT_TRUE(fs::exists(index_cache_path(root)));

  const ImageIndex second = index_image_folder(root, 1);
  EXPECT_TRUE(second.from_cache);
  for (size_t i = 0; i < first.records.size(); ++i) {
    EXPECT_EQ(second.records[i].height, first.records[i].height);
    EXPECT_EQ(second.records[i].width, first.records[i].width);
    EXPECT_EQ(second.records[i].format, first.records[i].format);
  }

  // A file replaced by a broken one: rescanned, the file named with its reason.
  const std::string victim = first.listing.paths[3];
  test::write_bytes(victim, "not an image any more");
  const ImageIndex third = index_image_folder(root, 2);
  EXPECT_FALSE(third.from_cache);
  EXPECT_TRUE(test::has(third.records[3].error, victim)) << third.records[3].error;
  // ... and the reason again from the cache, which keeps that the file is unreadable.
  const ImageIndex fourth = index_image_folder(root, 2);
  EXPECT_TRUE(fourth.from_cache);
  EXPECT_TRUE(test::has(fourth.records[3].error, "not a JPEG, PNG or WebP"))
      << fourth.records[3].error;

  fs::remove(first.listing.paths[5]);  // a file removed
  EXPECT_EQ(index_image_folder(root, 2).records.size(), 23u);
}

TEST(ImageFolderTest, DamagedCacheIsIgnored) {
  std::vector<ImageRecord> records(3);
  records[1].height = 7;
  records[2].error = "bad";
  const std::string bytes = format_index_cache(records, 42);
  ASSERT_TRUE(parse_index_cache(bytes, 3, 42).has_value());
  EXPECT_EQ(parse_index_cache(bytes, 3, 42)->at(1).height, 7);
  EXPECT_FALSE(parse_index_cache(bytes, 3, 43).has_value());                // other listing
  EXPECT_FALSE(parse_index_cache(bytes, 4, 42).has_value());                // other count
  EXPECT_FALSE(parse_index_cache(bytes.substr(0, 30), 3, 42).has_value());  // cut
  EXPECT_FALSE(parse_index_cache("DDPXIDX0" + bytes.substr(8), 3, 42).has_value());  // version
}

}  // namespace
}  // namespace ddpx::data
