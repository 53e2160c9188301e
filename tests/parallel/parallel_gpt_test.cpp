// The split GPT's sequence parallelism and activation checkpointing (parallel/tensor/
// parallel_gpt.h), each rank a real member of a Gloo group on 127.0.0.1, against one process's
// unsplit GPT (2 blocks, 4 heads, a vocabulary of 13, 8 tokens) on the same batch: under
// --sequence_parallel on 2 and 4 ranks (with and without recomputed blocks) the gathered logits,
// the loss and every parameter's gradient, the LayerNorms' and row-parallel biases' gradients
// once summed over the group as the plan sums them (each rank's alone is its tokens' share: that
// it differs from the whole is checked too); recomputed blocks with attention dropout give
// bitwise the forward's loss and gradients (the region generator's masks replayed) and run the
// blocks' collectives again; and a sequence that the ranks do not divide is refused naming the
// flag.
//
// Tolerance: 1e-5 relative to each tensor's largest magnitude (plus 1e-6 absolute): float32 sums
// in another order (the split products, the all-gathers and reduce-scatters, the loss's sum of
// exponentials over ranks).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/dropout.h>

#include <map>
#include <string>

#include "core/error.h"
#include "distributed/ranks.h"
#include "models/gpt.h"
#include "parallel/tensor/parallelize.h"
#include "parallel/tensor/shard_spec.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace parallel_gpt_test {

using test::error_text;
using test::run_ranks;

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-5 * scale + 1e-6) << what << ": " << diff << " of " << scale;
}

models::GptOptions small_gpt() {
  models::GptOptions o;
  o.vocab_size = 13;
  o.block_size = 8;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 16;
  return o;
}

models::Gpt copy_of(const models::Gpt& reference) {
  models::Gpt whole(reference->options());
  torch::NoGradGuard no_grad;
  auto from = reference->named_parameters();
  for (auto& p : whole->named_parameters()) p.value().copy_(from[p.key()]);
  return whole;
}

