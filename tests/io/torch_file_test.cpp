// read_state_dict_bytes on damaged torch.save files: every fuzz finding (fuzz/regressions/) and
// hand-made damage that libtorch's unpickler would not notice ends in one kData error; the
// seeds written by Python (fuzz/corpus/state_dict/) read back with the values Python saved.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/error.h"
#include "models/weights.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The error text of reading `bytes`, or "" (and a test failure) when it was accepted.
std::string torch_file_rejection(const std::string& bytes) {
  try {
    models::read_state_dict_bytes(bytes, "damaged.pth");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData) << e.what();
    EXPECT_NE(std::string(e.what()).find("damaged.pth"), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "damaged bytes were accepted";
  return "";
}

std::string replaced(std::string bytes, const std::string& from, const std::string& to) {
  size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << "pattern not in the seed";
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

const std::string kPlainDict = "/fuzz/corpus/state_dict/plain_dict.pth";

TEST(TorchFileTest, SeedsFromPythonReadBack) {
  auto tensors =
      models::read_state_dict_bytes(slurp(test::source_dir() + kPlainDict), "plain_dict.pth");
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(tensors.at("w"), torch::arange(6, torch::kFloat32).reshape({2, 3})));
  auto views = models::read_state_dict_bytes(
      slurp(test::source_dir() + "/fuzz/corpus/state_dict/shared_storage_views.pth"), "v.pth");
  auto base = torch::arange(12, torch::kFloat64);
  EXPECT_TRUE(torch::equal(views.at("a"), base.slice(0, 2, 8).view({2, 3})));
  EXPECT_TRUE(torch::equal(views.at("b"), base.view({3, 4}).t()));
}

TEST(TorchFileTest, EveryFuzzFindingIsAClearError) {
  int files = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(test::source_dir() + "/fuzz/regressions/state_dict")) {
    SCOPED_TRACE(entry.path().string());
    torch_file_rejection(slurp(entry.path().string()));
    ++files;
  }
  EXPECT_GE(files, 2);
}

// A length that claims 4 GB allocates nothing: it is checked against the bytes left first.
TEST(TorchFileTest, StringLongerThanTheFileIsTruncatedNotAllocated) {
  std::string bytes =
      replaced(slurp(test::source_dir() + kPlainDict), std::string("X\x07\x00\x00\x00storage", 12),
               std::string("X\xff\xff\xff\xffstorage", 12));
  EXPECT_NE(torch_file_rejection(bytes).find("truncated"), std::string::npos);
}

// libtorch takes sizes, strides and the element count from the pickle unchecked; reading such
// a tensor would read past its memory.
TEST(TorchFileTest, TensorBeyondItsStorageIsRefused) {
  const std::string seed = slurp(test::source_dir() + kPlainDict);
  // "w" is 2x3 over 6 floats; make it 2x4.
  std::string wider = replaced(seed, "K\x02K\x03\x86", "K\x02K\x04\x86");
  EXPECT_NE(torch_file_rejection(wider).find("reaches past the end of its storage"),
            std::string::npos);
  // Its storage claims 96 floats while the record holds 6.
  std::string more = replaced(seed, "cpuq\x06K\x06t", "cpuq\x06K\x60t");
  EXPECT_NE(torch_file_rejection(more).find("claims more storage than its record holds"),
            std::string::npos);
}

TEST(TorchFileTest, StackUnderflowAndUnknownGlobalsAreRefusedBeforeLibtorch) {
  const std::string seed = slurp(test::source_dir() + kPlainDict);
  // MARK then TUPLE1: it would pop past the mark (libtorch reads before its stack's start).
  const std::string first_key("}q\x00(X\x01\x00\x00\x00w", 10);
  const std::string underflow("}q\x00(\x85\x01\x00\x00\x00w", 10);
  EXPECT_NE(torch_file_rejection(replaced(seed, first_key, underflow)).find("underflow"),
            std::string::npos);
  // A global that is no tensor, storage or OrderedDict (same length, so the zip stays valid).
  EXPECT_NE(torch_file_rejection(replaced(seed, "ctorch\nFloatStorage", "cos\nsystem_________"))
                .find("global os.system"),
            std::string::npos);
  // Quantized storages: libtorch rebuilds them without a quantizer (found by fuzz_state_dict).
  EXPECT_NE(
      torch_file_rejection(replaced(seed, "FloatStorage", "QInt8Storage")).find("QInt8Storage"),
      std::string::npos);
}

// Past 4 GB (a big checkpoint), the end record's fields saturate and the zip64 end record
// holds them: the same seed with saturated fields reads the same.
TEST(TorchFileTest, Zip64EndRecordIsFollowed) {
  std::string bytes = slurp(test::source_dir() + kPlainDict);
  const size_t end = bytes.rfind(std::string("PK\x05\x06", 4));
  ASSERT_NE(end, std::string::npos);
  bytes.replace(end + 8, 4, std::string("\xff\xff\xff\xff", 4));  // entries
  bytes.replace(end + 12, 8, std::string(8, '\xff'));             // size, offset
  auto tensors = models::read_state_dict_bytes(bytes, "zip64.pth");
  EXPECT_TRUE(torch::equal(tensors.at("w"), torch::arange(6, torch::kFloat32).reshape({2, 3})));
}

TEST(TorchFileTest, TruncatedAndNonZipFilesAreRefused) {
  const std::string seed = slurp(test::source_dir() + kPlainDict);
  for (size_t keep : {size_t(0), size_t(10), seed.size() / 2, seed.size() - 1}) {
    SCOPED_TRACE(keep);
    torch_file_rejection(seed.substr(0, keep));
  }
  EXPECT_NE(torch_file_rejection("PK\x03\x04 not really a zip").find("not a torch zip archive"),
            std::string::npos);
}

}  // namespace
}  // namespace ddpx::io
