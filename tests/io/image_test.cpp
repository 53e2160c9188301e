// The JPEG, PNG and WebP decoders on real photographs (scikit-image's, re-encoded by cjpeg and PIL
// at test time: tests/support/make_image_fixture.py) against PIL's decode of the same files, and
// every kind of bad file refused with one line naming it.
#include "io/image.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/webp.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

class ImageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    test::make_image_fixture(dir_->path(), "--only formats --only bad");
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string formats(const std::string& name) { return dir_->path() + "/formats/" + name; }
  static std::string bad(const std::string& name) { return dir_->path() + "/bad/" + name; }
  static test::TempDir* dir_;
};
test::TempDir* ImageTest::dir_ = nullptr;

struct Row {
  std::string name, file, what;
  int64_t width = 0, height = 0;
};

std::vector<Row> manifest(const std::string& path) {
  std::ifstream in(path);
  std::vector<Row> rows;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Row r;
    std::string w, h;
    std::getline(fields, r.name, '\t');
    std::getline(fields, r.file, '\t');
    std::getline(fields, w, '\t');
    std::getline(fields, h, '\t');
    std::getline(fields, r.what);
    r.width = std::stoll(w);
    r.height = std::stoll(h);
    rows.push_back(r);
  }
  return rows;
}

bool is_webp(const Row& r) {
  return r.file.size() > 5 && r.file.substr(r.file.size() - 5) == ".webp";
}

// A WebP file in a build without libwebp (optional): said once, left out.
bool skip_webp(const Row& r) {
  if (!is_webp(r) || webp_available()) return false;
  static bool said = false;
  if (!said) std::printf("this build has no libwebp: the WebP files are left out\n");
  said = true;
  return true;
}

// libjpeg-turbo 2.1 (Debian's) and the one in Pillow's wheel run the same ISLOW IDCT and fancy
// upsampling: the JPEG pixels are expected identical, as the PNG ones.
TEST_F(ImageTest, DecodesEveryFormatAsPilDoes) {
  const auto rows = manifest(formats("manifest.tsv"));
  ASSERT_GE(rows.size(), 20u);
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name + ": " + r.what);
    if (skip_webp(r)) continue;
    const torch::Tensor image = read_image(formats(r.file));
    ASSERT_EQ(image.sizes(), (std::vector<int64_t>{r.height, r.width, 3}));
    const std::string ref = read_file(formats(r.name + ".rgb"));
    ASSERT_EQ(static_cast<int64_t>(ref.size()), r.height * r.width * 3);
    auto expected =
        torch::from_blob(const_cast<char*>(ref.data()), {r.height, r.width, 3}, torch::kUInt8);
    const auto diff = (image.to(torch::kInt32) - expected.to(torch::kInt32)).abs();
    EXPECT_EQ(diff.max().item<int>(), 0)
        << "max difference " << diff.max().item<int>() << ", " << diff.gt(0).sum().item<int64_t>()
        << " of " << diff.numel() << " samples differ";
  }
}

TEST_F(ImageTest, HeaderGivesTheSizeWithoutDecoding) {
  for (const auto& r : manifest(formats("manifest.tsv"))) {
    if (skip_webp(r)) continue;
    const std::string bytes = read_file(formats(r.file));
    const ImageInfo info = read_image_info(bytes.substr(0, kImageHeaderBytes), r.file);
    EXPECT_EQ(info.width, r.width) << r.name;
    EXPECT_EQ(info.height, r.height) << r.name;
    const ImageFormat format = is_webp(r)                                   ? ImageFormat::kWebp
                               : r.file.substr(r.file.size() - 4) == ".png" ? ImageFormat::kPng
                                                                            : ImageFormat::kJpeg;
    EXPECT_EQ(info.format, format) << r.name;
  }
}

TEST_F(ImageTest, FormatComesFromTheBytesNotTheName) {
  const std::string png = read_file(formats("pil_rgb.png"));
  EXPECT_EQ(detect_image_format(png), ImageFormat::kPng);
  const torch::Tensor image = decode_image(png, "photo.jpg");  // a PNG named .jpg decodes
  EXPECT_EQ(image.size(0), 131);
  EXPECT_EQ(detect_image_format(read_file(formats("cjpeg_q90_2x2.jpg"))), ImageFormat::kJpeg);
}

