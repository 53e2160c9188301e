// torch::optim::SGD's update (dampening 0) in one pass over memory: reads the gradient, the
// parameter and the momentum buffer once and writes the new parameter and momentum once (or to
// as many places as asked). sgd_update_mean also averages several ranks' gradients in the same
// pass: the sharded step inside backward (sharded_sgd.h).
//
// Why: libtorch's step runs weight decay, momentum and the update as separate tensor ops, about
// eleven memory passes per element; on a CPU that is memory-bound (docs/performance.md).
//
// Exactness: the same operations in the same order and rounding as ATen's CPU kernels (fused
// multiply-add where ATen's vectorised kernels use one, i.e. on CPUs with FMA), so the result is
// bit-identical to libtorch's step on the same machine; tests/optim/sgd_kernel_test.cpp checks it.
#pragma once

#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace ddpx::optim {

struct SgdHyper {
  double lr = 0;
  double momentum = 0;
  double weight_decay = 0;
  bool nesterov = false;
  static SgdHyper of(const torch::optim::SGDOptions& options);
};

// Elements [0, n): new param and momentum (when `momentum` is not null) from grad, param and
// momentum, written to params_out[0..outputs) and momenta_out[0..outputs). An output may be
// the input itself. T is float or double.
template <typename T>
void sgd_update(const T* grad, const T* param, const T* momentum, int64_t n, const SgdHyper& h,
                T* const* params_out, T* const* momenta_out, int outputs);

// The same, in place, with the gradient the mean of `count` ranks' gradients computed as
// ShmAllreduce's in-place average does it (((g[0] + g[1]) + ...) * scale, g[0] this rank's),
// so that the result is bit-identical to averaging first and stepping after.
template <typename T>
void sgd_update_mean(const T* const* grads, int count, T scale, T* param, T* momentum, int64_t n,
                     const SgdHyper& h);

// The key of a parameter's state in a libtorch optimizer (its TensorImpl's address, as
// torch::optim::SGD uses).
void* sgd_state_key(const torch::Tensor& param);

// A whole torch::optim::SGD::step() (dampening 0, float32/float64 parameters) through
// sgd_update, keeping the optimizer's state (momentum buffers) as libtorch would. Returns false,
// having changed nothing, when the optimizer has a setting or parameter it does not cover.
bool fused_sgd_step(torch::optim::SGD& sgd);
// Whether fused_sgd_step() takes `sgd` as it is set up now (its gradients' dtypes aside).
bool fused_sgd_covers(torch::optim::SGD& sgd);

}  // namespace ddpx::optim
