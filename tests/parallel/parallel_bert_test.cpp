// The split BERT (parallel/tensor/parallel_bert.h), each rank a real member of a Gloo group on
// 127.0.0.1, against one process's unsplit BERT (2 layers, 4 heads, a vocabulary of 13, 8
// tokens) on the same batch, with a masked LM's labels (the unmasked positions -100): on 2 and 4
// ranks, with and without --sequence_parallel, the gathered logits, the masked-LM loss (torch's
// cross-entropy with ignore_index -100), the predictions, and every parameter's gradient (the
// pieces gathered, the padded vocabulary dropped; under sequence parallelism the partial ones
// summed over the group, as the plan sums them). The split module's parameter names are the
// unsplit BERT's. Heads that do not split are refused naming the flag; recomputed split layers
// are not (bert_mesh_test.cpp trains them).
//
// Tolerance: 1e-5 relative to each tensor's largest magnitude (plus 1e-6 absolute): float32 sums
// in another order.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include <map>
#include <string>

#include "core/error.h"
#include "distributed/ranks.h"
#include "models/bert.h"
#include "parallel/tensor/parallelize.h"
#include "parallel/tensor/shard_spec.h"
#include "parallel/tensor/vocab_parallel.h"

namespace ddpx::dist {
namespace parallel_bert_test {

using test::error_text;
using test::run_ranks;

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-5 * scale + 1e-6) << what << ": " << diff << " of " << scale;
}

models::BertOptions small_bert() {
  models::BertOptions o;
  o.vocab_size = 13;
  o.hidden_size = 16;
  o.num_hidden_layers = 2;
  o.num_attention_heads = 4;
  o.intermediate_size = 32;
  o.max_position_embeddings = 8;
  return o;
}

TEST(ParallelBertTest, SplitLayersGiveTheUnsplitMaskedLmLossAndGradients) {
  const models::BertOptions o = small_bert();
  torch::manual_seed(7);
  const torch::Tensor ids = torch::randint(o.vocab_size, {3, 8}, torch::kLong);
  // About a third of the positions masked; the others -100.
  torch::Tensor labels = torch::randint(o.vocab_size, {3, 8}, torch::kLong);
  labels.masked_fill_(torch::rand({3, 8}) > 0.35, parallel::tensor::kIgnoreIndex);
  models::Bert reference(o);
  {
    // Give the decoder's bias values, so that its split is checked too.
    torch::NoGradGuard no_grad;
    reference->cls->predictions->bias.normal_(0, 0.5);
  }
  torch::Tensor want_logits = reference->forward(ids);
  torch::Tensor want_loss =
      torch::nn::functional::cross_entropy(want_logits.flatten(0, 1), labels.flatten());
  want_loss.backward();
  std::map<std::string, torch::Tensor> want_grads;
  for (const auto& p : reference->named_parameters()) want_grads[p.key()] = p.value().grad();
  for (const int ranks : {2, 4}) {
    for (const bool sequence : {false, true}) {
      SCOPED_TRACE(fmt::format("{} ranks{}", ranks, sequence ? ", sequence parallel" : ""));
      auto errors = run_ranks(ranks, [&](int rank, Context& group) {
        models::Bert whole(o);
        {
          torch::NoGradGuard no_grad;
          auto from = reference->named_parameters();
          for (auto& p : whole->named_parameters()) p.value().copy_(from[p.key()]);
        }
        torch::nn::AnyModule any(whole);
        parallel::tensor::check_splittable(any, ranks, "bert", sequence);
        auto split = parallel::tensor::split_model(any, group, sequence);
        ASSERT_TRUE(split.loss && split.predict && split.gather);
        EXPECT_NE(split.summary.find(ranks == 2 ? "vocabulary 13 padded to 14" : "padded to 16"),
                  std::string::npos)
            << split.summary;
        // Each layer's two LayerNorms (weight, bias) and two row-parallel biases, the head's
        // transform (dense and LayerNorm).
        EXPECT_EQ(split.partial_grads.size(), sequence ? 2u * 6u + 4u : 0u);
        torch::Tensor local = split.module.forward(ids);
        ASSERT_EQ(local.size(-1), parallel::tensor::padded_vocab(13, ranks) / ranks);
        expect_close(split.gather(local.detach()), want_logits.detach(), "the logits");
        torch::Tensor loss = split.loss(local, labels, 0.0);
        expect_close(loss, want_loss.detach(), "the masked-LM loss");
        EXPECT_TRUE(torch::equal(split.predict(local), want_logits.argmax(-1)));
        loss.backward();
        auto named = split.module.ptr()->named_parameters();
        for (const auto& name : split.partial_grads) {
          torch::Tensor g = named[name].grad();  // summed in place, as the plan sums them
          group.all_reduce_sum(g);
        }
        size_t pieces = 0;
        for (const auto& p : named) {
          torch::Tensor g = p.value().grad();
          ASSERT_TRUE(g.defined()) << p.key();
          ASSERT_TRUE(want_grads.count(p.key())) << p.key() << " is not the unsplit BERT's";
          auto spec = split.specs.find(p.key());
          if (spec != split.specs.end()) {
            g = parallel::tensor::gather_whole(g, spec->second, group);
            ++pieces;
          }
          expect_close(g, want_grads.at(p.key()), "rank " + std::to_string(rank) + " " + p.key());
        }
        // The word embedding, the decoder's bias, and each layer's q, k, v, intermediate (weight
        // and bias) and two row-parallel weights.
        EXPECT_EQ(pieces, 2u + 2u * 10u);
        EXPECT_EQ(named.size(), reference->named_parameters().size());
      });
      for (int r = 0; r < ranks; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
    }
  }
}

TEST(ParallelBertTest, WhatDoesNotSplitIsRefusedNamingTheFlag) {
  torch::nn::AnyModule any{models::Bert(small_bert())};
  auto refused = [&](int ranks, const std::string& policy, const std::string& want) {
    try {
      parallel::tensor::check_splittable(any, ranks, "bert-tiny", false,
                                         models::parse_activation_checkpointing(policy));
      ADD_FAILURE() << "not refused: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused(3, "none",
          "--tensor_parallel 3: bert-tiny's attention heads (4) do not split over 3 ranks; pick a "
          "--tensor_parallel that divides 4");
  EXPECT_NO_THROW(parallel::tensor::check_splittable(
      any, 2, "bert-tiny", true, models::parse_activation_checkpointing("blocks")));
}

}  // namespace parallel_bert_test
}  // namespace ddpx::dist
