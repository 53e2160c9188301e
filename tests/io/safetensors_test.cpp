// io/safetensors against the real safetensors package (PyPI `safetensors`): its files read here
// with equal tensors, ddpx's files read by safetensors.torch.load_file and byte for byte the ones
// it writes, and headers that lie (offsets past the end, overlaps, a wrong byte count, a dtype
// ddpx does not hold, a header of gigabytes, ...) each refused with one line naming the file.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io {
namespace {

// The same tensors in C++ and in Python (kPythonTensors): every dtype ddpx holds, a scalar, an
// empty tensor, odd byte counts that misalign whatever follows them.
std::map<std::string, torch::Tensor> sample_tensors() {
  auto f32 = torch::kFloat32;
  return {
      {"a.f32", (torch::arange(12, f32) * 0.37).sin().reshape({3, 4})},
      {"b.f16", (torch::arange(5, f32) * 1.3 - 2).to(torch::kHalf)},
      {"c.bf16", (torch::arange(6, f32) / 3).reshape({2, 3}).to(torch::kBFloat16)},
      {"d.f64", (torch::arange(8, torch::kFloat64) / 7).reshape({2, 2, 2})},
      {"e.i64", torch::arange(4, torch::kInt64) * 3000000000LL - 5},
      {"f.i32", torch::arange(6, torch::kInt32).reshape({3, 2}) - 3},
      {"g.i16", torch::arange(3, torch::kInt16) * -1000},
      {"h.i8", torch::arange(7, torch::kInt8) - 3},
      {"i.u8", torch::arange(3, torch::kUInt8) + 250},
      {"j.bool", torch::tensor({true, false, true})},
      {"k.scalar", torch::tensor(2.5)},
      {"l.empty", torch::zeros({0, 3})},
  };
}

const char* kPythonTensors = R"(
import torch
f32 = torch.float32
tensors = {
    "a.f32": (torch.arange(12, dtype=f32) * 0.37).sin().reshape(3, 4),
    "b.f16": (torch.arange(5, dtype=f32) * 1.3 - 2).half(),
    "c.bf16": (torch.arange(6, dtype=f32) / 3).reshape(2, 3).bfloat16(),
    "d.f64": (torch.arange(8, dtype=torch.float64) / 7).reshape(2, 2, 2),
    "e.i64": torch.arange(4, dtype=torch.int64) * 3000000000 - 5,
    "f.i32": torch.arange(6, dtype=torch.int32).reshape(3, 2) - 3,
    "g.i16": torch.arange(3, dtype=torch.int16) * -1000,
    "h.i8": torch.arange(7, dtype=torch.int8) - 3,
    "i.u8": torch.arange(3, dtype=torch.uint8) + 250,
    "j.bool": torch.tensor([True, False, True]),
    "k.scalar": torch.tensor(2.5),
    "l.empty": torch.zeros(0, 3),
}
metadata = {"note": "caf\u00e9 \"quoted\""}
)";

// One key: the library keeps metadata in a hash map, so the order of several keys is its own.
const std::map<std::string, std::string> kMetadata = {{"note", "caf\u00e9 \"quoted\""}};

void expect_same_tensors(const std::map<std::string, torch::Tensor>& got) {
  auto want = sample_tensors();
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, tensor] : want) {
    SCOPED_TRACE(name);
    ASSERT_EQ(got.count(name), 1u);
    const torch::Tensor& t = got.at(name);
    EXPECT_EQ(t.scalar_type(), tensor.scalar_type());
    EXPECT_EQ(t.sizes(), tensor.sizes());
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_TRUE(torch::equal(t, tensor));
  }
}

void require_safetensors() {
  ASSERT_TRUE(test::python_has_module("safetensors"))
      << test::python_binary() << " lacks the safetensors package: run scripts/python-env --tests";
}

TEST(SafetensorsTest, ReadsWhatThePythonLibraryWrites) {
  require_safetensors();
  test::TempDir dir;
  const std::string path = dir.file("python.safetensors");
  auto written = test::run_python(std::string(kPythonTensors) +
                                  "from safetensors.torch import save_file\n"
                                  "save_file(tensors, '" +
                                  path + "', metadata=metadata)\n");
  ASSERT_EQ(written.exit_code, 0) << written.output;
  Safetensors mapped = read_safetensors(path);
  expect_same_tensors(mapped.tensors);
  EXPECT_EQ(mapped.metadata, kMetadata);
  Safetensors copied = parse_safetensors(read_file(path), path);
  expect_same_tensors(copied.tensors);
  EXPECT_EQ(copied.metadata, kMetadata);
}

TEST(SafetensorsTest, PythonLibraryReadsDdpxFilesAndWritesTheSameBytes) {
  require_safetensors();
  test::TempDir dir;
  const std::string path = dir.file("ddpx.safetensors");
  write_safetensors(path, sample_tensors(), kMetadata);
  auto read = test::run_python(std::string(kPythonTensors) + R"(
import safetensors, safetensors.torch
path = ")" + path + R"("
got = safetensors.torch.load_file(path)
assert sorted(got) == sorted(tensors), sorted(got)
for name, want in tensors.items():
    assert got[name].dtype == want.dtype and torch.equal(got[name], want), name
with safetensors.safe_open(path, "pt") as f:
    assert f.metadata() == metadata, f.metadata()
with open(path, "rb") as f:
    assert f.read() == safetensors.torch.save(tensors, metadata=metadata), "bytes differ"
print("python read", len(got), "tensors")
)");
  EXPECT_EQ(read.exit_code, 0) << read.output;
  EXPECT_TRUE(test::has(read.output, "python read 12 tensors")) << read.output;
}

