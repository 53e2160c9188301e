// The collective record on its own: the ring and its file, the cross-rank verdicts and the table.
#include "trace/collective_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>

#include "support/support.h"
#include "trace/collective_report.h"

namespace ddpx::trace {
namespace {

void record(CollectiveTrace& t, const char* op, int64_t n, bool finish = true) {
  uint64_t seq = t.begin(op, "float", &n, 1, 1);
  if (finish) t.end(seq, true);
}

TEST(CollectiveTraceTest, TheRingKeepsTheNewestRecordsInOrder) {
  CollectiveTrace t("", /*rank=*/0, /*world_size=*/1);
  for (int i = 1; i <= kRing + 10; ++i) record(t, "allreduce", i, /*finish=*/i != kRing + 10);
  Snapshot s = t.snapshot();
  ASSERT_EQ(s.entries.size(), static_cast<size_t>(kRing));
  EXPECT_EQ(s.entries.front().seq, 11u);
  EXPECT_EQ(s.entries.back().seq, static_cast<uint64_t>(kRing + 10));
  EXPECT_EQ(s.entries.back().state, State::kPending);
  EXPECT_EQ(s.entries.front().sig.text(), "allreduce float[11]");
  EXPECT_EQ(s.entries.front().state, State::kDone);
}

// The logical bytes of a record: shape times the dtype's size times the tensor count, read
// back from the ring; 0 for a dtype it does not know rather than a guess.
TEST(CollectiveTraceTest, ARecordCountsTheBytesItsTensorsHold) {
  CollectiveTrace t("", /*rank=*/0, /*world_size=*/1);
  const int64_t shape[] = {3, 5};
  t.begin("reduce_scatter_tensor", "bfloat16", shape, 2, 1);
  t.begin("allgather_into_tensor", "double", shape, 1, 4);
  t.begin("allreduce", "complex", shape, 1, 1);
  t.begin("barrier", "-", nullptr, 0, 0);
  Snapshot s = t.snapshot();
  ASSERT_EQ(s.entries.size(), 4u);
  EXPECT_EQ(s.entries[0].sig.bytes(), 3 * 5 * 2);
  EXPECT_EQ(s.entries[1].sig.bytes(), 3 * 8 * 4);
  EXPECT_EQ(s.entries[2].sig.bytes(), 0);
  EXPECT_EQ(s.entries[3].sig.bytes(), 0);
}

TEST(CollectiveTraceTest, AFileRingIsReadableByOthersDuringAndAfterTheRank) {
  test::TempDir dir;
  {
    CollectiveTrace t(dir.path(), /*rank=*/1, /*world_size=*/2);
    record(t, "broadcast", 10);
    record(t, "allreduce", 1024, /*finish=*/false);
    auto live = read_trace(dir.path(), 1);
    ASSERT_TRUE(live.has_value());
    ASSERT_EQ(live->entries.size(), 2u);
    EXPECT_EQ(live->entries[1].state, State::kPending);
    EXPECT_EQ(live->pid, ::getpid());
  }
  auto after = read_traces(dir.path());
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].rank, 1);
  EXPECT_EQ(after[0].entries[0].sig.text(), "broadcast float[10]");
  test::write_bytes(dir.file("rank0.trace"), "not a trace");
  EXPECT_FALSE(read_trace(dir.path(), 0).has_value());
}

Snapshot rank_with(int rank, std::vector<std::pair<std::string, int64_t>> ops, size_t done) {
  Snapshot s;
  s.rank = rank;
  s.pid = ::getpid();
  for (size_t i = 0; i < ops.size(); ++i) {
    Entry e;
    e.seq = i + 1;
    e.sig = Signature{ops[i].first, "float", {ops[i].second}, 1};
    e.state = i < done ? State::kDone : State::kPending;
    s.entries.push_back(e);
  }
  return s;
}

TEST(CollectiveReportTest, VerdictNamesTheRankBehindAndWhereOthersWait) {
  auto r0 = rank_with(0, {{"allreduce", 8}, {"allreduce", 8}, {"broadcast", 10}}, 2);
  auto r1 = rank_with(1, {{"allreduce", 8}, {"allreduce", 8}}, 2);
  auto r2 = rank_with(2, {{"allreduce", 8}, {"allreduce", 8}, {"broadcast", 10}}, 2);
  EXPECT_EQ(verdict({r0, r1, r2}, 3),
            "rank 1 is behind: last completed seq 2 (allreduce float[8]), others wait in seq 3 "
            "(broadcast float[10])");
}

TEST(CollectiveReportTest, VerdictNamesTheFirstMismatchedSequence) {
  auto r0 = rank_with(0, {{"allreduce", 8}, {"allreduce", 1024}}, 1);
  auto r1 = rank_with(1, {{"allreduce", 8}, {"broadcast", 10}}, 1);
  EXPECT_EQ(verdict({r0, r1}, 2),
            "mismatched collectives at seq 2: rank 0 allreduce float[1024], rank 1 broadcast "
            "float[10]");
}

