// The pickle reader against pickles written by Python's own pickle module (protocols 2 to 5)
// and a Python-2-style pickle built from the published opcode table.
#include "io/pickle.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/atomic_file.h"
#include "core/error.h"
#include "support/support.h"

namespace ddpx::io::pickle {
namespace {

// A CIFAR-shaped dict plus the scalar kinds a state_dict or meta file uses.
std::string write_pickle_with_python(const std::string& dir, int protocol) {
  std::string path = fmt::format("{}/p{}.pkl", dir, protocol);
  auto result = test::run_python(fmt::format(R"(
import pickle, collections, numpy as np
data = (np.arange(3 * 3072) % 251).astype(np.uint8).reshape(3, 3072)
obj = {{b'data': data, b'labels': [7, 0, 9], 'batch_label': 'training batch 1 of 5',
       b'filenames': [b'a.png', b'b.png', b'c.png'],
       'misc': (None, True, False, -5, 300, 70000, 2**40, -2**63, 1.5, b'', 'caf\u00e9'),
       'f32': np.array([[1.0, -2.5]], dtype=np.float32),
       'i64': np.arange(4, dtype=np.int64) - 2,
       'fortran': np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)),
       'ordered': collections.OrderedDict([('w', 1)])}}
shared = [1, 2]
obj['shared'] = (shared, shared)
open('{}', 'wb').write(pickle.dumps(obj, protocol={}))
)",
                                             path, protocol));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return path;
}

class PickleProtocolTest : public ::testing::TestWithParam<int> {};

TEST_P(PickleProtocolTest, ReadsWhatPythonWrote) {
  test::TempDir dir;
  Pickle doc = parse_file(write_pickle_with_python(dir.path(), GetParam()));
  const Value* root = doc.root();
  ASSERT_EQ(root->kind, Kind::kDict);

  const Value* data = root->find("data");
  ASSERT_NE(data, nullptr);
  ASSERT_EQ(data->kind, Kind::kNdarray);
  EXPECT_EQ(data->array.dtype, "|u1");
  EXPECT_EQ(data->array.shape, (std::vector<int64_t>{3, 3072}));
  ASSERT_EQ(data->array.data.size(), 3u * 3072);
  for (size_t i = 0; i < data->array.data.size(); ++i)
    ASSERT_EQ(static_cast<uint8_t>(data->array.data[i]), i % 251) << i;

  const Value* labels = root->find("labels");
  ASSERT_EQ(labels->kind, Kind::kList);
  ASSERT_EQ(labels->items.size(), 3u);
  EXPECT_EQ(labels->items[2]->integer, 9);
  EXPECT_EQ(root->find("batch_label")->text, "training batch 1 of 5");
  EXPECT_EQ(root->find("filenames")->items[1]->kind, Kind::kBytes);
  EXPECT_EQ(root->find("filenames")->items[1]->text, "b.png");

  const Value* misc = root->find("misc");
  ASSERT_EQ(misc->kind, Kind::kTuple);
  ASSERT_EQ(misc->items.size(), 11u);
  EXPECT_EQ(misc->items[0]->kind, Kind::kNone);
  EXPECT_TRUE(misc->items[1]->boolean);
  EXPECT_FALSE(misc->items[2]->boolean);
  EXPECT_EQ(misc->items[3]->integer, -5);
  EXPECT_EQ(misc->items[4]->integer, 300);
  EXPECT_EQ(misc->items[5]->integer, 70000);
  EXPECT_EQ(misc->items[6]->integer, int64_t{1} << 40);
  EXPECT_EQ(misc->items[7]->integer, INT64_MIN);
  EXPECT_DOUBLE_EQ(misc->items[8]->real, 1.5);
  EXPECT_EQ(misc->items[9]->kind, Kind::kBytes);
  EXPECT_EQ(misc->items[9]->text, "");
  EXPECT_EQ(misc->items[10]->text, "caf\xc3\xa9");

  const Value* f32 = root->find("f32");
  EXPECT_EQ(f32->array.dtype, "<f4");
  EXPECT_EQ(f32->array.shape, (std::vector<int64_t>{1, 2}));
  float values[2];
  std::memcpy(values, f32->array.data.data(), 8);
  EXPECT_EQ(values[1], -2.5f);
  const Value* i64 = root->find("i64");
  EXPECT_EQ(i64->array.dtype, "<i8");
  int64_t first;
  std::memcpy(&first, i64->array.data.data(), 8);
  EXPECT_EQ(first, -2);
  EXPECT_TRUE(root->find("fortran")->array.fortran_order);
  EXPECT_EQ(root->find("ordered")->find("w")->integer, 1);
  // Memo references keep Python's sharing.
  const Value* shared = root->find("shared");
  EXPECT_EQ(shared->items[0], shared->items[1]);
}