// One line (ddpx::Error, kData) naming the file and saying what is wrong.
void expect_refused(const std::string& path, const std::string& says) {
  SCOPED_TRACE(path);
  try {
    read_image(path);
    ADD_FAILURE() << "decoded a bad file";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kData) << message;
    EXPECT_TRUE(test::has(message, path)) << message;
    EXPECT_TRUE(test::has(message, says)) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(ImageTest, BadFilesAreRefusedWithOneLineNamingThem) {
  expect_refused(bad("truncated.jpg"), "corrupt or truncated JPEG (Premature end of JPEG file)");
  expect_refused(bad("truncated_header.jpg"), "corrupt or truncated JPEG");
  expect_refused(bad("truncated.png"), "corrupt or truncated PNG");
  expect_refused(bad("bad_crc.png"), "corrupt or truncated PNG");
  if (webp_available())
    expect_refused(bad("truncated.webp"), "corrupt or truncated WebP");
  else
    expect_refused(bad("truncated.webp"), "install libwebp-dev");
  expect_refused(bad("empty.jpg"), "empty file (0 bytes)");
  expect_refused(bad("text.jpg"), "not a JPEG, PNG or WebP image");
  expect_refused(bad("gif.jpg"), "a gif image, which ddpx does not decode");
}

// At scale 1 a JPEG region is the full decode's crop: the same rows, and the same columns
// although libjpeg-turbo decodes only the iMCU columns around them (its fancy upsampling reads
// the neighbours it keeps). Other formats are cropped from the full decode.
TEST_F(ImageTest, RegionAtScaleOneIsTheFullDecodesCrop) {
  for (const auto& r : manifest(formats("manifest.tsv"))) {
    SCOPED_TRACE(r.name + ": " + r.what);
    if (skip_webp(r)) continue;
    const std::string bytes = read_file(formats(r.file));
    const torch::Tensor full = decode_image(bytes, r.file);
    for (const ImageRegion region :
         {ImageRegion{0, 0, r.height, r.width}, ImageRegion{17, 9, r.height / 2, r.width / 3},
          ImageRegion{r.height - 21, r.width - 40, 21, 40}, ImageRegion{33, 50, 1, 1}}) {
      const DecodedRegion got = decode_image_region(bytes, r.file, region);
      EXPECT_EQ(got.scale, 1);
      const auto want = full.slice(0, region.top, region.top + region.height)
                            .slice(1, region.left, region.left + region.width);
      ASSERT_EQ(got.pixels.sizes(), want.sizes()) << region.top << " " << region.left;
      const int max =
          (got.pixels.to(torch::kInt32) - want.to(torch::kInt32)).abs().max().item<int>();
      EXPECT_EQ(max, 0) << "region " << region.width << "x" << region.height << " at ("
                        << region.left << ", " << region.top << "): max difference " << max;
    }
  }
}

// At 1/2, 1/4 and 1/8 the region has the scaled size (its sides rounded), and its pixels are
// the full decode's averaged over scale x scale blocks, give or take the smaller IDCT's own error.
TEST_F(ImageTest, ScaledRegionIsTheDownscaledCrop) {
  const std::string path = formats("skimage_rocket.jpg");  // 640x427, as scikit-image ships it
  const std::string bytes = read_file(path);
  const torch::Tensor full =
      decode_image(bytes, path).permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat32);
  for (int scale : {2, 4, 8}) {
    SCOPED_TRACE("scale 1/" + std::to_string(scale));
    const ImageRegion region{64, 128, 320, 400, scale};
    const DecodedRegion got = decode_image_region(bytes, path, region);
    EXPECT_EQ(got.scale, scale);
    ASSERT_EQ(got.pixels.sizes(), (std::vector<int64_t>{320 / scale, 400 / scale, 3}));
    const auto pooled = torch::avg_pool2d(full, scale).squeeze(0).permute({1, 2, 0});
    const auto want =
        pooled.slice(0, 64 / scale, (64 + 320) / scale).slice(1, 128 / scale, (128 + 400) / scale);
    const auto diff = (got.pixels.to(torch::kFloat32) - want).abs();
    EXPECT_LT(diff.mean().item<double>(), 2.0) << "max " << diff.max().item<double>();
  }
}

// A region decode still reads the whole file when it does not end as a JPEG does: a cut file
// fails even when the crop lies above the cut.
TEST_F(ImageTest, RegionOfACutFileFails) {
  const std::string bytes = read_file(formats("cjpeg_q90_2x2.jpg"));
  const std::string cut = bytes.substr(0, bytes.size() * 2 / 3);
  try {
    decode_image_region(cut, "cut.jpg", ImageRegion{0, 0, 8, 8});
    ADD_FAILURE() << "decoded the top of a cut file";
  } catch (const Error& e) {
    EXPECT_TRUE(test::has(e.what(), "cut.jpg: corrupt or truncated JPEG")) << e.what();
  }
}

// The pixel limit is checked on the header, before libjpeg or libpng allocate any row: a header
// claiming 100000x100000 (30 GB of RGB) is refused at once, as one claiming 60000x60000 (JPEG's
// sides stop at 65535).
TEST_F(ImageTest, HugeHeadersAreRefusedBeforeAnyAllocation) {
  expect_refused(bad("huge.png"), "100000x100000 = 10000000000 pixels, over the limit");
  expect_refused(bad("huge.jpg"), "60000x60000 = 3600000000 pixels, over the limit");
  EXPECT_THROW(read_image_info(read_file(bad("huge.png")), "huge.png"), Error);
  // And any limit given: the 173x131 photo is over 20000 pixels.
  EXPECT_THROW(read_image(formats("cjpeg_q90_2x2.jpg"), 20000), Error);
  EXPECT_THROW(read_image(formats("pil_rgb.png"), 20000), Error);
  EXPECT_NO_THROW(read_image(formats("pil_rgb.png"), 173 * 131));
}

}  // namespace
}  // namespace ddpx::io
