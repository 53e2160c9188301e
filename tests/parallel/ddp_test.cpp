// DistributedDataParallel against a single process: two ranks, each on half of a batch, must
// end a step with the same averaged gradients and weights as one process on the whole batch.
#include "parallel/data/ddp.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include "core/error.h"
#include "distributed/peer_memory.h"
#include "distributed/ranks.h"
#include "trace/collective_trace.h"

namespace ddpx::dist {
namespace {

using test::error_text;
using test::run_ranks;

// x: (B, 8) -> (B, 4). `unused` is registered but never used by forward().
struct DdpMlpImpl : torch::nn::Module {
  explicit DdpMlpImpl(int hidden = 16, bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(8, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, 4));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(4, 4));
    steps = register_buffer("steps", torch::zeros({2}));
  }
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::tanh(fc2(torch::tanh(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, unused{nullptr};
  torch::Tensor steps;
};
TORCH_MODULE(DdpMlp);

constexpr int kDdpBatch = 8;

// A model with rank 0's weights: every rank and the reference start from the same point.
DdpMlp copy_of_mlp(const DdpMlp& source, bool with_unused = false) {
  DdpMlp copy(16, with_unused);
  torch::NoGradGuard no_grad;
  auto from = source->parameters();
  auto to = copy->parameters();
  for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  return copy;
}

torch::Tensor loss_of(const torch::Tensor& out, const torch::Tensor& y, int64_t denominator) {
  return (out - y).pow(2).sum() / double(denominator);
}

float max_diff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<float>());
  }
  return worst;
}

std::vector<torch::Tensor> grads_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> g;
  for (auto& p : m.parameters())
    g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

std::vector<torch::Tensor> weights_of(torch::nn::Module& m) {
  std::vector<torch::Tensor> w;
  for (auto& p : m.parameters()) w.push_back(p.detach().clone());
  return w;
}

struct Result {
  std::vector<torch::Tensor> grads, weights;
  std::vector<std::vector<size_t>> buckets_before, buckets_after;
  bool grads_are_bucket_views = true;
  bool grads_in_shared_memory = true;
  // The bytes of the collectives the last step's forward and backward recorded (the gradient
  // buckets' all-reduces): what went on the wire.
  int64_t last_step_bytes = 0;
  std::vector<std::string> last_step_collectives;
};

// The newest sequence number in this rank's collective record (0: none yet).
uint64_t newest_collective(const Context& context) {
  const auto entries = context.trace()->snapshot().entries;
  return entries.empty() ? 0 : entries.back().seq;
}

// Whether every gradient lies in this rank's share of the group's shared segment.
bool grads_in_shared_memory(torch::nn::Module& m, const Context& context) {
  auto* memory = context.peer_memory();
  if (memory == nullptr) return false;
  for (auto& p : m.parameters()) {
    if (!p.grad().defined() || !memory->offset_of(p.grad())) return false;
  }
  return true;
}

// Within a bucket, parameter k+1's gradient starts where parameter k's ends: the gradients
// live in the bucket's flat buffer, so the reducer never copies them in or out.
bool grads_are_bucket_views(torch::nn::Module& m, const std::vector<std::vector<size_t>>& buckets) {
  auto params = m.parameters();
  for (const auto& bucket : buckets) {
    for (size_t k = 0; k + 1 < bucket.size(); ++k) {
      const auto& a = params[bucket[k]].grad();
      const auto& b = params[bucket[k + 1]].grad();
      if (!a.defined() || !b.defined()) return false;
      auto end = static_cast<const char*>(a.data_ptr()) + a.numel() * a.element_size();
      if (end != b.data_ptr()) return false;
    }
  }
  return true;
}

enum class ZeroGrad { kOptimizer, kSetToNone };