INSTANTIATE_TEST_SUITE_P(Protocols, PickleProtocolTest, ::testing::Values(2, 3, 4, 5));

// What Python 2's cPickle wrote for {'data': uint8 array (2, 3), 'labels': [1, 2]}: str keys
// and array bytes as SHORT_BINSTRING/BINSTRING, numpy classes by GLOBAL. Built opcode by opcode
// from the published table (pickletools) so that every byte is accounted for.
std::string python2_pickle() {
  std::string p;
  auto op = [&](int code) { p.push_back(static_cast<char>(code)); };
  auto short_str = [&](const std::string& s) {
    op('U');
    op(static_cast<int>(s.size()));
    p += s;
  };
  auto global = [&](const std::string& module, const std::string& name) {
    op('c');
    p += module + "\n" + name + "\n";
  };
  auto int1 = [&](int v) {
    op('K');
    op(v);
  };
  auto put = [&](int slot) {
    op('q');
    op(slot);
  };
  op(0x80);
  op(2);  // PROTO 2
  op('}');
  put(0);
  op('(');  // {  MARK
  short_str("data");
  put(1);
  global("numpy.core.multiarray", "_reconstruct");
  put(2);
  global("numpy", "ndarray");
  put(3);
  int1(0);
  op(0x85);
  short_str("b");
  op(0x87);
  op('R');
  put(4);   // _reconstruct(ndarray, (0,), 'b')
  op('(');  // ndarray state
  int1(1);
  int1(2);
  int1(3);
  op(0x86);  // version 1, shape (2, 3)
  global("numpy", "dtype");
  put(5);
  short_str("u1");
  int1(0);
  int1(1);
  op(0x87);
  op('R');
  put(6);  // dtype('u1', 0, 1)
  op('(');
  int1(3);
  short_str("|");
  op('N');
  op('N');
  op('N');
  op('J');
  p += std::string(4, '\xff');
  op('J');
  p += std::string(4, '\xff');
  int1(0);
  op('t');
  op('b');   // dtype state
  op(0x89);  // is_fortran False
  op('T');
  op(6);
  op(0);
  op(0);
  op(0);
  p += "ABCDEF";  // BINSTRING data
  op('t');
  op('b');  // array state
  short_str("labels");
  put(7);
  op(']');
  op('(');
  int1(1);
  int1(2);
  op('e');
  op('u');
  op('.');  // SETITEMS, STOP
  return p;
}

