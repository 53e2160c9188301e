// The recipe options' building blocks: label smoothing and soft targets, mixup and cutmix, the
// weights' EMA (and its checkpoint), learning-rate scaling with the global batch, the recipes.
#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <set>

#include "support/support.h"
#include "train/checkpoint.h"
#include "train/ema.h"
#include "train/loss.h"
#include "train/mixing.h"
#include "train/optim.h"
#include "train/recipes.h"

namespace ddpx::train {
namespace {

TEST(LabelSmoothingTest, SmoothedTargetsMatchTheFormulaAndTorchsLoss) {
  auto labels = torch::tensor({2, 0}, torch::kLong);
  auto t = smoothed_one_hot(labels, 4, 0.2);  // off 0.05, on 0.85
  EXPECT_NEAR(t[0][2].item<float>(), 0.85f, 1e-6);
  EXPECT_NEAR(t[0][1].item<float>(), 0.05f, 1e-6);
  EXPECT_NEAR(t.sum(1)[1].item<float>(), 1.0f, 1e-6);

  torch::manual_seed(0);
  auto logits = torch::randn({2, 4});
  // torch's label_smoothing and the soft-target loss on smoothed targets are the same loss.
  EXPECT_NEAR(cross_entropy(logits, labels, 0.2).item<double>(),
              soft_target_cross_entropy(logits, t).item<double>(), 1e-6);
  // A confident, correct prediction costs more with smoothing: it no longer aims at 1.0.
  auto confident = torch::tensor({{0.f, 0.f, 12.f, 0.f}, {12.f, 0.f, 0.f, 0.f}});
  EXPECT_LT(cross_entropy(confident, labels, 0.0).item<double>(), 1e-4);
  EXPECT_GT(cross_entropy(confident, labels, 0.2).item<double>(), 0.5);
}

TEST(MixingTest, MixupIsAConvexCombinationWithTheMirroredBatch) {
  MixOptions o;
  o.mixup_alpha = 0.4;
  o.num_classes = 3;
  BatchMixer mixer(o, 1);
  ASSERT_TRUE(mixer.enabled());
  torch::manual_seed(1);
  auto images = torch::randn({6, 3, 4, 4});
  auto labels = torch::tensor({0, 1, 2, 0, 1, 2}, torch::kLong);
  auto m = mixer.mix(images, labels);
  EXPECT_FALSE(m.cutmix);
  EXPECT_GT(m.lam, 0.0);
  EXPECT_LT(m.lam, 1.0);
  EXPECT_TRUE(torch::allclose(m.images, images * m.lam + images.flip(0) * (1 - m.lam)));
  // Row 0 mixes label 0 (weight lam) with row 5's label 2 (weight 1 - lam).
  EXPECT_NEAR(m.targets[0][0].item<double>(), m.lam, 1e-6);
  EXPECT_NEAR(m.targets[0][2].item<double>(), 1 - m.lam, 1e-6);
  EXPECT_TRUE(torch::allclose(m.targets.sum(1), torch::ones({6})));
}

TEST(MixingTest, CutmixPastesABoxAndWeighsTargetsByItsArea) {
  MixOptions o;
  o.cutmix_alpha = 1.0;
  o.num_classes = 2;
  BatchMixer mixer(o, 7);
  auto images = torch::zeros({2, 1, 16, 16});
  images[1].fill_(1.0);  // image 0 black, image 1 white: the box is visible
  auto labels = torch::tensor({0, 1}, torch::kLong);
  for (int i = 0; i < 20; ++i) {
    auto m = mixer.mix(images, labels);
    ASSERT_TRUE(m.cutmix);
    double pasted = m.images[0].mean().item<double>();  // share of image 0 now from image 1
    EXPECT_NEAR(pasted, 1 - m.lam, 1e-6);
    EXPECT_NEAR(m.targets[0][1].item<double>(), 1 - m.lam, 1e-6);
    // Every pixel comes from one of the two images.
    EXPECT_TRUE(m.images.eq(0).logical_or(m.images.eq(1)).all().item<bool>());
  }
}

TEST(MixingTest, BothEnabledUseEachAboutHalfTheTime) {
  MixOptions o;
  o.mixup_alpha = 0.2;
  o.cutmix_alpha = 1.0;
  o.num_classes = 2;
  BatchMixer mixer(o, 3);
  auto images = torch::rand({4, 1, 8, 8});
  auto labels = torch::tensor({0, 1, 0, 1}, torch::kLong);
  int cutmix = 0;
  for (int i = 0; i < 400; ++i) cutmix += mixer.mix(images, labels).cutmix ? 1 : 0;
  EXPECT_NEAR(cutmix / 400.0, 0.5, 0.08);
}

// Linear then BatchNorm: parameters, float buffers and an integer buffer (num_batches_tracked).
struct NetImpl : torch::nn::Module {
  NetImpl()
      : fc(register_module("fc", torch::nn::Linear(3, 2))),
        bn(register_module("bn", torch::nn::BatchNorm1d(2))) {}
  torch::Tensor forward(const torch::Tensor& x) { return bn(fc(x)); }
  torch::nn::Linear fc;
  torch::nn::BatchNorm1d bn;
};
TORCH_MODULE(Net);

Net small_net() { return Net(); }

TEST(EmaTest, AveragesWeightsAndBuffersWithTheWarmedUpDecay) {
  torch::manual_seed(0);
  auto model = small_net();
  ModelEma ema(module_tensors(*model), 0.9);
  EXPECT_DOUBLE_EQ(ema.decay_at(0), 0.1);  // (1 + 0) / (10 + 0)
  EXPECT_DOUBLE_EQ(ema.decay_at(1000), 0.9);

  auto start = model->parameters()[0].detach().clone();
  {
    torch::NoGradGuard no_grad;
    model->parameters()[0].add_(1.0);
    model->buffers()[0].fill_(2.0);  // running_mean
  }
  ema.update(module_tensors(*model));  // d = 0.1: ema = 0.1 * start + 0.9 * (start + 1)
  // Parameters (fc.weight, fc.bias, bn.weight, bn.bias), then buffers (running_mean,
  // running_var, num_batches_tracked).
  auto averaged = ema.average()[0];
  EXPECT_TRUE(torch::allclose(averaged, start + 0.9));
  EXPECT_TRUE(torch::allclose(ema.average()[4], torch::full({2}, 1.8)))
      << "BatchNorm statistics are averaged too";
  EXPECT_EQ(ema.average()[6].item<int64_t>(), model->buffers()[2].item<int64_t>())
      << "integer buffers are copied";
  EXPECT_FALSE(averaged.requires_grad());
  EXPECT_EQ(ema.updates(), 1);
}

TEST(EmaTest, CheckpointKeepsTheAverageBesideTheWeights) {
  test::TempDir dir;
  torch::manual_seed(0);
  auto model = small_net();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
  ModelEma ema(module_tensors(*model), 0.99);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(0.5);
  }
  ema.update(module_tensors(*model));
  TrainPosition position{1, 10};
  position.ema_updates = ema.updates();
  const CheckpointMeta meta{"net", 2, "imagenet", 3};
  auto whole = small_net();  // the average whole, as a plan assembles it
  for (size_t i = 0; i < ema.average().size(); ++i)
    module_tensors(*whole)[i].set_data(ema.average()[i]);
  save_checkpoint(dir.file("c.ddpx"), *model, optimizer, position, meta, whole.ptr().get());

