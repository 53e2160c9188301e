// The environment's limits (train/env_limits.h): applied over the command line's values, named
// in one line only when the options carry them, and a bad value refused naming the variable.
#include "train/env_limits.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "support/support.h"

namespace ddpx::train {
namespace {

// Sets the four variables for one test and removes them after it.
class EnvLimitsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name :
         {"DDPX_EPOCHS", "DDPX_MAX_STEPS", "DDPX_MAX_TEST_BATCHES", "DDPX_BATCH_SIZE"})
      ::unsetenv(name);
  }
};

TEST_F(EnvLimitsTest, OverrideTheCommandLineAndAreNamedWhenApplied) {
  TrainOptions o;
  o.num_epochs = 10;
  o.batch_size = 1024;
  o.limit_train_batches = 5;
  EXPECT_EQ(env_limits_line(o), "");  // none set
  ::setenv("DDPX_EPOCHS", "1", 1);
  ::setenv("DDPX_MAX_STEPS", "2", 1);
  ::setenv("DDPX_MAX_TEST_BATCHES", "3", 1);
  ::setenv("DDPX_BATCH_SIZE", "4", 1);
  EXPECT_EQ(env_limits_line(o), "") << "options the limits were not applied to claim none";
  apply_env_limits(o);
  EXPECT_EQ(o.num_epochs, 1);
  EXPECT_EQ(o.limit_train_batches, 2);  // the smaller of 5 and 2
  EXPECT_EQ(o.limit_test_batches, 3);   // was 0: all
  EXPECT_EQ(o.batch_size, 4);
  EXPECT_EQ(o.eval_batch_size, 4);
  EXPECT_EQ(env_limits_line(o),
            "limits from the environment: DDPX_EPOCHS=1 (--num_epochs 1) | DDPX_MAX_STEPS=2 "
            "(train batches per epoch <= 2) | DDPX_MAX_TEST_BATCHES=3 (test batches <= 3) | "
            "DDPX_BATCH_SIZE=4 (--batch_size 4 --eval_batch_size 4)");
  TrainOptions fewer;
  fewer.limit_train_batches = 1;  // already below DDPX_MAX_STEPS: kept
  ::unsetenv("DDPX_EPOCHS");
  ::unsetenv("DDPX_MAX_TEST_BATCHES");
  ::unsetenv("DDPX_BATCH_SIZE");
  apply_env_limits(fewer);
  EXPECT_EQ(fewer.limit_train_batches, 1);
}

TEST_F(EnvLimitsTest, ABadValueIsAUsageErrorNamingTheVariable) {
  for (const char* bad : {"0", "-1", "two", "3x"}) {  // empty counts as unset (core/env.h)
    ::setenv("DDPX_MAX_STEPS", bad, 1);
    TrainOptions o;
    const std::string message = test::usage_error([&] { apply_env_limits(o); });
    EXPECT_NE(message.find("DDPX_MAX_STEPS='" + std::string(bad) + "'"), std::string::npos)
        << message;
  }
}

}  // namespace
}  // namespace ddpx::train