TEST(PickleTest, ReadsPython2StylePickle) {
  std::string bytes = python2_pickle();
  // Python itself must accept the crafted bytes the way CIFAR users load them.
  test::TempDir dir;
  test::write_bytes(dir.file("py2.pkl"), bytes);
  auto check = test::run_python(
      fmt::format("import pickle\nd = pickle.load(open('{}', 'rb'), encoding='bytes')\n"
                  "print(sorted(d), d[b'data'].shape, d[b'data'].tobytes(), d[b'labels'])",
                  dir.file("py2.pkl")));
  ASSERT_EQ(check.exit_code, 0) << check.output;
  EXPECT_EQ(check.output, "[b'data', b'labels'] (2, 3) b'ABCDEF' [1, 2]\n");

  Pickle doc = parse(bytes, "py2.pkl");
  const Value* data = doc.root()->find("data");
  ASSERT_NE(data, nullptr);
  EXPECT_EQ(data->array.dtype, "|u1");
  EXPECT_EQ(data->array.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(data->array.data, "ABCDEF");
  EXPECT_EQ(doc.root()->find("labels")->items.size(), 2u);
}

void expect_malformed(const std::string& bytes, const std::string& needle) {
  try {
    parse(bytes, "bad.pkl");
    FAIL() << "expected an error for " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    std::string what = e.what();
    EXPECT_NE(what.find("bad.pkl"), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(PickleTest, MalformedInputGivesOffsetNotCrash) {
  std::string good = python2_pickle();
  for (size_t cut = 0; cut < good.size(); ++cut)
    EXPECT_THROW(parse(good.substr(0, cut), "bad.pkl"), Error) << "cut at " << cut;
  expect_malformed("\x80\x02X\xff\xff\xff\x7f", "at byte 2");  // string longer than input
  expect_malformed("\x80\x02\xff.", "unsupported opcode 0xff");
  expect_malformed("\x80\x02h\x05.", "memo entry 5");
  expect_malformed("\x80\x02K\x01K\x02.", "unbalanced");
  expect_malformed(
      "\x80\x02K\x01K\x02"
      "a.",
      "APPEND to a int");
  expect_malformed(std::string("\x80\x02\x8a\x09", 4) + std::string(9, '\x01') + ".", "64 bits");
}

TEST(PickleTest, LimitsStopHostileInput) {
  // An ever-growing list of DUPs would otherwise allocate without bound.
  std::string bytes = "\x80\x02](";
  for (int i = 0; i < 100; ++i) bytes += "N";
  bytes += "e.";
  Limits limits;
  limits.max_values = 50;
  EXPECT_THROW(parse(bytes, "big.pkl", limits), Error);
  EXPECT_EQ(parse(bytes, "big.pkl").root()->items.size(), 100u);
  std::string deep = "\x80\x02" + std::string(2000, '(');
  EXPECT_THROW(parse(deep, "deep.pkl"), Error);
}

// A pickle read for a narrow purpose (a state_dict's, io/torch_file.h) goes through a subset:
// each rule refuses what the full parser would read.
TEST(PickleTest, SubsetRefusesOtherOpcodesGlobalsAndMemoOrder) {
  Limits subset;
  subset.opcodes = std::string(
      "\x80"
      "cqhN)0.");
  subset.globals = {"collections.OrderedDict"};
  subset.memo_in_order = true;
  subset.advice = "save it again";
  auto refusal = [&](const std::string& bytes) {
    EXPECT_NO_THROW(parse(bytes, "full.pkl")) << "the full parser reads it";
    try {
      parse(bytes, "sub.pkl", subset);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("(save it again)"), std::string::npos) << e.what();
      return std::string(e.what());
    }
    ADD_FAILURE() << "the subset let it through";
    return std::string();
  };
  EXPECT_EQ(parse("\x80\x02"
                  "ccollections\nOrderedDict\n.",
                  "ok.pkl", subset)
                .root()
                ->name,
            "OrderedDict");
  EXPECT_NE(refusal("\x80\x02K\x01.").find("unsupported opcode 0x4b"), std::string::npos);
  EXPECT_NE(refusal("\x80\x02"
                    "cos\nsystem\n.")
                .find("global os.system"),
            std::string::npos);
  EXPECT_NE(refusal(std::string("\x80\x02Nq\x05.", 6)).find("memo slot 5 written out of order"),
            std::string::npos);
  const std::string memo_in_order(
      "\x80\x02Nq\x00h\x00"
      "0.",
      9);  // memo 0, read it, POP
  EXPECT_EQ(parse(memo_in_order, "ok.pkl", subset).root()->kind, Kind::kNone);
}

TEST(PickleTest, SelfReferencesAreKeptWithoutLoopingOrLeaking) {
  // l = []; l.append(l)  and  d = {}; d.__setstate__(d), both through the memo.
  using namespace std::string_literals;  // the bytes hold NULs
  Pickle list = parse(
      "\x80\x02]q\x00h\x00"
      "a."s,
      "self.pkl");
  ASSERT_EQ(list.root()->items.size(), 1u);
  EXPECT_EQ(list.root()->items[0], list.root());
  Pickle dict = parse(
      "\x80\x02}q\x00(K\x01K\x02uh\x00"
      "b."s,
      "self.pkl");
  EXPECT_EQ(dict.root()->entries.size(), 2u);
}

TEST(PickleTest, SelfBuildDoublingStopsAtTheItemLimit) {
  // d = {1: 1}; then d.__setstate__(d) forty times: two bytes an opcode, 2^40 entries unchecked
  // (the fuzzer's out-of-memory finding, fuzz/regressions/pickle/oom-build-doubling).
  using namespace std::string_literals;
  std::string bytes = "\x80\x02}q\x00K\x01K\x01s"s;
  for (int i = 0; i < 40; ++i)
    bytes +=
        "h\x00"
        "b"s;
  bytes += ".";
  try {
    parse(bytes, "doubling.pkl");
    FAIL() << "a dict doubled 40 times was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::strstr(e.what(), "doubling.pkl"), nullptr) << e.what();
    EXPECT_NE(std::strstr(e.what(), "list and dict items"), nullptr) << e.what();
  }
  Limits limits;
  limits.max_links = 1 << 10;
  std::string ten = "\x80\x02}q\x00K\x01K\x01s"s;
  for (int i = 0; i < 9; ++i)
    ten +=
        "h\x00"
        "b"s;
  EXPECT_EQ(parse(ten + ".", "ok.pkl", limits).root()->entries.size(), 512u);
}

}  // namespace
}  // namespace ddpx::io::pickle
