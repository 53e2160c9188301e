// Choosing the torch to build against: a Python without torch is refused in one clear line, by
// scripts/python-env and by CMake's configure step, before anything is built.
#include <gtest/gtest.h>

#include "support/support.h"

namespace ddpx {
namespace {

using test::run_command;

// A real interpreter without torch: a bare virtual environment.
std::string python_without_torch(const test::TempDir& dir) {
  const std::string venv = dir.file("venv");
  auto made = run_command("python3 -m venv --without-pip " + venv, 120);
  EXPECT_EQ(made.exit_code, 0) << made.output;
  return venv + "/bin/python";
}

TEST(ConfigureTest, PythonEnvRefusesADdpxPythonWithoutTorch) {
  test::TempDir dir;
  const std::string python = python_without_torch(dir);
  auto r =
      run_command("DDPX_PYTHON=" + python + " " + test::source_dir() + "/scripts/python-env", 120);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("DDPX_PYTHON=" + python + ": cannot import torch"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("unset DDPX_PYTHON"), std::string::npos) << r.output;
}

TEST(ConfigureTest, CMakeRefusesADdpxPythonWithoutTorch) {
  test::TempDir dir;
  const std::string python = python_without_torch(dir);
  auto r = run_command("cmake -S " + test::source_dir() + " -B " + dir.file("build") +
                           " -G Ninja -DDDPX_PYTHON=" + python,
                       300);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("DDPX_PYTHON=" + python + " cannot import torch"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("scripts/python-env"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ddpx
