// A GPT cut into pipeline stages (parallel/pipeline/, models/layer_sequence.h): the embeddings on
// the first stage, the blocks between, the final LayerNorm and the head tied to the token
// embedding on the last. Against one process on the same global batches
// (language_model_layouts.h, which states what is checked and the tolerance, 2e-5 relative):
// every schedule on 2 ranks (GPipe, 1F1B, interleaved), with activation checkpointing per block,
// and 2 stages x 2 data-parallel replicas (whole and ZeRO-3). The two copies of the tied
// embedding, on the first and the last stage's ranks, are bitwise equal after every step; the
// pipeline's state_dict() is the unsplit model's, with the one tied tensor, and loads into one
// process.
#include <gtest/gtest.h>

#include "parallel/language_model_layouts.h"

namespace ddpx::test {
namespace {

using L = LanguageModelLayout;
using parallel::PipelineSchedule;

class PipelineGptTest : public ::testing::TestWithParam<L> {};

TEST_P(PipelineGptTest, TrainsLikeOneProcessWithTiedCopiesEqualAfterEveryStep) {
  expect_layout_trains_as_one_process(gpt_case(), GetParam());
}

// {world, stages, tensor, schedule, stages_per_rank, microbatches, sequence_parallel,
//  checkpointing, shard}
INSTANTIATE_TEST_SUITE_P(Layouts, PipelineGptTest,
                         ::testing::Values(L{2, 2, 1, PipelineSchedule::kGpipe, 1, 4},
                                           L{2, 2, 1, PipelineSchedule::k1F1B, 1, 4},
                                           L{2, 2, 1, PipelineSchedule::kInterleaved, 2, 4},
                                           L{2, 2, 1, PipelineSchedule::k1F1B, 1, 2, false,
                                             "blocks"},
                                           L{4, 2, 1, PipelineSchedule::k1F1B, 1, 2},
                                           L{4, 2, 1, PipelineSchedule::k1F1B, 1, 2, false, "none",
                                             parallel::ShardMode::kFull}),
                         [](const auto& info) { return layout_name(info.param); });

}  // namespace
}  // namespace ddpx::test
