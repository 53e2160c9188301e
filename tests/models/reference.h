// Runs reference scripts under DDPX_PYTHON with torch and torchvision imported, so tests
// compare ddpx models against the real torchvision. Tests skip when torchvision is missing
// (fail where DDPX_REQUIRE_TEST_TOOLS=1).
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "support/support.h"

namespace ddpx::test {

struct TorchvisionRun {
  bool available = false;          // false: torch/torchvision cannot be imported here
  std::vector<std::string> lines;  // stdout+stderr lines starting with "REF " (prefix removed)
};

// `body` runs after `import torch, torchvision, torch.nn as nn`; it reports with
// print("REF ...", flush=True). A failing script (or one running past timeout_s) fails the
// calling test.
TorchvisionRun run_torchvision(const std::string& body, int timeout_s = 300);

// Relative to the output's largest magnitude; float32 sums over thousands of terms differ in
// order between the two builds, so bit equality is not expected.
constexpr double kRelativeTolerance = 1e-4;

// Expects ddpx's logits `y` to match torchvision's `expected` within kRelativeTolerance of the
// output scale, and prints the max difference under `label` (llm.c style).
void expect_logits_match(const torch::Tensor& y, const torch::Tensor& expected,
                         const std::string& label);

}  // namespace ddpx::test

// Inside a TEST: skips with a message when torchvision is not installed (fails where
// DDPX_REQUIRE_TEST_TOOLS=1, support.h).
#define DDPX_RUN_TORCHVISION(var, body)                                   \
  ::ddpx::test::TorchvisionRun var = ::ddpx::test::run_torchvision(body); \
  DDPX_SKIP_WITHOUT_TOOL(var.available)                                   \
      << "DDPX_PYTHON lacks torch/torchvision "                           \
         "(scripts/python-env --tests installs them) for reference data"
