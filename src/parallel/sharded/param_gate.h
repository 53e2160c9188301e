// The gate in front of released parameters: libtorch has no forward pre-hooks (Module::forward
// is a plain C++ call), so a fully sharded plan learns that a unit is about to run from the
// operators themselves. A RecordFunction callback (the profiler's mechanism, ATen's observer of
// every dispatched operator, forward and backward) looks at each operator's input tensors; when
// one shares its storage with a watched parameter, the gate calls its listener with the units
// touched, before the operator's kernel runs, so the listener can gather them. Views of a
// parameter (weight.t(), a saved tensor autograd unpacks in backward) share its storage and are
// seen too, which is why this works for any torch::nn::Module without changing its forward.
//
// The callback is registered thread-locally on the thread that builds the gate (autograd carries
// it to its worker threads with the rest of the thread-local state), and it asks for operator
// inputs only while a gate exists. Operators the listener itself runs (its copies and
// collectives) are not seen again. An exception in a RecordFunction callback cannot propagate
// (ATen logs and drops it): the gate keeps the first one and rethrow_pending() throws it where
// the plan can.
#pragma once

#include <ATen/record_function.h>
#include <torch/types.h>

#include <exception>
#include <vector>

namespace ddpx::parallel {

class GateListener {
 public:
  virtual ~GateListener() = default;
  // `units`: the distinct units whose parameters the coming operator reads, in input order.
  virtual void on_use(const std::vector<int>& units) = 0;
};

class ParamGate {
 public:
  explicit ParamGate(GateListener& listener);
  ~ParamGate();
  ParamGate(const ParamGate&) = delete;
  ParamGate& operator=(const ParamGate&) = delete;

  // Operators reading `param`'s storage now call the listener with `unit`.
  void watch(const torch::Tensor& param, int unit);

  // Throws the first error the listener raised inside the callback, if any, and clears it.
  void rethrow_pending();

  // While one exists on this thread, the gate ignores operators (the plan's own work on its
  // parameters: loading, saving).
  class Pause {
   public:
    Pause();
    ~Pause();

   private:
    bool was_;
  };

 private:
  friend struct GateCallback;
  GateListener& listener_;
  std::vector<const void*> storages_;
  at::CallbackHandle handle_ = 0;
  std::exception_ptr pending_;
};

}  // namespace ddpx::parallel
