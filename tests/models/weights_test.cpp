// load_named_tensors / read_state_dict: exact copies by name, and errors that list what is
// wrong instead of loading part of a model.
#include "models/weights.h"

#include <gtest/gtest.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <string>

#include "core/error.h"
#include "support/support.h"

namespace ddpx::models {
namespace {

// A two-layer model whose keys mirror a torchvision block: "0.weight", "1.running_mean", ...
torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
}

std::map<std::string, torch::Tensor> full_state(torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : module.named_parameters()) out[p.key()] = torch::randn_like(p.value());
  for (const auto& b : module.named_buffers()) out[b.key()] = b.value().clone() + 3;
  return out;
}

std::string load_error(torch::nn::Module& module, const std::map<std::string, torch::Tensor>& t) {
  try {
    load_named_tensors(module, t);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    return e.what();
  }
  ADD_FAILURE() << "expected ddpx::Error";
  return "";
}

TEST(WeightsTest, CopiesParametersAndBuffersByName) {
  torch::nn::Sequential model = small_model();
  const auto state = full_state(*model);
  load_named_tensors(*model, state);
  for (const auto& p : model->named_parameters()) EXPECT_TRUE(p.value().equal(state.at(p.key())));
  for (const auto& b : model->named_buffers()) EXPECT_TRUE(b.value().equal(state.at(b.key())));
}

TEST(WeightsTest, MissingUnexpectedAndMisshapenKeysAreListedAndNothingIsCopied) {
  torch::nn::Sequential model = small_model();
  const torch::Tensor before = model->named_parameters()["0.weight"].clone();
  auto state = full_state(*model);
  state.erase("1.running_var");
  state["2.weight"] = torch::zeros({1});
  state["0.bias"] = torch::zeros({5});
  const std::string message = load_error(*model, state);
  EXPECT_NE(message.find("missing key(s): 1.running_var"), std::string::npos) << message;
  EXPECT_NE(message.find("unexpected key(s): 2.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("0.bias (file [5], model [4])"), std::string::npos) << message;
  EXPECT_TRUE(model->named_parameters()["0.weight"].equal(before)) << "partial load";
}

TEST(WeightsTest, ReadsATorchSaveDictFromPython) {
  test::TempDir dir;
  const std::string path = dir.file("w.pt");
  test::CommandResult r = test::run_python(
      "import sys\n"
      "try:\n    import torch\nexcept ImportError:\n    sys.exit(77)\n"
      "torch.save({'a': torch.arange(6, dtype=torch.float32).reshape(2, 3),\n"
      "            'n': torch.tensor(5)}, '" +
      path + "')\n");
  DDPX_SKIP_WITHOUT_TOOL(r.exit_code != 77) << "DDPX_PYTHON lacks torch";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto tensors = read_state_dict(path);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_TRUE(tensors.at("a").equal(torch::arange(6, torch::kFloat32).reshape({2, 3})));
  EXPECT_EQ(tensors.at("n").item<int64_t>(), 5);
}

TEST(WeightsTest, ReadsAModuleStateDictWithMetadataAsTorchvisionShipsIt) {
  test::TempDir dir;
  const std::string path = dir.file("linear.pt");
  // A real state_dict: an OrderedDict carrying `_metadata` (module versions), which ddpx skips.
  test::CommandResult r = test::run_python(
      "import sys\n"
      "try:\n    import torch\nexcept ImportError:\n    sys.exit(77)\n"
      "m = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))\n"
      "with torch.no_grad():\n"
      "    m[0].weight.copy_(torch.arange(6.).reshape(2, 3)); m[0].bias.fill_(-1)\n"
      "    m[1].running_var.fill_(4); m[1].num_batches_tracked.fill_(9)\n"
      "torch.save(m.state_dict(), '" +
      path + "')\n");
  DDPX_SKIP_WITHOUT_TOOL(r.exit_code != 77) << "DDPX_PYTHON lacks torch";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto tensors = read_state_dict(path);
  EXPECT_EQ(tensors.size(), 7u) << "2 Linear + 5 BatchNorm entries, no placeholder";
  EXPECT_TRUE(tensors.at("0.weight").equal(torch::arange(6, torch::kFloat32).reshape({2, 3})));
  EXPECT_TRUE(tensors.at("0.bias").equal(torch::full({2}, -1.0f)));
  EXPECT_TRUE(tensors.at("1.running_var").equal(torch::full({2}, 4.0f)));
  EXPECT_EQ(tensors.at("1.num_batches_tracked").item<int64_t>(), 9);
  EXPECT_EQ(tensors.at("1.num_batches_tracked").scalar_type(), torch::kLong);
}

// A dict of Parameters (torch.save(dict(m.named_parameters()))) pickles each through
// _rebuild_parameter; a Parameter and a view of it share one storage, as torch.load shares it.
TEST(WeightsTest, ReadsParametersAndViewsSharingAStorage) {
  test::TempDir dir;
  const std::string path = dir.file("params.pt");
  test::CommandResult r = test::run_python(
      "import sys\n"
      "try:\n    import torch\nexcept ImportError:\n    sys.exit(77)\n"
      "p = torch.nn.Parameter(torch.arange(12, dtype=torch.bfloat16).reshape(3, 4))\n"
      "torch.save({'p': p, 'column': p.detach()[:, 1]}, '" +
      path + "')\n");
  if (r.exit_code == 77) GTEST_SKIP() << "DDPX_PYTHON lacks torch";
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto tensors = read_state_dict(path);
  ASSERT_EQ(tensors.size(), 2u);
  const auto whole = torch::arange(12, torch::kBFloat16).reshape({3, 4});
  EXPECT_TRUE(tensors.at("p").equal(whole));
  EXPECT_TRUE(tensors.at("column").equal(whole.select(1, 1)));
  EXPECT_EQ(tensors.at("column").stride(0), 4);
  EXPECT_EQ(tensors.at("p").data_ptr<at::BFloat16>() + 1,
            tensors.at("column").data_ptr<at::BFloat16>());
}

TEST(WeightsTest, UnreadableFilesGiveActionableErrors) {
  test::TempDir dir;
  try {
    read_state_dict(dir.file("absent.pt"));
    ADD_FAILURE() << "expected an error for a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(std::string(e.what()).find("absent.pt"), std::string::npos);
  }
  test::write_bytes(dir.file("junk.pt"), "this is not a zip archive");
  try {
    read_state_dict(dir.file("junk.pt"));
    ADD_FAILURE() << "expected an error for a corrupt file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kData);
    EXPECT_NE(std::string(e.what()).find("junk.pt"), std::string::npos);
  }
}

}  // namespace
}  // namespace ddpx::models
