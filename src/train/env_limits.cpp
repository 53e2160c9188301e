#include "train/env_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/env.h"
#include "core/error.h"

namespace ddpx::train {
namespace {

struct Variable {
  const char* name;
  const char* effect;  // with {} for the value
};
constexpr Variable kVariables[] = {
    {"DDPX_EPOCHS", "--num_epochs {}"},
    {"DDPX_MAX_STEPS", "train batches per epoch <= {}"},
    {"DDPX_MAX_TEST_BATCHES", "test batches <= {}"},
    {"DDPX_BATCH_SIZE", "--batch_size {} --eval_batch_size {}"},
};

int64_t capped(int64_t limit, int64_t current) {
  return current > 0 ? std::min(current, limit) : limit;  // 0 means all
}

}  // namespace

std::vector<EnvLimit> env_limits() {
  std::vector<EnvLimit> limits;
  for (const Variable& v : kVariables) {
    auto text = env::get(v.name);
    if (!text) continue;
    char* end = nullptr;
    const long long n = std::strtoll(text->c_str(), &end, 10);
    DDPX_CHECK(!text->empty() && *end == '\0' && n >= 1, ErrorKind::kUsage,
               "environment variable {}='{}' is not a whole number >= 1; set it to one, or "
               "unset it to train as the command line says",
               v.name, *text);
    limits.push_back({v.name, n, fmt::format(fmt::runtime(v.effect), n, n)});
  }
  return limits;
}

void apply_env_limits(TrainOptions& o) {
  for (const EnvLimit& limit : env_limits()) {
    if (limit.variable == "DDPX_EPOCHS") {
      o.num_epochs = limit.value;
    } else if (limit.variable == "DDPX_MAX_STEPS") {
      o.limit_train_batches = capped(limit.value, o.limit_train_batches);
    } else if (limit.variable == "DDPX_MAX_TEST_BATCHES") {
      o.limit_test_batches = capped(limit.value, o.limit_test_batches);
    } else if (limit.variable == "DDPX_BATCH_SIZE") {
      o.batch_size = o.eval_batch_size = limit.value;
    }
  }
}

std::string env_limits_line(const TrainOptions& o) {
  TrainOptions applied = o;
  apply_env_limits(applied);
  if (applied.num_epochs != o.num_epochs || applied.limit_train_batches != o.limit_train_batches ||
      applied.limit_test_batches != o.limit_test_batches || applied.batch_size != o.batch_size ||
      applied.eval_batch_size != o.eval_batch_size)
    return "";
  std::string line;
  for (const EnvLimit& limit : env_limits()) {
    line += fmt::format("{}{}={} ({})", line.empty() ? "limits from the environment: " : " | ",
                        limit.variable, limit.value, limit.effect);
  }
  return line;
}

}  // namespace ddpx::train