  auto model2 = small_net();
  torch::optim::SGD optimizer2(model2->parameters(), torch::optim::SGDOptions(0.1));
  auto shadow2 = small_net();
  TrainPosition loaded =
      load_checkpoint(dir.file("c.ddpx"), *model2, optimizer2, meta, shadow2.ptr().get());
  EXPECT_EQ(loaded.ema_updates, 1);
  auto want = ema.average();
  auto got = module_tensors(*shadow2);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(want[i].equal(got[i])) << "tensor " << i;
  EXPECT_FALSE(got[0].equal(model2->parameters()[0])) << "the average is not the weights";

  // A checkpoint written without EMA says so.
  save_checkpoint(dir.file("plain.ddpx"), *model, optimizer, TrainPosition{1, 10}, meta);
  EXPECT_EQ(load_checkpoint(dir.file("plain.ddpx"), *model2, optimizer2, meta, shadow2.ptr().get())
                .ema_updates,
            -1);
}

TEST(LrScaleTest, LinearAndSqrtFollowTheGlobalBatch) {
  EXPECT_DOUBLE_EQ(scaled_learning_rate(0.1, LrScale::kNone, 1024, 256), 0.1);
  EXPECT_DOUBLE_EQ(scaled_learning_rate(0.1, LrScale::kLinear, 1024, 256), 0.4);
  EXPECT_DOUBLE_EQ(scaled_learning_rate(0.1, LrScale::kSqrt, 1024, 256), 0.2);
  EXPECT_DOUBLE_EQ(scaled_learning_rate(0.1, LrScale::kLinear, 128, 256), 0.05);
}

TEST(RecipesTest, NamesAreUniqueAndEachRecipeSaysItsResult) {
  std::set<std::string> names;
  for (const auto& r : recipes()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_FALSE(r.flags.empty()) << r.name;
    EXPECT_FALSE(r.result.empty()) << r.name;
    EXPECT_EQ(find_recipe(r.name), &r);
    for (const auto& [flag, value] : r.flags) EXPECT_EQ(flag.rfind("--", 0), 0u) << flag;
  }
  EXPECT_EQ(find_recipe("no-such-recipe"), nullptr);
  ASSERT_NE(find_recipe("seed-resnet101"), nullptr);
  EXPECT_EQ(recipe_command(*find_recipe("seed-resnet101")),
            "--model resnet101 --learning_rate 0.002 --optimizer sgd --batch_size 1024 "
            "--normalize neg_one_one --num_epochs 10");
}

}  // namespace
}  // namespace ddpx::train
