// Reduce-scatter and all-gather into tensors through a job's process group (Gloo and shared
// memory on 127.0.0.1): exact sums and averages, equal to Gloo's, for 2, 3 and 4 ranks, float32,
// float64, bfloat16 and float16, sizes that divide nothing and sizes past the shared-memory slots;
// in place and from the arenas; gather-and-apply; Gloo still taking what shared memory cannot;
// mismatched calls refused; the collective record naming both ops with their logical bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include "core/error.h"
#include "distributed/collectives.h"
#include "distributed/shm_backend.h"
#include "ranks.h"
#include "shm_ranks.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

using test::error_text;

// Rank r's reduce-scatter input: element i holds i % 31 + r, so every sum of up to 4 ranks
// (at most 126) is exact in bfloat16 and float16 too, whatever the order.
torch::Tensor rs_input(int64_t n, int rank, c10::ScalarType dtype) {
  return (torch::arange(n, torch::kInt64).remainder(31) + rank).to(dtype);
}

// What rank r's output must hold: part r of the exact sum, times 1/world for an average
// (computed as the transport does, in float for the 16-bit types, then rounded once).
torch::Tensor rs_expected(int64_t part, int rank, int world, c10::ScalarType dtype, bool average) {
  auto acc = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  torch::Tensor sum =
      (torch::arange(rank * part, (rank + 1) * part, torch::kInt64).remainder(31) * world +
       world * (world - 1) / 2)
          .to(acc);
  if (average) sum = sum * (1.0 / world);
  return sum.to(dtype);
}

// Rank r's all-gather input: values exact in every dtype tested.
torch::Tensor ag_input(int64_t n, int rank, c10::ScalarType dtype) {
  return (torch::arange(n, torch::kInt64) * 7 + rank * 101).remainder(251).to(dtype);
}

// A size per dtype that takes several rounds through the slots at every world size.
int64_t past_the_slots(c10::ScalarType dtype) {
  return ShmAllreduce::kChunkBytes / static_cast<int64_t>(c10::elementSize(dtype)) + 13;
}

c10d::ReduceScatterOptions reduce_op(c10d::ReduceOp::RedOpType op) {
  c10d::ReduceScatterOptions options;
  options.reduceOp = op;
  return options;
}

TEST(ShmCollectivesTest, ReduceScatterSumsExactlyAndEqualsGlooOnTwoThreeAndFourRanks) {
  for (int world : {2, 3, 4}) {
    auto errors = test::run_ranks(world, [&](int rank, Context& context) {
      ASSERT_NE(context.shm(), nullptr) << "one host: the job has shared memory";
      auto& group = *context.process_group();
      for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat64, torch::kFloat16}) {
        for (int64_t part :
             {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}, past_the_slots(dtype)}) {
          for (bool average : {false, true}) {
            torch::Tensor input = rs_input(part * world, rank, dtype);
            torch::Tensor output = torch::full({part}, -1, dtype);
            const int64_t before = context.shm()->shm_calls();
            wait_work(
                group._reduce_scatter_base(
                    output, input, reduce_op(average ? c10d::ReduceOp::AVG : c10d::ReduceOp::SUM)),
                "test reduce-scatter");
            ASSERT_EQ(context.shm()->shm_calls(), before + 1) << "went through shared memory";
            ASSERT_TRUE(torch::equal(output, rs_expected(part, rank, world, dtype, average)))
                << "world " << world << " " << dtype << " part " << part << " average " << average;
            ASSERT_TRUE(torch::equal(input, rs_input(part * world, rank, dtype))) << "input kept";
            if (average) continue;  // Gloo has no average
            torch::Tensor gloo = torch::empty({part}, dtype);
            wait_work(context.shm()->inner()._reduce_scatter_base(gloo, input,
                                                                  reduce_op(c10d::ReduceOp::SUM)),
                      "test Gloo reduce-scatter");
            ASSERT_TRUE(torch::equal(output, gloo))
                << "world " << world << " " << dtype << " part " << part;
          }
        }
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

TEST(ShmCollectivesTest, AllGatherEqualsGlooOnTwoThreeAndFourRanksForAnyDtype) {
  for (int world : {2, 3, 4}) {
    auto errors = test::run_ranks(world, [&](int rank, Context& context) {
      ASSERT_NE(context.shm(), nullptr);
      auto& group = *context.process_group();
      for (auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kInt64, torch::kUInt8}) {
        for (int64_t n :
             {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}, past_the_slots(dtype)}) {
          torch::Tensor input = ag_input(n, rank, dtype);
          torch::Tensor output = torch::empty({n * world}, dtype);
          const int64_t before = context.shm()->shm_calls();
          wait_work(group._allgather_base(output, input), "test all-gather");
          ASSERT_EQ(context.shm()->shm_calls(), before + 1) << "went through shared memory";
          std::vector<torch::Tensor> parts;
          for (int r = 0; r < world; ++r) parts.push_back(ag_input(n, r, dtype));
          ASSERT_TRUE(torch::equal(output, torch::cat(parts)))
              << "world " << world << " " << dtype << " n " << n;
          torch::Tensor gloo = torch::empty({n * world}, dtype);
          wait_work(context.shm()->inner()._allgather_base(gloo, input, {}),
                    "test Gloo all-gather");
          ASSERT_TRUE(torch::equal(output, gloo))
              << "world " << world << " " << dtype << " n " << n;
        }
      }
    });
    EXPECT_ALL_RANKS_OK(errors);
  }
}

