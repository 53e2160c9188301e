// `--clip_grad_norm` on the device (optim/clip_grad.h) against libtorch's
// torch::nn::utils::clip_grad_norm_: the same gradients to the bit, the same norm, and no read
// of a tensor's value on the host (aten::_local_scalar_dense, what .item() runs; on a GPU that
// read waits for every kernel queued before it).
#include "optim/clip_grad.h"

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>

#include <atomic>
#include <cstring>

namespace ddpx::optim {
namespace {

std::vector<torch::Tensor> params_with_grads(double grad_scale) {
  torch::manual_seed(5);
  std::vector<torch::Tensor> params;
  for (auto shape : std::vector<std::vector<int64_t>>{{16, 3, 3, 3}, {16}, {10, 64}, {10}}) {
    auto p = torch::randn(shape).requires_grad_();
    p.mutable_grad() = torch::randn_like(p) * grad_scale;
    params.push_back(p);
  }
  params.push_back(torch::randn({4}).requires_grad_());  // no gradient: left out, as libtorch does
  return params;
}

std::vector<torch::Tensor> grads_of(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad().clone());
  return grads;
}

// Counts the host reads of tensor values on this thread while alive.
class HostReads {
 public:
  HostReads() {
    count_ = 0;
    handle_ = at::addThreadLocalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn)
                                       -> std::unique_ptr<at::ObserverContext> {
          if (std::strcmp(fn.name(), "aten::_local_scalar_dense") == 0) ++count_;
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
  }
  ~HostReads() { at::removeCallback(handle_); }
  int count() const { return count_; }

 private:
  static inline std::atomic<int> count_{0};
  at::CallbackHandle handle_;
};

TEST(ClipGradTest, ClipsLikeLibtorchWithoutReadingTheNormOnTheHost) {
  // Norm far above max_norm (clipped) and below it (left as is).
  for (double scale : {10.0, 1e-3}) {
    SCOPED_TRACE(scale);
    auto mine = params_with_grads(scale), reference = params_with_grads(scale);
    torch::Tensor norm;
    int mine_reads = 0, libtorch_reads = 0;
    double expected = 0;
    {
      HostReads reads;
      norm = clip_grad_norm(mine, /*max_norm=*/1.0);
      mine_reads = reads.count();
    }
    {
      HostReads reads;
      expected = torch::nn::utils::clip_grad_norm_(reference, /*max_norm=*/1.0);
      libtorch_reads = reads.count();
    }
    EXPECT_EQ(mine_reads, 0) << "the norm was read on the host";
    EXPECT_GE(libtorch_reads, 1) << "the counter sees libtorch's .item()";
    ASSERT_TRUE(norm.defined());
    EXPECT_EQ(norm.dim(), 0);
    EXPECT_EQ(norm.item<double>(), expected);
    auto a = grads_of(mine), b = grads_of(reference);
    ASSERT_EQ(a.size(), 4u);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "grad " << i;
  }
  std::vector<torch::Tensor> none{torch::randn({3}).requires_grad_()};
  EXPECT_FALSE(clip_grad_norm(none, 1.0).defined());
}

}  // namespace
}  // namespace ddpx::optim
