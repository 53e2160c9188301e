// The vocabulary-parallel embedding and cross-entropy (parallel/tensor/vocab_parallel.h) and the
// split GPT (parallel/tensor/parallel_gpt.h), each rank a real member of a Gloo group on
// 127.0.0.1, against one process's unsplit computation: at::cross_entropy's value and gradient
// (with and without label smoothing) from a vocabulary of 11 split over 2 and 3 ranks (padded to
// 12: the padded column never wins and never counts), the argmax and the gathered logits; and a
// small GPT split over 2 and 4 ranks (4 heads, a vocabulary of 13 padded to 14 and 16): the
// gathered logits, the loss, and every parameter's gradient (the pieces gathered, the padding
// dropped) of the unsplit model.
//
// Tolerance: 1e-5 relative to each tensor's largest magnitude (plus 1e-6 absolute): float32 sums
// in another order (the split matrix products, the sum of exponentials over ranks).
#include "parallel/tensor/vocab_parallel.h"

#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include "core/error.h"
#include "distributed/ranks.h"
#include "models/gpt.h"
#include "parallel/tensor/parallelize.h"
#include "parallel/tensor/shard_spec.h"

namespace ddpx::dist {
namespace vocab_parallel_test {

using test::error_text;
using test::run_ranks;

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double scale = want.abs().max().item<double>();
  const double diff = (got - want).abs().max().item<double>();
  EXPECT_LE(diff, 1e-5 * scale + 1e-6) << what << ": " << diff << " of " << scale;
}

constexpr int64_t kVocab = 11;

TEST(VocabParallelTest, CrossEntropyMatchesTheUnsplitLossAndGradientOnTwoAndThreeRanks) {
  torch::manual_seed(5);
  const torch::Tensor logits = torch::randn({3, 4, kVocab}) * 3;
  const torch::Tensor labels = torch::randint(kVocab, {3, 4}, torch::kLong);
  for (const double smoothing : {0.0, 0.1}) {
    torch::Tensor whole = logits.clone().requires_grad_(true);
    namespace F = torch::nn::functional;
    torch::Tensor want = F::cross_entropy(whole.flatten(0, 1), labels.flatten(),
                                          F::CrossEntropyFuncOptions().label_smoothing(smoothing));
    (want * 2.5).backward();  // a gradient from above other than 1
    const torch::Tensor want_grad = whole.grad();
    const torch::Tensor want_argmax = logits.argmax(-1);
    for (const int ranks : {2, 3}) {
      const int64_t padded = parallel::tensor::padded_vocab(kVocab, ranks);
      ASSERT_EQ(padded, 12);
      const int64_t rows = padded / ranks;
      // The padded whole, its last column the largest: it must never win.
      const torch::Tensor padded_logits =
          torch::cat({logits, torch::full({3, 4, padded - kVocab}, 100.0)}, -1);
      auto errors = run_ranks(ranks, [&](int rank, Context& group) {
        const int64_t start = rank * rows;
        torch::Tensor mine = padded_logits.narrow(-1, start, rows).clone().requires_grad_(true);
        torch::Tensor loss = parallel::tensor::vocab_parallel_cross_entropy(
            mine, labels, start, kVocab, smoothing, group);
        expect_close(loss, want, "the loss");
        (loss * 2.5).backward();
        const int64_t real = std::min(rows, kVocab - start);
        expect_close(mine.grad().narrow(-1, 0, real), want_grad.narrow(-1, start, real),
                     "rank " + std::to_string(rank) + "'s gradient");
        if (real < rows) {
          EXPECT_EQ(mine.grad().narrow(-1, real, rows - real).abs().max().item<float>(), 0.0f);
        }
        EXPECT_TRUE(torch::equal(
            parallel::tensor::vocab_parallel_argmax(mine, start, kVocab, group), want_argmax));
        expect_close(parallel::tensor::gather_vocab(mine.detach(), kVocab, group), logits,
                     "the gathered logits");
      });
      for (int r = 0; r < ranks; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
    }
  }
}

// A masked LM's labels: -100 where a position is not predicted. Its loss is the mean over the
// others, as torch's cross-entropy (ignore_index -100), and the ignored rows get no gradient.
TEST(VocabParallelTest, CrossEntropyIgnoresLabelsOfMinus100AsTorchDoes) {
  torch::manual_seed(15);
  const torch::Tensor logits = torch::randn({3, 5, kVocab}) * 3;
  torch::Tensor labels = torch::randint(kVocab, {3, 5}, torch::kLong);
  labels.masked_fill_(torch::rand({3, 5}) > 0.4, parallel::tensor::kIgnoreIndex);
  labels[0][0] = 2;  // at least one counts
  for (const double smoothing : {0.0, 0.1}) {
    torch::Tensor whole = logits.clone().requires_grad_(true);
    namespace F = torch::nn::functional;
    torch::Tensor want = F::cross_entropy(whole.flatten(0, 1), labels.flatten(),
                                          F::CrossEntropyFuncOptions().label_smoothing(smoothing));
    want.backward();
    auto errors = run_ranks(2, [&](int rank, Context& group) {
      const int64_t rows = 6, start = rank * rows;
      const torch::Tensor padded = torch::cat({logits, torch::zeros({3, 5, 1})}, -1);
      torch::Tensor mine = padded.narrow(-1, start, rows).clone().requires_grad_(true);
      torch::Tensor loss = parallel::tensor::vocab_parallel_cross_entropy(mine, labels, start,
                                                                          kVocab, smoothing, group);
      expect_close(loss, want, "the loss over the positions that count");
      loss.backward();
      const int64_t real = std::min(rows, kVocab - start);
      expect_close(mine.grad().narrow(-1, 0, real), whole.grad().narrow(-1, start, real),
                   "rank " + std::to_string(rank) + "'s gradient");
    });
    for (int r = 0; r < 2; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
  }
}

TEST(VocabParallelTest, PaddedToAMultipleOfDivisibleByTimesTheRanksAsMegatron) {
  EXPECT_EQ(parallel::tensor::padded_vocab(50257, 1, 128), 50304);  // GPT-2's, as Megatron pads
  EXPECT_EQ(parallel::tensor::padded_vocab(50257, 2, 128), 50432);
  EXPECT_EQ(parallel::tensor::padded_vocab(30522, 2, 128), 30720);
  EXPECT_EQ(parallel::tensor::padded_vocab(77, 4), 80);
  EXPECT_EQ(parallel::tensor::padded_vocab(256, 2, 128), 256);
}

TEST(VocabParallelTest, EmbeddingLooksUpEveryTokenAndTrainsOnlyItsOwnRows) {
  torch::manual_seed(6);
  const torch::Tensor weight = torch::randn({kVocab, 5});
  const torch::Tensor idx = torch::randint(kVocab, {2, 7}, torch::kLong);
  const torch::Tensor upstream = torch::randn({2, 7, 5});
  torch::Tensor whole = weight.clone().requires_grad_(true);
  torch::Tensor want = torch::embedding(whole, idx);
  (want * upstream).sum().backward();
  const parallel::tensor::ShardSpec spec{0, 1, 1};  // 11 rows padded to 12
  auto errors = run_ranks(3, [&](int rank, Context& group) {
    torch::Tensor mine = parallel::tensor::take_shard(weight, spec, rank, 3).requires_grad_(true);
    torch::Tensor got = parallel::tensor::vocab_parallel_embedding(idx, mine, rank * 4, group);
    expect_close(got, want, "the embedding");
    (got * upstream).sum().backward();
    expect_close(parallel::tensor::gather_whole(mine.grad(), spec, group), whole.grad(),
                 "the gradient");
  });
  for (int r = 0; r < 3; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
}

TEST(VocabParallelTest, ASplitGptGivesTheUnsplitLogitsLossAndGradients) {
  models::GptOptions o;
  o.vocab_size = 13;
  o.block_size = 8;
  o.n_layer = 2;
  o.n_head = 4;
  o.n_embd = 16;
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
    auto errors = run_ranks(ranks, [&](int rank, Context& group) {
      models::Gpt whole(o);
      {
        torch::NoGradGuard no_grad;
        auto from = reference->named_parameters();
        for (auto& p : whole->named_parameters()) p.value().copy_(from[p.key()]);
      }
      torch::nn::AnyModule any(whole);
      parallel::tensor::check_splittable(any, ranks, "gpt");
      auto split = parallel::tensor::split_model(any, group);
      ASSERT_TRUE(split.loss && split.predict && split.gather);
      EXPECT_NE(split.summary.find(ranks == 2 ? "vocabulary 13 padded to 14 -> 7 rows"
                                              : "vocabulary 13 padded to 16 -> 4 rows"),
                std::string::npos)
          << split.summary;
      torch::Tensor local = split.module.forward(idx);
      ASSERT_EQ(local.size(-1), parallel::tensor::padded_vocab(13, ranks) / ranks);
      expect_close(split.gather(local.detach()), want_logits.detach(), "the logits");
      torch::Tensor loss = split.loss(local, targets, 0.0);
      expect_close(loss, want_loss.detach(), "the loss");
      EXPECT_TRUE(torch::equal(split.predict(local), want_logits.argmax(-1)));
      loss.backward();
      size_t pieces = 0;
      for (const auto& p : split.module.ptr()->named_parameters()) {
        torch::Tensor g = p.value().grad();
        ASSERT_TRUE(g.defined()) << p.key();
        auto spec = split.specs.find(p.key());
        if (spec != split.specs.end()) {
          g = parallel::tensor::gather_whole(g, spec->second, group);
          ++pieces;
        }
        expect_close(g, want_grads.at(p.key()), p.key());
      }
      EXPECT_EQ(pieces, 1u + 2u * 6u);  // the vocabulary's and each block's six
      EXPECT_EQ(split.module.ptr()->named_parameters().size(),
                reference->named_parameters().size());
    });
    for (int r = 0; r < ranks; ++r) EXPECT_FALSE(errors[r]) << r << ": " << error_text(errors[r]);
  }
}

TEST(VocabParallelTest, HeadsThatDoNotSplitAreRefusedNamingTheFlag) {
  models::GptOptions o;
  o.vocab_size = 13;
  o.block_size = 8;
  o.n_layer = 1;
  o.n_head = 4;
  o.n_embd = 16;
  torch::nn::AnyModule any{models::Gpt(o)};
  try {
    parallel::tensor::check_splittable(any, 3, "gpt-tiny");
    FAIL() << "3 ranks for 4 heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "--tensor_parallel 3: gpt-tiny's attention heads (4) do not split over 3 "
                  "ranks; pick a --tensor_parallel that divides 4"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace vocab_parallel_test
}  // namespace ddpx::dist
