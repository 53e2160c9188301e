// The two executables: `ddpx` runs the launcher itself (without loading libtorch) and hands
// every other command to `ddpx-torch` beside it, with the same arguments and exit code.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "models/zoo/registry.h"
#include "support/support.h"

namespace ddpx {
namespace {

namespace fs = std::filesystem;
using test::run_command;

TEST(FrontTest, LauncherDoesNotLoadLibtorch) {
  auto r = run_command("ldd " + test::ddpx_binary(), 30);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("libtorch"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("libc10"), std::string::npos) << r.output;
}

TEST(FrontTest, OtherCommandsKeepTheirOutputAndExitCode) {
  auto models = run_command(test::ddpx_binary() + " models", 60);
  ASSERT_EQ(models.exit_code, 0) << models.output;
  EXPECT_NE(models.output.find("resnet18"), std::string::npos) << models.output;
  auto bad = run_command(test::ddpx_binary() + " train --model no_such_model", 60);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("no_such_model"), std::string::npos) << bad.output;
}

TEST(FrontTest, WorkersOfRunAreDdpxCommands) {
  auto r = run_command(test::ddpx_binary() + " run 2 --tee all -- models", 120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string header = fmt::format("[rank 1] # {} models", models::model_table().size());
  EXPECT_NE(r.output.find(header), std::string::npos) << header << "\n" << r.output;
}

TEST(FrontTest, MissingTorchBinaryIsNamedWithWhatToDo) {
  test::TempDir dir;
  fs::copy_file(test::ddpx_binary(), dir.file("ddpx"));
  fs::permissions(dir.file("ddpx"), fs::perms::owner_all);
  auto r = run_command(dir.file("ddpx") + " models", 30);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ddpx-torch"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("scripts/build"), std::string::npos) << r.output;
  // The launcher itself still works without it.
  auto help = run_command(dir.file("ddpx") + " run --help", 30);
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--max_restarts"), std::string::npos) << help.output;
}

}  // namespace
}  // namespace ddpx
