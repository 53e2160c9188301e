// A post hook on a parameter's gradient accumulator (its AccumulateGrad node): runs `fn` once
// the parameter's .grad holds this backward's sum. DDP's reducer counts its buckets down with
// it, the sharded plan its units.
#pragma once

#include <torch/csrc/autograd/function_hook.h>

#include <functional>
#include <utility>

namespace ddpx::parallel {

class ReadyHook : public torch::autograd::FunctionPostHook {
 public:
  explicit ReadyHook(std::function<void()> fn) : fn_(std::move(fn)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
};

}  // namespace ddpx::parallel
