// BERT in a pipeline and on the 3-D mesh (models/layer_sequence.h, parallel_bert.h): the
// embeddings on the first stage, the encoder layers cut by blocks, the MLM head with the decoder
// tied to the word embedding (each tensor rank's rows of it) and its bias on the last, the
// masked-LM loss over the masked tokens only. Against one process on the same global batches
// (language_model_layouts.h, which states what is checked and the tolerance, 2e-5 relative):
// PP2 under 1F1B and interleaved (4 stages on 2 ranks), PP2 with the layers recomputed, PP2 x
// TP2, DP2 x PP2 x TP2 with each stage's pieces sharded over their replicas (--shard full), and
// TP2 with the split layers recomputed. The tied copies on the first and the last stage are
// bitwise equal after every step.
#include <gtest/gtest.h>

#include "parallel/language_model_layouts.h"

namespace ddpx::test {
namespace {

using L = LanguageModelLayout;
using parallel::PipelineSchedule;

class BertMeshTest : public ::testing::TestWithParam<L> {};

TEST_P(BertMeshTest, TrainsAsOneProcessWithTiedWordEmbeddingsEqualAfterEveryStep) {
  expect_layout_trains_as_one_process(bert_case(), GetParam());
}

// {world, stages, tensor, schedule, stages_per_rank, microbatches, sequence_parallel,
//  checkpointing, shard}
INSTANTIATE_TEST_SUITE_P(
    Layouts, BertMeshTest,
    ::testing::Values(L{2, 2, 1}, L{2, 2, 1, PipelineSchedule::kInterleaved, 2, 4},
                      L{2, 2, 1, PipelineSchedule::k1F1B, 1, 2, false, "blocks"}, L{4, 2, 2},
                      L{8, 2, 2, PipelineSchedule::k1F1B, 1, 2, false, "none",
                        parallel::ShardMode::kFull},
                      L{2, 1, 2, PipelineSchedule::k1F1B, 1, 2, false, "blocks"}),
    [](const auto& info) { return layout_name(info.param); });

}  // namespace
}  // namespace ddpx::test