// A pipeline's stages send where their neighbours receive: the same seq on two ranks is no
// mismatch, and the verdict does not pretend to line the records up.
TEST(CollectiveReportTest, APipelinesSendsAndReceivesAreNoMismatch) {
  auto r0 = rank_with(0, {{"broadcast", 10}, {"send", 8}, {"recv", 8}}, 2);
  auto r1 = rank_with(1, {{"broadcast", 10}, {"recv", 8}, {"send", 8}, {"recv", 4}}, 3);
  EXPECT_EQ(verdict({r0, r1}, 2),
            "the ranks send and receive point to point (a pipeline's stages), so their records do "
            "not line up by seq; the rank named as failed is the likely cause");
}

// Two stages' tensor groups record different collectives at the same seq: no mismatch either.
TEST(CollectiveReportTest, SubGroupsCollectivesAreNoMismatch) {
  auto r0 = rank_with(0, {{"allreduce", 8}, {"allreduce", 64}}, 1);
  auto r1 = rank_with(1, {{"allreduce", 8}, {"allgather_into_tensor", 32}}, 2);
  r0.entries[1].group = r1.entries[1].group = "tensor";
  EXPECT_EQ(verdict({r0, r1}, 2),
            "the ranks call collectives in sub-groups (tensor parallelism), so their records do "
            "not line up by seq; the rank named as failed is the likely cause");
}

TEST(CollectiveReportTest, RanksWithoutARecordAndEvenRanksAreSaidSo) {
  auto r0 = rank_with(0, {{"allreduce", 8}}, 0);
  EXPECT_EQ(verdict({r0}, 2),
            "rank(s) 1 are behind: no record of them, the others wait in seq 1 (allreduce "
            "float[8])");
  auto r1 = rank_with(1, {{"allreduce", 8}}, 0);
  EXPECT_NE(verdict({r0, r1}, 2)
                .find("no rank is behind by the record: every rank waits in "
                      "seq 1 (allreduce float[8])"),
            std::string::npos);
}

TEST(CollectiveReportTest, ARankThatGaveUpWaitingIsNotTheOneBehind) {
  // Rank 0 timed out in seq 2 and exited; rank 1 (a process that is gone too, pid 0) never
  // finished seq 2: rank 1 is behind, not rank 0.
  auto r0 = rank_with(0, {{"allreduce", 8}, {"allreduce", 8}}, 1);
  r0.entries[1].state = State::kFailed;
  r0.pid = 0;
  auto r1 = rank_with(1, {{"allreduce", 8}, {"allreduce", 8}}, 1);
  r1.pid = 0;
  EXPECT_EQ(verdict({r0, r1}, 2),
            "rank 1 is behind (process gone) inside seq 2 (allreduce float[8]); the others wait "
            "in it");
}

// Node 0 of a two-node job: its ranks all wait in seq 2 while a rank of the other node died.
// The record here cannot say who is behind, and the verdict says where to look.
TEST(CollectiveReportTest, OnOneNodeOfManyTheVerdictPointsAtTheOtherNodes) {
  auto r0 = rank_with(0, {{"allreduce", 8}, {"allreduce", 8}}, 1);
  auto r1 = rank_with(1, {{"allreduce", 8}, {"allreduce", 8}}, 1);
  r0.pid = r1.pid = static_cast<int>(::getpid());  // running
  EXPECT_EQ(verdict({r0, r1}, 0, /*this_node_only=*/true),
            "every rank of this node waits in seq 2 (allreduce float[8]); the job's other ranks "
            "run on other nodes and have no record here: the rank named as failed (or its "
            "node's log) is the likely cause");
}

TEST(CollectiveReportTest, TheTableHasARowPerRecentCollectiveOfEveryRank) {
  auto r0 = rank_with(0, {{"allreduce", 8}, {"allreduce", 8}, {"broadcast", 10}}, 2);
  auto r1 = rank_with(1, {{"allreduce", 8}, {"allreduce", 8}}, 2);
  auto report = make_report({r1, r0}, 2, realtime_ns(), /*rows_per_rank=*/2);
  EXPECT_EQ(std::count(report.table.begin(), report.table.end(), '\n'), 5) << report.table;
  EXPECT_EQ(report.table.rfind("# rank  pid", 0), 0u) << report.table;
  EXPECT_NE(report.table.find("broadcast float[10]"), std::string::npos) << report.table;
  EXPECT_NE(report.table.find("WAITING"), std::string::npos) << report.table;
  EXPECT_EQ(process_state(::getpid()), "running");
  EXPECT_EQ(process_state(0), "gone");
}

}  // namespace
}  // namespace ddpx::trace