// Mapped tensors keep the mapping alive, and writing to one changes neither the file nor a later
// read of it.
TEST(SafetensorsTest, MappedTensorsOutliveTheReadAndNeverWriteTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_safetensors(path, sample_tensors());
  torch::Tensor a;
  {
    Safetensors file = read_safetensors(path);
    a = file.tensors.at("a.f32");
  }
  a.add_(1);
  EXPECT_TRUE(torch::equal(a, sample_tensors().at("a.f32") + 1));
  expect_same_tensors(read_safetensors(path).tensors);
}

TEST(SafetensorsTest, WriterRefusesADtypeOutsideTheFormatsTen) {
  test::TempDir dir;
  try {
    write_safetensors(dir.file("c.safetensors"), {{"z", torch::zeros({2}, torch::kComplexFloat)}});
    FAIL() << "a complex tensor was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_TRUE(test::has(e.what(), "'z'")) << e.what();
  }
}

std::string le64(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), 8); }
std::string file_with(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

struct Lie {
  const char* what;
  std::string bytes;
  const char* says;
};

std::vector<Lie> lies() {
  const std::string f32x2 = R"("dtype":"F32","shape":[2])";
  return {
      {"too short", std::string("\x01\x02", 2), "2 bytes, fewer than the 8"},
      {"header past the end", le64(1000) + "{}", "the header claims 1000 bytes but the file has 2"},
      {"a header of gigabytes", le64(5000000000ULL) + "{}",
       "claims 5000000000 bytes, over the 100000000-byte limit"},
      {"not JSON", file_with("{not json}", ""), "the header is not JSON"},
      {"not an object", file_with("[1,2]", ""), "the header is array, expected a JSON object"},
      {"offsets past the end",
       file_with(R"({"w":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", std::string(4, '\0')),
       "tensor 'w' has data_offsets [0, 8] past the end of the data (4 bytes)"},
      {"overlapping tensors",
       file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                     R"(,"data_offsets":[4,12]}})",
                 std::string(12, '\0')),
       "tensor 'b' (bytes 4..12) overlaps tensor 'a' (bytes 0..8)"},
      {"begin after end",
       file_with(R"({"w":{)" + f32x2 + R"(,"data_offsets":[8,0]}})", std::string(8, '\0')),
       "[8, 0]: it begins after it ends"},
      {"byte count against dtype x shape",
       file_with(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0')),
       "tensor 'w' is F32 of shape [3], 12 bytes, but its data_offsets [0, 8] hold 8"},
      {"a dtype ddpx does not hold",
       file_with(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "\0\0"),
       "dtype F8_E4M3, which ddpx does not read"},
      {"no such dtype",
       file_with(R"({"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})",
                 std::string(16, '\0')),
       "dtype \"F128\", which is no safetensors dtype"},
      {"a gap",
       file_with(R"({"a":{)" + f32x2 + R"(,"data_offsets":[0,8]},"b":{)" + f32x2 +
                     R"(,"data_offsets":[12,20]}})",
                 std::string(20, '\0')),
       "bytes 8..12 of the data belong to no tensor"},
      {"trailing bytes",
       file_with(R"({"w":{)" + f32x2 + R"(,"data_offsets":[0,8]}})", std::string(12, '\0')),
       "4 bytes after its last tensor ends"},
      {"a negative size",
       file_with(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", ""),
       "expected non-negative integers"},
      {"an overflowing shape",
       file_with(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})",
                 ""),
       "whose size overflows"},
      {"a BOOL that is not 0 or 1",
       file_with(R"({"w":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})", "\x01\x07"),
       "holds byte 7 at element 1, expected 0 or 1"},
      {"metadata that is not strings", file_with(R"({"__metadata__":{"epoch":1}})", ""),
       "\"__metadata__\" has \"epoch\": 1, expected a string"},
      {"deep nesting", file_with(R"({"a":{"b":{"c":{"d":[1]}}}})", ""), "nests deeper than 3"},
      {"a missing field", file_with(R"({"w":{"dtype":"F32","shape":[1]}})", ""),
       "tensor 'w' has no \"data_offsets\""},
  };
}

TEST(SafetensorsTest, EveryLyingHeaderIsOneLineNamingTheFile) {
  test::TempDir dir;
  const std::string path = dir.file("lying.safetensors");
  for (const Lie& lie : lies()) {
    SCOPED_TRACE(lie.what);
    write_file_atomic(path, lie.bytes);
    for (int mapped = 0; mapped < 2; ++mapped) {
      try {
        if (mapped)
          read_safetensors(path);
        else
          parse_safetensors(lie.bytes, path);
        ADD_FAILURE() << "accepted";
      } catch (const Error& e) {
        const std::string message = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::kData) << message;
        EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
        EXPECT_TRUE(test::has(message, lie.says)) << message;
        EXPECT_FALSE(test::has(message, "\n")) << message;
      }
    }
  }
}

}  // namespace
}  // namespace ddpx::io