// `steps` SGD steps: the reference on the whole batch, two DDP ranks on halves. Returns the
// reference result and each rank's.
std::pair<Result, std::vector<Result>> train_both(parallel::DdpOptions options, int steps,
                                                  bool with_unused = false,
                                                  ZeroGrad zero = ZeroGrad::kOptimizer) {
  torch::manual_seed(7);
  DdpMlp init(16, with_unused);
  std::vector<torch::Tensor> xs, ys;
  for (int s = 0; s < steps; ++s) {
    xs.push_back(torch::randn({kDdpBatch, 8}));
    ys.push_back(torch::randn({kDdpBatch, 4}));
  }
  Result reference;
  {
    DdpMlp model = copy_of_mlp(init, with_unused);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < steps; ++s) {
      sgd.zero_grad();
      loss_of(model->forward(xs[s]), ys[s], kDdpBatch).backward();
      reference.grads = grads_of(*model);
      sgd.step();
    }
    reference.weights = weights_of(*model);
  }
  std::vector<DdpMlp> models{copy_of_mlp(init, with_unused), copy_of_mlp(init, with_unused)};
  std::vector<Result> results(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(models[rank]), context, options);
    results[rank].buckets_before = ddp.buckets();
    torch::optim::SGD sgd(models[rank]->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    const int64_t half = kDdpBatch / 2;
    for (int s = 0; s < steps; ++s) {
      if (zero == ZeroGrad::kOptimizer) {
        sgd.zero_grad();
      } else {
        ddp.module().zero_grad(/*set_to_none=*/true);
      }
      auto x = xs[s].narrow(0, rank * half, half);
      auto y = ys[s].narrow(0, rank * half, half);
      ASSERT_TRUE(context.trace()) << "the collective record is off (DDPX_TRACE=0)";
      const uint64_t before = newest_collective(context);
      loss_of(ddp.forward(x), y, half).backward();
      results[rank].last_step_bytes = 0;
      results[rank].last_step_collectives.clear();
      for (const auto& e : context.trace()->snapshot().entries) {
        if (e.seq <= before) continue;
        results[rank].last_step_bytes += e.sig.bytes();
        results[rank].last_step_collectives.push_back(e.sig.text());
      }
      results[rank].grads = grads_of(ddp.module());
      results[rank].grads_are_bucket_views &= grads_are_bucket_views(ddp.module(), ddp.buckets());
      results[rank].grads_in_shared_memory &= grads_in_shared_memory(ddp.module(), context);
      sgd.step();
    }
    results[rank].buckets_after = ddp.buckets();
    results[rank].weights = weights_of(ddp.module());
  });
  EXPECT_ALL_RANKS_OK(errors);
  return {reference, results};
}

TEST(DdpTest, TwoRanksMatchFullBatchGradientsAcrossSeveralBuckets) {
  parallel::DdpOptions options;
  options.first_bucket_bytes = 256;  // tiny caps: the 6 parameters spread over several buckets
  options.bucket_bytes = 1024;
  auto [reference, ranks] = train_both(options, /*steps=*/3);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[r].grads.size(), reference.grads.size());
    EXPECT_GE(ranks[r].buckets_before.size(), 3u);
    EXPECT_LE(max_diff(ranks[r].grads, reference.grads), 1e-5) << "rank " << r;
    EXPECT_LE(max_diff(ranks[r].weights, reference.weights), 1e-5) << "rank " << r;
  }
  EXPECT_TRUE(ranks[0].grads_are_bucket_views);
  // The first bucket holds the last-registered parameter (fc3.bias): backward meets it first.
  EXPECT_EQ(ranks[0].buckets_before.front().front(), 5u);
  EXPECT_EQ(ranks[0].buckets_after, ranks[1].buckets_after);
}

TEST(DdpTest, DefaultBucketsMatchFullBatch) {
  auto [reference, ranks] = train_both(parallel::DdpOptions{}, /*steps=*/2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].buckets_before.size(), 1u);
    EXPECT_LE(max_diff(ranks[r].weights, reference.weights), 1e-5) << "rank " << r;
  }
}