// The shapes a sharded plan uses: the output of a reduce-scatter is the rank's own part of the
// input, the input of an all-gather the rank's own part of the output; several calls in flight
// at once (queued, then waited for), with a Gloo collective between them.
TEST(ShmCollectivesTest, InPlaceCallsInFlightTogetherGiveExactResults) {
  const int world = 3;
  auto errors = test::run_ranks(world, [&](int rank, Context& context) {
    auto& group = *context.process_group();
    const int64_t part = 100003;
    torch::Tensor grads = rs_input(part * world, rank, torch::kFloat32);
    torch::Tensor shard = grads.narrow(0, rank * part, part);
    torch::Tensor params = torch::zeros({part * world}, torch::kBFloat16);
    torch::Tensor mine = params.narrow(0, rank * part, part);
    mine.copy_(ag_input(part, rank, torch::kBFloat16));
    auto scattered = group._reduce_scatter_base(shard, grads, reduce_op(c10d::ReduceOp::AVG));
    std::vector<at::Tensor> counts{torch::full({2}, int64_t{rank})};
    auto counted = group.allreduce(counts);  // int64: Gloo
    auto gathered = group._allgather_base(params, mine);
    wait_work(scattered, "test reduce-scatter");
    wait_work(counted, "test all-reduce");
    wait_work(gathered, "test all-gather");
    EXPECT_TRUE(torch::equal(shard, rs_expected(part, rank, world, torch::kFloat32, true)));
    EXPECT_TRUE(torch::equal(counts[0], torch::full({2}, int64_t{3})));
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < world; ++r) parts.push_back(ag_input(part, r, torch::kBFloat16));
    EXPECT_TRUE(torch::equal(params, torch::cat(parts)));
  });
  EXPECT_ALL_RANKS_OK(errors);
}

// What shared memory cannot take goes to Gloo, which does it (int64, MAX, a non-contiguous
// input) or says why not: nothing reaches the transport, nothing is silently wrong.
TEST(ShmCollectivesTest, GlooTakesWhatSharedMemoryCannot) {
  auto errors = test::run_ranks(2, [&](int rank, Context& context) {
    auto& group = *context.process_group();
    const int64_t before = context.shm()->shm_calls();
    torch::Tensor longs = rs_input(10, rank, torch::kInt64), out = torch::empty({5}, torch::kInt64);
    wait_work(group._reduce_scatter_base(out, longs, reduce_op(c10d::ReduceOp::SUM)), "int64");
    EXPECT_TRUE(torch::equal(out, rs_expected(5, rank, 2, torch::kInt64, false)));
    torch::Tensor floats = rs_input(10, rank, torch::kFloat32), top = torch::empty({5});
    wait_work(group._reduce_scatter_base(top, floats, reduce_op(c10d::ReduceOp::MAX)), "max");
    EXPECT_TRUE(torch::equal(top, rs_input(10, 1, torch::kFloat32).narrow(0, rank * 5, 5)));
    torch::Tensor strided = torch::arange(8, torch::kFloat32).view({2, 4}).t() + rank;  // [4, 2]
    torch::Tensor gathered = torch::empty({8, 2});  // Gloo: the parts stacked along dim 0
    wait_work(group._allgather_base(gathered, strided), "non-contiguous");
    EXPECT_TRUE(torch::equal(gathered.narrow(0, 4, 4), strided + (1 - rank)));
    EXPECT_EQ(context.shm()->shm_calls(), before) << "none of these reached shared memory";
  });
  EXPECT_ALL_RANKS_OK(errors);
}

