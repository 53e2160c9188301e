// A GPT on the 3-D mesh (data x pipeline x tensor, tensor_parallel_plan.h with
// TensorParallelOptions::pipeline): each pipeline stage's blocks split over the tensor ranks, the
// first stage holding this tensor rank's rows of the vocabulary-parallel token embedding, the last
// stage the same rows as the tied output layer and the vocabulary-parallel loss
// (parallel_gpt.h). Against one process on the same global batches (language_model_layouts.h,
// which states what is checked and the tolerance, 2e-5 relative): PP2 x TP2 under 1F1B, GPipe
// with sequence parallelism (the stages pass their share of the tokens), interleaved (4 stages on
// 2 ranks) with blocks recomputed, and DP2 x PP2 x TP2 whole and with each stage's pieces sharded
// over their replicas (--shard full).
#include <gtest/gtest.h>

#include "parallel/language_model_layouts.h"

namespace ddpx::test {
namespace {

using L = LanguageModelLayout;
using parallel::PipelineSchedule;

class GptMesh3dTest : public ::testing::TestWithParam<L> {};

TEST_P(GptMesh3dTest, TrainsAsOneProcessWithEachTensorRanksTiedRowsEqualAfterEveryStep) {
  expect_layout_trains_as_one_process(gpt_case(), GetParam());
}

// {world, stages, tensor, schedule, stages_per_rank, microbatches, sequence_parallel,
//  checkpointing, shard}
INSTANTIATE_TEST_SUITE_P(
    Layouts, GptMesh3dTest,
    ::testing::Values(L{4, 2, 2}, L{4, 2, 2, PipelineSchedule::kGpipe, 1, 2, true},
                      L{4, 2, 2, PipelineSchedule::kInterleaved, 2, 4, false, "blocks"}, L{8, 2, 2},
                      L{8, 2, 2, PipelineSchedule::k1F1B, 1, 2, false, "none",
                        parallel::ShardMode::kFull}),
    [](const auto& info) { return layout_name(info.param); });

}  // namespace
}  // namespace ddpx::test
