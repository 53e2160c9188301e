// The learning-rate schedule and option validation.
#include "train/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "core/error.h"
#include "optim/learning_rate.h"
#include "support/support.h"
#include "train/options.h"

namespace ddpx::train {
namespace {

TEST(LrScheduleTest, CosineStartsAtBaseAndEndsNearZero) {
  LrSchedule s(Schedule::kCosine, 0.1, 100, 0);
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_NEAR(s.lr_at(50), 0.05, 1e-12);
  EXPECT_LT(s.lr_at(99), 0.001);
}

TEST(LrScheduleTest, WarmupRisesLinearlyToBase) {
  LrSchedule s(Schedule::kConstant, 0.2, 100, 10);
  EXPECT_NEAR(s.lr_at(0), 0.02, 1e-12);
  EXPECT_NEAR(s.lr_at(4), 0.1, 1e-12);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 0.2);
  EXPECT_DOUBLE_EQ(s.lr_at(99), 0.2);
}

TEST(LrScheduleTest, StepDecaysAtHalfAndThreeQuarters) {
  LrSchedule s(Schedule::kStep, 1.0, 100, 0);
  EXPECT_DOUBLE_EQ(s.lr_at(49), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(50), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(75), 0.01);
}

// --lr_schedule step --lr_step_epochs 3 --lr_gamma 0.5 at 4 updates an epoch: each step's rate
// equals torch.optim.lr_scheduler.StepLR(step_size=3, gamma=0.5)'s for that step's epoch (StepLR
// stepped once an epoch), over 10 epochs; also at gamma 0.1, the ImageNet recipe's.
TEST(LrScheduleTest, StepEveryNEpochsMatchesTorchStepLR) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("torch"))
      << "needs torch in DDPX_PYTHON (scripts/python-env --tests)";
  // One Python for both decays: a line of 10 epochs' rates for each gamma.
  const std::vector<double> gammas{0.5, 0.1};
  test::TempDir dir;
  test::write_bytes(dir.file("steplr.py"),
                    "import torch\n"
                    "for gamma in (0.5, 0.1):\n"
                    "    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)\n"
                    "    s = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=gamma)\n"
                    "    for e in range(10):\n"
                    "        print(repr(opt.param_groups[0]['lr']))\n"
                    "        opt.step()\n"
                    "        s.step()\n");
  const auto r =
      test::run_command(test::python_binary() + " " + dir.file("steplr.py") + " 2>&1", 60);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  const int64_t per_epoch = 4;
  for (double gamma : gammas) {
    LrSchedule s(Schedule::kStep, 0.1, 10 * per_epoch, 0, StepDecay{3 * per_epoch, gamma});
    for (int64_t epoch = 0; epoch < 10; ++epoch) {
      double expected = 0;
      ASSERT_TRUE(lines >> expected) << r.output;
      for (int64_t k = 0; k < per_epoch; ++k)
        EXPECT_NEAR(s.lr_at(epoch * per_epoch + k), expected, 1e-15 + 1e-12 * expected)
            << "gamma " << gamma << ", epoch " << epoch << ", update " << k;
    }
  }
}

TEST(OptionsTest, StepFlagsGoWithTheStepSchedule) {
  TrainOptions o;
  o.lr_step_epochs = 30;
  try {
    validate(o);  // the default schedule is cosine
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--lr_schedule step"), std::string::npos) << e.what();
  }
  o.lr_schedule = Schedule::kStep;
  EXPECT_NO_THROW(validate(o));
  o.lr_gamma = 0;
  EXPECT_THROW(validate(o), Error);
}

TEST(OptimizerTest, ABatchsLearningRateReachesEveryGroupAndNoneKeepsTheRate) {
  torch::Tensor w = torch::zeros({2}, torch::requires_grad());
  auto opt = make_optimizer({w}, {Optimizer::kAdamw, 0.01, 0.05, 0.9});
  optim::apply_learning_rate(*opt, 0.5);
  EXPECT_DOUBLE_EQ(opt->param_groups()[0].options().get_lr(), 0.5);
  optim::apply_learning_rate(*opt, -1);  // a batch that carries no rate
  EXPECT_DOUBLE_EQ(opt->param_groups()[0].options().get_lr(), 0.5);
}

TEST(OptionsTest, RejectsBadValuesNamingTheFlag) {
  TrainOptions o;
  o.batch_size = 0;
  try {
    validate(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(std::string(e.what()).find("--batch_size"), std::string::npos);
  }
  o = TrainOptions();
  o.resume = "auto";
  EXPECT_THROW(validate(o), Error);  // auto needs --save_dir
  o.save_dir = "/tmp/x";
  EXPECT_NO_THROW(validate(o));
}

// A batch the micro-batches do not divide is refused at start, naming the flags and a batch
// that works; left automatic, M is 2P, or P where only P divides the batch.
TEST(OptionsTest, PipelineMicroBatchesMustDivideTheBatch) {
  TrainOptions o;
  o.pipeline_parallel = 3;
  o.batch_size = 12;
  EXPECT_EQ(pipeline_microbatches(o, o.batch_size), 6);
  EXPECT_NO_THROW(validate(o));
  o.batch_size = 9;
  EXPECT_EQ(pipeline_microbatches(o, o.batch_size), 3);
  EXPECT_NO_THROW(validate(o));
  o.batch_size = 16;
  EXPECT_EQ(test::usage_error([&] { validate(o); }),
            "--batch_size 16 divides into neither 6 nor 3 micro-batches (--pipeline_parallel 3): "
            "pick a batch that 6 divides (12 or 18) or give --microbatches M with M dividing 16");
  o.microbatches = 4;
  EXPECT_NO_THROW(validate(o));
  o.microbatches = 5;
  EXPECT_EQ(test::usage_error([&] { validate(o); }),
            "--batch_size 16 does not divide into --microbatches 5: each micro-batch takes the "
            "same rows; pick a batch that 5 divides (15 or 20) or other --microbatches");
  o.batch_size_scaled = true;  // the replica's batch is checked once the job has joined
  EXPECT_NO_THROW(validate(o));
}

}  // namespace
}  // namespace ddpx::train
