// See reference.h.
#include "reference.h"

#include <sstream>

#include <gtest/gtest.h>

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
      "    sys.exit(" + std::to_string(kMissingModuleExit) + ")\n"
      "torch.set_num_threads(1)\n" + body;
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

}  // namespace ddpx::test
