// `ddpx container`: the written Dockerfile is read back with a real parser (dockerfile-parse,
// from PyPI) and checked for what users rely on: a pinned official base, ddpx built and on
// PATH, `ddpx doctor` as the health check, no SSH server. Where a container engine runs, the
// CPU image is built for real; here (no Docker daemon) that part skips with a message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "launch_helpers.h"

namespace ddpx::launch::testing {
namespace {

using test::run_command;
using test::shell_quote;
using test::TempDir;

// The Dockerfile's instructions as [{"instruction": ..., "value": ...}] and its base image.
nlohmann::json parse_dockerfile(const std::string& path) {
  auto result = test::run_python(
      "import json, sys\n"
      "from dockerfile_parse import DockerfileParser\n"
      "p = DockerfileParser(path=" +
      nlohmann::json(path).dump() +
      ")\n"
      "print(json.dumps({'base': p.baseimage, 'structure': p.structure}))\n");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return nlohmann::json::parse(result.output.substr(result.output.find('{')));
}

struct Kind {
  const char* flag;
  const char* base_prefix;
  const char* run_flag;
};

class ContainerTest : public ::testing::TestWithParam<Kind> {};

TEST_P(ContainerTest, DockerfileIsPinnedBuildsDdpxAndChecksHealthWithoutSsh) {
  DDPX_SKIP_WITHOUT_TOOL(test::python_has_module("dockerfile_parse"))
      << "dockerfile-parse is not installed in DDPX_PYTHON (scripts/python-env --tests)";
  Kind kind = GetParam();
  TempDir dir;
  auto result = run_command(
      test::ddpx_command(std::string("container ") + kind.flag + " --out " + dir.file("c")), 30);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(contains(result.output, "wrote " + dir.file("c") + "/Dockerfile")) << result.output;
  auto parsed = parse_dockerfile(dir.file("c/Dockerfile"));
  std::string base = parsed["base"];
  EXPECT_EQ(base.rfind(kind.base_prefix, 0), 0u) << base;
  EXPECT_NE(base.find(':'), std::string::npos) << "pinned: " << base;
  EXPECT_EQ(base.find(":latest"), std::string::npos) << base;
  std::map<std::string, std::string> last;
  std::string runs;
  for (const auto& step : parsed["structure"]) {
    std::string instruction = step["instruction"], value = step["value"];
    last[instruction] = value;
    if (instruction == "RUN") runs += value + "\n";
    EXPECT_EQ(value.find("ssh"), std::string::npos) << "no SSH server: " << value;
    EXPECT_NE(instruction, "EXPOSE") << value;
  }
  EXPECT_TRUE(contains(runs, "scripts/bootstrap")) << runs;
  EXPECT_TRUE(contains(runs, "scripts/build")) << runs;
  EXPECT_TRUE(contains(last["HEALTHCHECK"], "\"ddpx\", \"doctor\"")) << last["HEALTHCHECK"];
  EXPECT_EQ(last["ENTRYPOINT"], "[\"ddpx\"]");
  EXPECT_TRUE(contains(last["ENV"], "/opt/ddpx/build/src")) << last["ENV"];
  std::string readme = slurp(dir.file("c/README.md"));
  EXPECT_TRUE(contains(readme, kind.run_flag)) << readme;
  EXPECT_TRUE(contains(readme, "docker build -f container/")) << readme;
  EXPECT_TRUE(contains(slurp(dir.file("c/Dockerfile.dockerignore")), ".venv"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, ContainerTest,
                         ::testing::Values(Kind{"--cuda", "pytorch/pytorch:", "--gpus all"},
                                           Kind{"--rocm", "rocm/pytorch:",
                                                "--device=/dev/kfd --device=/dev/dri"},
                                           Kind{"--cpu", "debian:12", "--shm-size"}),
                         [](const auto& info) { return std::string(info.param.flag + 2); });

TEST(ContainerCliTest, BadChoicesAreOneLine) {
  auto none = run_command(test::ddpx_command("container"), 30);
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_TRUE(contains(none.output, "choose one of --cuda, --rocm or --cpu")) << none.output;
  auto two = run_command(test::ddpx_command("container --cuda --rocm"), 30);
  EXPECT_EQ(two.exit_code, 2) << two.output;
  TempDir dir;
  auto latest = run_command(
      test::ddpx_command("container --cpu --base debian:latest --out " + dir.file("c")), 30);
  EXPECT_EQ(latest.exit_code, 2) << latest.output;
  EXPECT_TRUE(contains(latest.output, "--base debian:latest: pin a tag")) << latest.output;
  EXPECT_FALSE(file_exists(dir.file("c/Dockerfile"))) << "nothing written on bad input";
}

TEST(ContainerCliTest, TheCpuImageBuildsWhereADockerDaemonRuns) {
  if (run_command("docker info >/dev/null 2>&1", 30).exit_code != 0)
    GTEST_SKIP() << "no running container engine here (docker info fails); the CPU image is "
                    "built where one runs";
  TempDir dir;
  std::string out = test::source_dir() + "/container/cpu-test";
  auto wrote = run_command(test::ddpx_command("container --cpu --out " + shell_quote(out)), 30);
  ASSERT_EQ(wrote.exit_code, 0) << wrote.output;
  auto build = run_command("cd " + shell_quote(test::source_dir()) + " && docker build -f " +
                               shell_quote(out + "/Dockerfile") + " -t ddpx:cpu-test .",
                           3600);
  std::filesystem::remove_all(out);
  ASSERT_EQ(build.exit_code, 0) << build.output;
  auto health = run_command("docker run --rm ddpx:cpu-test doctor", 120);
  EXPECT_EQ(health.exit_code, 0) << health.output;
}

}  // namespace
}  // namespace ddpx::launch::testing
