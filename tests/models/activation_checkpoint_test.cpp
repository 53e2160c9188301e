// checkpoint() (models/activation_checkpoint.h): gradients bit for bit those of running the block
// directly, dropout included (the random state replayed), the random stream after backward where
// the direct run leaves it, a first block whose input needs no gradient still training its
// parameters, and the block's activations not kept between forward and backward; the
// checkpointed wrapper of a zoo model (checkpointed_model.h) is the model to every reader.
#include "models/activation_checkpoint.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include "models/checkpointed_model.h"
#include "models/zoo/registry.h"
#include "parallel/planner/tensor_bytes.h"

namespace ddpx::models {
namespace {

torch::nn::Sequential block() {
  torch::manual_seed(1);
  return torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::GELU(),
                               torch::nn::Dropout(0.3), torch::nn::Linear(64, 16));
}

struct Grads {
  std::vector<torch::Tensor> params;
  torch::Tensor input, next_draw;
};

Grads run(bool checkpointed, bool input_grad) {
  auto net = block();
  torch::manual_seed(7);
  torch::Tensor x = torch::randn({8, 16}).requires_grad_(input_grad);
  BlockForward fn = [net](const torch::Tensor& in) mutable { return net->forward(in); };
  torch::Tensor h = checkpointed ? checkpoint(fn, x) : fn(x);
  torch::Tensor y = checkpointed ? checkpoint(fn, torch::tanh(h)) : fn(torch::tanh(h));
  y.pow(2).sum().backward();
  Grads g;
  for (auto& p : net->parameters()) g.params.push_back(p.grad().clone());
  if (input_grad) g.input = x.grad().clone();
  g.next_draw = torch::rand({4});
  return g;
}

TEST(ActivationCheckpointTest, GradientsAreBitwiseThoseOfTheDirectRunDropoutIncluded) {
  for (bool input_grad : {true, false}) {
    Grads direct = run(false, input_grad), ckpt = run(true, input_grad);
    ASSERT_EQ(direct.params.size(), ckpt.params.size());
    for (size_t i = 0; i < direct.params.size(); ++i) {
      EXPECT_TRUE(torch::equal(direct.params[i], ckpt.params[i]))
          << "parameter " << i << " (input grad " << input_grad << ")";
    }
    if (input_grad) EXPECT_TRUE(torch::equal(direct.input, ckpt.input));
    // The recompute put the random stream back: training draws on as without checkpoints.
    EXPECT_TRUE(torch::equal(direct.next_draw, ckpt.next_draw));
  }
}

TEST(ActivationCheckpointTest, KeepsOnlyTheBlocksInputBetweenForwardAndBackward) {
  auto net = block();
  torch::Tensor x = torch::randn({512, 16}, torch::requires_grad());
  BlockForward fn = [net](const torch::Tensor& in) mutable { return net->forward(in); };
  torch::Tensor y = checkpoint(fn, x);
  // The graph holds one node with x saved; the direct run would hold the 512x64 hidden
  // activations (GELU's input, dropout's mask) as well.
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->next_edges().size(), 2u);  // x and the anchor, no Linear node
  // Under no_grad (evaluation) it is the block itself, with no graph at all.
  torch::NoGradGuard no_grad;
  net->eval();
  torch::Tensor plain = checkpoint(fn, x);
  EXPECT_FALSE(plain.grad_fn());
  EXPECT_TRUE(torch::equal(plain, net->forward(x)));
}

}  // namespace
}  // namespace ddpx::models

namespace ddpx::models {
namespace {

// The wrapper is the model to every reader (names, order) and trains it as the model does: a
// ResNet (BatchNorm: its statistics move once a step) and a ViT, gradients and buffers bit for
// bit. A wrapper that checkpointed nothing would pass that too, so the forward must also leave
// fewer activation bytes held for its backward than the plain model's: the CPU tensor bytes the
// forward added, counted at the allocator as `ddpx bench memory` counts them. At 32 px the
// ResNet's stem, which is not recomputed, holds half of them (1.81 MB plain, 1.01 MB with its
// blocks recomputed when this was written), hence 3/4, not 1/2.
TEST(CheckpointedModelTest, AZooModelTrainsAsItselfWithTheSameNamesAndOrder) {
  for (const char* name : {"resnet18", "vit_b_16"}) {
    ModelConfig config{10, 32, Stem::kImagenet};
    torch::manual_seed(3);
    torch::nn::AnyModule plain = create_model(name, config);
    torch::manual_seed(3);
    torch::nn::AnyModule wrapped =
        with_activation_checkpointing(create_model(name, config), {1}, name);
    auto pp = plain.ptr()->named_parameters(), wp = wrapped.ptr()->named_parameters();
    ASSERT_EQ(pp.size(), wp.size()) << name;
    for (size_t i = 0; i < pp.size(); ++i) EXPECT_EQ(pp[i].key(), wp[i].key()) << name;
    ASSERT_EQ(plain.ptr()->named_buffers().size(), wrapped.ptr()->named_buffers().size());

    torch::manual_seed(9);
    torch::Tensor x = torch::randn({4, 3, 32, 32});
    int64_t held[2] = {0, 0};
    for (auto* m : {&plain, &wrapped}) {
      torch::manual_seed(5);
      parallel::CpuTensorBytes bytes;
      const int64_t before = bytes.current();
      torch::Tensor loss = m->forward(x).pow(2).sum();
      held[m == &wrapped] = bytes.current() - before;
      loss.backward();
    }
    EXPECT_LT(held[1], held[0] * 3 / 4)
        << name << ": the recomputed blocks keep only their inputs (bytes held at the start of "
        << "backward, plain and wrapped: " << held[0] << ", " << held[1] << ")";
    for (size_t i = 0; i < pp.size(); ++i) {
      EXPECT_TRUE(torch::equal(pp[i].value().grad(), wp[i].value().grad()))
          << name << " " << pp[i].key();
    }
    auto pb = plain.ptr()->named_buffers(), wb = wrapped.ptr()->named_buffers();
    for (size_t i = 0; i < pb.size(); ++i)
      EXPECT_TRUE(torch::equal(pb[i].value(), wb[i].value())) << name << " " << pb[i].key();
  }
  auto error = [](const char* text) {
    try {
      parse_activation_checkpointing(text);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error("every:0").find("K in every:K must be a whole number >= 1"), std::string::npos);
  EXPECT_NE(error("blocks:x").find("N in blocks:N must be a whole number >= 1"), std::string::npos);
  EXPECT_NE(error("some").find("expected none, blocks, blocks:N or every:K"), std::string::npos);
  EXPECT_TRUE(checkpoints_layer({2}, 1, 6) && !checkpoints_layer({2}, 2, 6) &&
              checkpoints_layer({2}, 3, 6) && !checkpoints_layer({2}, 5, 6) &&
              !checkpoints_layer({1}, 0, 6));
  // blocks:2 of a stem, 4 blocks and a head: blocks 1 and 2 only, and it names itself back.
  const auto first_two = parse_activation_checkpointing("blocks:2");
  std::vector<bool> chosen;
  for (size_t i = 0; i < 6; ++i) chosen.push_back(checkpoints_layer(first_two, i, 6));
  EXPECT_EQ(chosen, (std::vector<bool>{false, true, true, false, false, false}));
  EXPECT_EQ(name(first_two), "blocks:2");
  EXPECT_EQ(name(parse_activation_checkpointing("every:3")), "every:3");
}

}  // namespace
}  // namespace ddpx::models
