// See reference.h.
#include "reference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "support/support.h"

namespace ddpx::test {
namespace {
constexpr int kMissingModuleExit = 77;
}  // namespace

TorchvisionRun run_torchvision(const std::string& body, int timeout_s) {
  const std::string script =
      "import sys\n"
      "try:\n"
      "    import torch, torchvision, torch.nn as nn\n"
      "except ImportError:\n"
      "    sys.exit(" +
      std::to_string(kMissingModuleExit) +
      ")\n"
      "torch.set_num_threads(1)\n" +
      body;
  CommandResult result = run_python(script, timeout_s);
  TorchvisionRun run;
  if (result.exit_code == kMissingModuleExit) return run;
  EXPECT_EQ(result.exit_code, 0) << "reference script failed:\n" << result.output;
  run.available = true;
  std::istringstream in(result.output);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("REF ", 0) == 0) run.lines.push_back(line.substr(4));
  }
  return run;
}

void expect_logits_match(const torch::Tensor& y, const torch::Tensor& expected,
                         const std::string& label) {
  ASSERT_EQ(y.sizes(), expected.sizes()) << label;
  const double scale = expected.abs().max().item<double>();
  const double max_diff = (y - expected).abs().max().item<double>();
  ASSERT_TRUE(std::isfinite(scale) && scale > 0.0) << label << ": reference output scale " << scale;
  std::printf("  %s: max |diff| %.3g at output scale %.3g\n", label.c_str(), max_diff, scale);
  EXPECT_LE(max_diff / scale, kRelativeTolerance)
      << label << ": max |diff| " << max_diff << " at output scale " << scale;
}

}  // namespace ddpx::test