// On one host the buckets live in the shared segment and are averaged there in place;
// DDPX_SHM_ARENA=0 puts them in ordinary memory (divide, then sum through the chunk slots).
// Both give the full-batch result.
TEST(DdpTest, BucketsInSharedMemoryAndInOrdinaryMemoryMatchFullBatch) {
  parallel::DdpOptions options;
  options.first_bucket_bytes = 256;
  options.bucket_bytes = 1024;
  for (bool shared : {true, false}) {
    if (!shared) ::setenv("DDPX_SHM_ARENA", "0", 1);
    auto [reference, ranks] = train_both(options, /*steps=*/3);
    ::unsetenv("DDPX_SHM_ARENA");
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(ranks[r].grads_in_shared_memory, shared) << "rank " << r;
      EXPECT_LE(max_diff(ranks[r].grads, reference.grads), 1e-5) << "rank " << r;
      EXPECT_LE(max_diff(ranks[r].weights, reference.weights), 1e-5) << "rank " << r;
    }
  }
}

TEST(DdpTest, ZeroGradSetToNoneKeepsGradientsInBuckets) {
  parallel::DdpOptions options;
  options.first_bucket_bytes = 256;
  options.bucket_bytes = 1024;
  auto [reference, ranks] = train_both(options, /*steps=*/3, false, ZeroGrad::kSetToNone);
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(ranks[r].grads_are_bucket_views) << "rank " << r;
    EXPECT_LE(max_diff(ranks[r].weights, reference.weights), 1e-5) << "rank " << r;
  }
}

TEST(DdpTest, UnusedParameterGetsZeroGradientWithFindUnused) {
  parallel::DdpOptions options;
  options.find_unused_parameters = true;
  options.first_bucket_bytes = 128;
  options.bucket_bytes = 512;
  auto [reference, ranks] = train_both(options, /*steps=*/2, /*with_unused=*/true);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[r].grads.size(), reference.grads.size());
    EXPECT_LE(max_diff(ranks[r].grads, reference.grads), 1e-5) << "rank " << r;
    EXPECT_LE(max_diff(ranks[r].weights, reference.weights), 1e-5) << "rank " << r;
  }
}

TEST(DdpTest, UnusedParameterWithoutFindUnusedIsAnErrorNamingIt) {
  DdpMlp shared(16, /*with_unused=*/true);
  std::vector<DdpMlp> models{copy_of_mlp(shared, true), copy_of_mlp(shared, true)};
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(models[rank]), context);
    ddp.forward(torch::randn({2, 8})).sum().backward();
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " accepted a parameter without gradient";
    EXPECT_NE(error_text(errors[r]).find("unused.weight"), std::string::npos)
        << error_text(errors[r]);
    EXPECT_NE(error_text(errors[r]).find("find_unused_parameters"), std::string::npos);
  }
}

TEST(DdpTest, NoSyncAccumulationEqualsOneBigBatchStep) {
  torch::manual_seed(11);
  DdpMlp init;
  auto x = torch::randn({kDdpBatch, 8});
  auto y = torch::randn({kDdpBatch, 4});
  DdpMlp reference = copy_of_mlp(init);
  loss_of(reference->forward(x), y, kDdpBatch).backward();
  auto expected = grads_of(*reference);

  std::vector<DdpMlp> models{copy_of_mlp(init), copy_of_mlp(init)};
  std::vector<std::vector<torch::Tensor>> grads(2);
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(models[rank]), context);
    // Rank r owns rows [4r, 4r+4), seen as two micro-batches of 2; the first without sync.
    auto micro = [&](int m) {
      auto rows = x.narrow(0, 4 * rank + 2 * m, 2);
      loss_of(ddp.forward(rows), y.narrow(0, 4 * rank + 2 * m, 2), 4).backward();
    };
    {
      auto guard = ddp.no_sync();
      micro(0);
    }
    micro(1);
    grads[rank] = grads_of(ddp.module());
  });
  EXPECT_ALL_RANKS_OK(errors);
  for (int r = 0; r < 2; ++r) EXPECT_LE(max_diff(grads[r], expected), 1e-5) << "rank " << r;
}