// The record names each op and counts its logical bytes: the whole tensor that is scattered
// or gathered, the same on every rank (a parameter's Ψ, not its shard's Ψ/N).
TEST(ShmCollectivesTest, TheCollectiveRecordNamesBothOpsWithTheirLogicalBytes) {
  std::vector<trace::Snapshot> seen(2);
  auto errors = test::run_ranks(2, [&](int rank, Context& context) {
    auto& group = *context.process_group();
    torch::Tensor grads = torch::ones({2002}), shard = torch::empty({1001});
    wait_work(group._reduce_scatter_base(shard, grads, reduce_op(c10d::ReduceOp::SUM)), "rs");
    torch::Tensor params = torch::empty({2002}, torch::kBFloat16);
    torch::Tensor mine = torch::ones({1001}, torch::kBFloat16);
    wait_work(group._allgather_base(params, mine), "ag");
    std::vector<at::Tensor> outs{torch::empty({3}), torch::empty({3})};
    std::vector<at::Tensor> ins{torch::ones({6}), torch::ones({6})};
    wait_work(group.reduce_scatter_tensor_coalesced(outs, ins, reduce_op(c10d::ReduceOp::SUM)),
              "coalesced");
    EXPECT_TRUE(outs[1].eq(2.0f).all().item<bool>());
    seen[rank] = context.trace()->snapshot();
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int rank = 0; rank < 2; ++rank) {
    const auto& entries = seen[rank].entries;
    ASSERT_GE(entries.size(), 3u);
    const auto& rs = entries[entries.size() - 3].sig;
    const auto& ag = entries[entries.size() - 2].sig;
    const auto& co = entries[entries.size() - 1].sig;
    EXPECT_EQ(rs.text(), "reduce_scatter_tensor float[2002]");
    EXPECT_EQ(rs.bytes(), 2002 * 4);
    EXPECT_EQ(ag.text(), "allgather_into_tensor bfloat16[2002]");
    EXPECT_EQ(ag.bytes(), 2002 * 2);
    EXPECT_EQ(co.text(), "reduce_scatter_tensor float[6] x2");
    EXPECT_EQ(co.bytes(), 2 * 6 * 4);
    for (size_t i = entries.size() - 3; i < entries.size(); ++i)
      EXPECT_EQ(entries[i].state, trace::State::kDone) << entries[i].sig.text();
  }
}

// Inputs in every rank's arena (where a sharded plan can keep its flat gradients and
// parameters) are read in place, with no copy through the slots; a call where one rank's input
// is in ordinary memory still gets the right answer.
TEST(ShmCollectivesTest, ArenaInputsAreReadInPlace) {
  for (int world : {2, 4}) {
    test::run_shm_ranks(world, [&](int rank, ShmAllreduce& shm) {
      ASSERT_NE(shm.arena(), nullptr);
      const int64_t part = past_the_slots(torch::kFloat32);
      for (bool rank1_in_arena : {true, false}) {
        auto place = [&](torch::Tensor values) {
          if (rank == 1 && !rank1_in_arena) return values;
          torch::Tensor t = shm.arena()->allocate(values.numel(), values.scalar_type());
          return t.copy_(values);
        };
        const int64_t before = shm.calls_in_place();
        torch::Tensor input = place(rs_input(part * world, rank, torch::kBFloat16));
        torch::Tensor output = torch::empty({part}, torch::kBFloat16);
        shm.reduce_scatter(output, input, /*average=*/false);
        ASSERT_TRUE(torch::equal(output, rs_expected(part, rank, world, torch::kBFloat16, false)));
        torch::Tensor shard = place(ag_input(part, rank, torch::kFloat32));
        torch::Tensor gathered = torch::empty({part * world});
        shm.all_gather(gathered, shard);
        for (int r = 0; r < world; ++r)
          ASSERT_TRUE(
              torch::equal(gathered.narrow(0, r * part, part), ag_input(part, r, torch::kFloat32)));
        EXPECT_EQ(shm.calls_in_place() - before, rank1_in_arena ? 2 : 0);
      }
    });
  }
}

// Gather-and-apply (a sharded unit's all-gather straight into its parameters): every rank's
// arena tensor is handed to every rank, its own included, in rank order, for 2 and 3 ranks and
// a size past the slots; a rank whose tensor is in ordinary memory makes every rank throw,
// naming it, and a mismatched call is named as such.
TEST(ShmCollectivesTest, GatherAndApplyHandsEveryRanksArenaTensorToEveryRank) {
  for (int world : {2, 3}) {
    test::run_shm_ranks(world, [&](int rank, ShmAllreduce& shm) {
      ASSERT_NE(shm.arena(), nullptr);
      const int64_t n = past_the_slots(torch::kFloat32);
      torch::Tensor shard = shm.arena()->allocate(n, torch::kFloat32);
      shard.copy_(ag_input(n, rank, torch::kFloat32));
      torch::Tensor gathered = torch::empty({world * n});
      const int64_t before = shm.calls_in_place();
      shm.gather_apply(shard, [&](const std::vector<const void*>& sources) {
        ASSERT_EQ(static_cast<int>(sources.size()), world);
        EXPECT_EQ(sources[rank], shard.data_ptr());
        for (int q = 0; q < world; ++q)
          std::memcpy(gathered.data_ptr<float>() + q * n, sources[q], n * sizeof(float));
      });
      EXPECT_EQ(shm.calls_in_place() - before, 1);
      for (int q = 0; q < world; ++q)
        EXPECT_TRUE(torch::equal(gathered.narrow(0, q * n, n), ag_input(n, q, torch::kFloat32)))
            << "rank " << rank << " read rank " << q << "'s tensor";
    });
  }
  std::vector<std::string> errors(2);
  test::run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor shard =
        rank == 1 ? torch::ones({8}) : shm.arena()->allocate(8, torch::kFloat32).fill_(1);
    try {
      shm.gather_apply(shard, [](const std::vector<const void*>&) {});
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("not in shared memory on every rank"), std::string::npos) << e;
  test::run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor shard = shm.arena()->allocate(8, torch::kFloat32);
    torch::Tensor output = torch::empty({16});
    try {
      if (rank == 0) shm.gather_apply(shard, [](const std::vector<const void*>&) {});
      if (rank == 1) shm.all_gather(output, shard);
      errors[rank] = "";
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("rank 0 gather-and-apply float[8], rank 1 all-gather float[8]"),
              std::string::npos)
        << e;
}

// Ranks that disagree on the size or the op must not sum unrelated bytes: every rank throws,
// naming what each called.
TEST(ShmCollectivesTest, MismatchedCallsThrowOnEveryRankNamingEach) {
  std::vector<std::string> errors(2);
  test::run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor input = torch::ones({rank == 0 ? 8 : 16}),
                  output = torch::empty({rank == 0 ? 4 : 8});
    try {
      shm.reduce_scatter(output, input, /*average=*/rank == 1);
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("rank 0 reduce-scatter sum float[8], rank 1 reduce-scatter average float[16]"),
              std::string::npos)
        << e;
  test::run_shm_ranks(2, [&](int rank, ShmAllreduce& shm) {
    torch::Tensor input = torch::ones({4}, rank == 0 ? torch::kFloat32 : torch::kInt32);
    torch::Tensor output = torch::empty({8}, input.scalar_type());
    try {
      shm.all_gather(output, input);
      errors[rank] = "";
    } catch (const Error& e) {
      errors[rank] = e.what();
    }
  });
  for (const auto& e : errors)
    EXPECT_NE(e.find("rank 0 all-gather float[4], rank 1 all-gather bytes[16]"), std::string::npos)
        << e;
}

}  // namespace
}  // namespace ddpx::dist
