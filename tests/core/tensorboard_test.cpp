// TensorBoardWriter: the files it writes are read back by TensorBoard itself (its
// EventAccumulator, plus a strict pass over the TFRecord checksums, which the accumulator
// would skip with only a warning), and a directory it cannot use is a usage error naming it.
#include "core/tensorboard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/support.h"

namespace ddpx {
namespace {

using Points = std::vector<std::pair<int64_t, double>>;

// Given LOG_DIR, prints "records N" after checking every record's framing and checksums, then one
// "scalar TAG STEP VALUE" line per point TensorBoard sees.
constexpr char kReadBackScript[] = R"(
import glob, struct
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

(path,) = glob.glob(LOG_DIR + "/events.out.tfevents.*")
data = open(path, "rb").read()
offset = records = 0
while offset < len(data):
    header = data[offset:offset + 8]
    (length,) = struct.unpack("<Q", header)
    (header_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
    assert header_crc == masked_crc32c(header), "length checksum of record %d" % records
    payload = data[offset + 12:offset + 12 + length]
    assert len(payload) == length, "record %d is truncated" % records
    (payload_crc,) = struct.unpack("<I", data[offset + 12 + length:offset + 16 + length])
    assert payload_crc == masked_crc32c(payload), "payload checksum of record %d" % records
    offset += 16 + length
    records += 1
print("records", records)

accumulator = EventAccumulator(LOG_DIR)
accumulator.Reload()
for tag in sorted(accumulator.Tags()["scalars"]):
    for event in accumulator.Scalars(tag):
        print("scalar", tag, event.step, repr(event.value))
)";

TEST(TensorBoardWriterTest, Crc32cMatchesCastagnoliCheckValue) {
  EXPECT_EQ(detail::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(detail::crc32c("", 0), 0u);
}

TEST(TensorBoardWriterTest, TensorBoardReadsBackScalars) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("tensorboard"))
      << "the build's Python lacks tensorboard; run scripts/python-env --tests";
  test::TempDir dir;
  std::string log_dir = dir.file("runs/first");  // the writer creates the parents
  {
    TensorBoardWriter writer(log_dir);
    writer.add_scalar("loss/train", 2.25, 0);
    writer.add_scalar("loss/train", 1.5, 1);
    writer.add_scalars(2, {{"loss/train", 0.9}, {"accuracy/test", 0.8125}});
    std::string name = std::filesystem::path(writer.path()).filename().string();
    EXPECT_EQ(name.rfind("events.out.tfevents.", 0), 0u) << name;
    EXPECT_NE(name.find("." + std::to_string(::getpid()) + "."), std::string::npos) << name;
  }

  std::string script =
      "LOG_DIR = '" + log_dir + "'\n" + kReadBackScript;  // no quotes in TempDir paths
  test::CommandResult result = test::run_python(script);
  ASSERT_EQ(result.exit_code, 0) << result.output;

  int records = -1;
  std::map<std::string, Points> scalars;
  std::istringstream lines(result.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string kind, tag;
    int64_t step = 0;
    double value = 0;
    words >> kind;
    if (kind == "records") {
      words >> records;
    } else if (kind == "scalar" && words >> tag >> step >> value) {
      scalars[tag].emplace_back(step, value);
    }
  }
  EXPECT_EQ(records, 4) << "the file-version record and three scalar events\n" << result.output;

  std::map<std::string, Points> expected = {
      {"accuracy/test", {{2, 0.8125}}},
      {"loss/train", {{0, 2.25}, {1, 1.5}, {2, 0.9}}},
  };
  ASSERT_EQ(scalars.size(), expected.size()) << result.output;
  for (const auto& [tag, points] : expected) {
    ASSERT_EQ(scalars[tag].size(), points.size()) << tag << "\n" << result.output;
    for (size_t i = 0; i < points.size(); ++i) {
      EXPECT_EQ(scalars[tag][i].first, points[i].first) << tag;
      EXPECT_NEAR(scalars[tag][i].second, points[i].second, 1e-6) << tag;  // stored as float
    }
  }
}

TEST(TensorBoardWriterTest, UnusableDirectoryIsUsageErrorNamingIt) {
  test::TempDir dir;
  std::string plain_file = dir.file("not_a_directory");
  test::write_bytes(plain_file, "x");
  std::string log_dir = plain_file + "/runs";
  std::string message = test::usage_error([&] { TensorBoardWriter writer(log_dir); });
  EXPECT_NE(message.find(log_dir), std::string::npos) << message;
  EXPECT_NE(message.find("writable directory"), std::string::npos) << message;
}

}  // namespace
}  // namespace ddpx