// The hooks halve the bytes on the wire (the collective record of the step's bucket
// all-reduces, against the same buckets in fp32), and the averaged gradients stay within the
// 16-bit format's rounding of each tensor's largest value.
TEST(DdpTest, CompressionHooksStayCloseToFp32) {
  parallel::DdpOptions fp32_options;
  fp32_options.first_bucket_bytes = 256;
  auto fp32 = train_both(fp32_options, /*steps=*/1).second;
  ASSERT_GT(fp32[0].last_step_bytes, 0) << "no gradient collective recorded";
  for (CommHook hook : {CommHook::kFp16Compress, CommHook::kBf16Compress}) {
    SCOPED_TRACE(hook == CommHook::kFp16Compress ? "fp16" : "bf16");
    parallel::DdpOptions options = fp32_options;
    options.comm_hook = hook;
    auto [reference, ranks] = train_both(options, /*steps=*/1);
    // fp16 rounds to 2^-11 of a value, bfloat16 to 2^-8; each rank's half and their sum are
    // rounded, so the error stays under a few roundings of the tensor's largest gradient.
    const float tolerance = hook == CommHook::kFp16Compress ? 2e-3f : 1.5e-2f;
    for (int r = 0; r < 2; ++r) {
      const double ratio = double(ranks[r].last_step_bytes) / double(fp32[r].last_step_bytes);
      std::string collectives;
      for (const auto& c : ranks[r].last_step_collectives) collectives += " " + c;
      EXPECT_NEAR(ratio, 0.5, 0.02)
          << "rank " << r << " sent " << ranks[r].last_step_bytes << " bytes against fp32's "
          << fp32[r].last_step_bytes << ":" << collectives;
      for (size_t i = 0; i < reference.grads.size(); ++i) {
        const float scale = reference.grads[i].abs().max().item<float>();
        const float diff = (ranks[r].grads[i] - reference.grads[i]).abs().max().item<float>();
        EXPECT_LE(diff, tolerance * scale) << "rank " << r << " param " << i;
      }
    }
  }
}

TEST(DdpTest, ConstructionCopiesRankZeroWeightsAndBuffers) {
  torch::manual_seed(1);
  DdpMlp zero;
  torch::manual_seed(2);
  DdpMlp one;
  {
    torch::NoGradGuard no_grad;
    one->steps.fill_(5);
  }
  auto expected = weights_of(*zero);
  std::vector<DdpMlp> models{zero, one};
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(models[rank]), context);
  });
  EXPECT_ALL_RANKS_OK(errors);
  EXPECT_EQ(max_diff(weights_of(*one), expected), 0.0f);
  EXPECT_TRUE(torch::equal(one->steps, torch::zeros({2})));
}

TEST(DdpTest, ShapeMismatchNamesParameterAndRank) {
  std::vector<DdpMlp> models{DdpMlp(16), DdpMlp(17)};
  auto errors = run_ranks(2, [&](int rank, Context& context) {
    parallel::DistributedDataParallel ddp(torch::nn::AnyModule(models[rank]), context);
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " accepted different models";
    const std::string message = error_text(errors[r]);
    EXPECT_NE(message.find("'fc1.weight'"), std::string::npos) << message;
    EXPECT_NE(message.find("[17, 8]"), std::string::npos) << message;
    EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  }
}

TEST(DdpTest, SingleProcessWrapperJustRunsTheModule) {
  DdpMlp model;
  parallel::DistributedDataParallel ddp(torch::nn::AnyModule(model), nullptr);
  auto x = torch::randn({3, 8});
  EXPECT_TRUE(torch::equal(ddp.forward(x), model->forward(x)));
  EXPECT_TRUE(ddp.buckets().empty());
}

}  // namespace
}  // namespace ddpx::dist