TEST(ParallelGptTest, SequenceParallelGivesTheUnsplitLogitsLossAndGradients) {
  const models::GptOptions o = small_gpt();
  torch::manual_seed(7);
  const torch::Tensor idx = torch::randint(o.vocab_size, {3, 8}, torch::kLong);
  const torch::Tensor targets = torch::randint(o.vocab_size, {3, 8}, torch::kLong);
  models::Gpt reference(o);
  torch::Tensor want_logits = reference->forward(idx);
  torch::Tensor want_loss =
      torch::nn::functional::cross_entropy(want_logits.flatten(0, 1), targets.flatten());
  want_loss.backward();
  std::map<std::string, torch::Tensor> want_grads;
  for (const auto& p : reference->named_parameters()) want_grads[p.key()] = p.value().grad();
  for (const int ranks : {2, 4}) {
    for (const bool recomputed : {false, true}) {
      SCOPED_TRACE(fmt::format("{} ranks{}", ranks, recomputed ? ", blocks recomputed" : ""));
      auto errors = run_ranks(ranks, [&](int rank, Context& group) {
        torch::nn::AnyModule any(copy_of(reference));
        parallel::tensor::check_splittable(
            any, ranks, "gpt", /*sequence_parallel=*/true,
            models::parse_activation_checkpointing(recomputed ? "blocks" : "none"));
        auto split = parallel::tensor::split_model(
            any, group, /*sequence_parallel=*/true,
            models::parse_activation_checkpointing(recomputed ? "blocks" : "none"));
        // Each block's two LayerNorms (weight, bias) and two row-parallel biases, the final
        // LayerNorm's weight and bias.
        ASSERT_EQ(split.partial_grads.size(), 2u * 6u + 2u);
        EXPECT_NE(split.summary.find("sequence parallel"), std::string::npos) << split.summary;
        torch::Tensor local = split.module.forward(idx);
        ASSERT_EQ(local.size(1), 8) << "the output layer sees every token";
        expect_close(split.gather(local.detach()), want_logits.detach(), "the logits");
        torch::Tensor loss = split.loss(local, targets, 0.0);
        expect_close(loss, want_loss.detach(), "the loss");
        loss.backward();
        auto named = split.module.ptr()->named_parameters();
        for (const auto& name : split.partial_grads) {
          torch::Tensor g = named[name].grad();
          // This rank's tokens' share only: not the whole gradient until summed.
          EXPECT_GT((g - want_grads.at(name)).abs().max().item<double>(),
                    1e-3 * want_grads.at(name).abs().max().item<double>())
              << name << " is whole before the sum";
          group.all_reduce_sum(g);
        }
        for (const auto& p : named) {
          torch::Tensor g = p.value().grad();
          ASSERT_TRUE(g.defined()) << p.key();
          auto spec = split.specs.find(p.key());
          if (spec != split.specs.end()) g = parallel::tensor::gather_whole(g, spec->second, group);
          expect_close(g, want_grads.at(p.key()), "rank " + std::to_string(rank) + " " + p.key());
        }
      });
      for (int r = 0; r < ranks; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
    }
  }
}

TEST(ParallelGptTest, RecomputedBlocksReplayAttentionDropoutAndGiveBitwiseTheSameGradients) {
  models::GptOptions o = small_gpt();
  o.dropout = 0.3;
  auto make = [&] {
    torch::manual_seed(9);
    models::Gpt gpt(o);
    // Attention dropout only (the tensor region's generator, one a rank); the residual and
    // embedding dropouts draw from the default generator, which the ranks here, threads of one
    // process, share.
    for (auto& m : gpt->modules()) {
      if (auto* d = m->as<torch::nn::DropoutImpl>()) d->options.p(0.0);
    }
    return torch::nn::AnyModule(gpt);
  };
  torch::manual_seed(8);
  const torch::Tensor idx = torch::randint(o.vocab_size, {3, 8}, torch::kLong);
  const torch::Tensor targets = torch::randint(o.vocab_size, {3, 8}, torch::kLong);
  for (const bool sequence : {false, true}) {
    SCOPED_TRACE(sequence ? "sequence parallel" : "tensor parallel");
    std::vector<torch::nn::AnyModule> plain{make(), make()}, again{make(), make()};
    auto errors = run_ranks(2, [&](int rank, Context& group) {
      auto direct = parallel::tensor::split_model(plain[rank], group, sequence);
      auto recomputed = parallel::tensor::split_model(
          again[rank], group, sequence, models::parse_activation_checkpointing("blocks"));
      direct.module.ptr()->train();
      recomputed.module.ptr()->train();
      auto collectives = [&] { return group.trace()->snapshot().entries.size(); };
      for (int s = 0; s < 2; ++s) {
        size_t before = collectives();
        torch::Tensor a = direct.loss(direct.module.forward(idx), targets, 0.0);
        a.backward();
        const size_t direct_count = collectives() - before;
        before = collectives();
        torch::Tensor r = recomputed.loss(recomputed.module.forward(idx), targets, 0.0);
        r.backward();
        const size_t again_count = collectives() - before;
        // (The record keeps the latest entries only: counted on the first step.)
        if (s == 0) EXPECT_GT(again_count, direct_count) << "the blocks ran once";
        EXPECT_TRUE(torch::equal(a, r)) << "rank " << rank << " step " << s;
        auto want = direct.module.ptr()->named_parameters();
        for (const auto& p : recomputed.module.ptr()->named_parameters()) {
          EXPECT_TRUE(torch::equal(p.value().grad(), want[p.key()].grad()))
              << "rank " << rank << " step " << s << " grad " << p.key();
        }
      }
      // Dropout drew: the training loss is not the evaluation one.
      direct.module.ptr()->eval();
      torch::NoGradGuard no_grad;
      EXPECT_FALSE(torch::allclose(direct.loss(direct.module.forward(idx), targets, 0.0),
                                   recomputed.loss(recomputed.module.forward(idx), targets, 0.0)));
    });
    for (int r = 0; r < 2; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
  }
}

TEST(ParallelGptTest, ASequenceThatTheRanksDoNotDivideIsRefusedNamingTheFlag) {
  const models::GptOptions o = small_gpt();
  const torch::Tensor idx = torch::randint(o.vocab_size, {2, 6}, torch::kLong);
  auto errors = run_ranks(4, [&](int, Context& group) {
    torch::manual_seed(3);
    torch::nn::AnyModule any{models::Gpt(o)};
    auto split = parallel::tensor::split_model(any, group, /*sequence_parallel=*/true);
    try {
      split.module.forward(idx);
      ADD_FAILURE() << "6 tokens over 4 ranks";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--sequence_parallel: a sequence of 6 tokens does not "
                                           "split over the 4 ranks of --tensor_parallel; use a "
                                           "--seq_len that 4 divides"),
                std::string::npos)
          << e.what();
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
}

}  // namespace parallel_gpt_test
}  // namespace ddpx::dist
