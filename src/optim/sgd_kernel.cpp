#include "optim/sgd_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/env.h"

namespace ddpx::optim {
namespace {

constexpr int64_t kBlock = 512;  // elements computed into a stack block, then stored

// ATen's add with alpha: a + alpha * b, fused where its vectorised kernels fuse it.
template <typename T, bool kFma>
[[gnu::always_inline]] inline T add_scaled(T a, T alpha, T b) {
  if constexpr (kFma) return std::fma(b, alpha, a);
  return a + alpha * b;
}

// One block: torch::optim::SGD::step's ops, in its order, per element. No output aliases an
// input here (the outputs are the caller's stack block).
template <typename T, bool kFma>
[[gnu::always_inline]] inline void compute(const T* __restrict g, const T* __restrict p,
                                           const T* __restrict m, int64_t n, T lr, T mu, T wd,
                                           bool nesterov, T* __restrict p_new,
                                           T* __restrict m_new) {
  for (int64_t i = 0; i < n; ++i) {
    T d = g[i];
    if (wd != 0) d = add_scaled<T, kFma>(d, wd, p[i]);  // d_p.add(p, weight_decay)
    if (m != nullptr) {
      const T b = m[i] * mu + d;  // buf.mul_(momentum).add_(d_p, 1 - dampening), dampening 0
      m_new[i] = b;
      d = nesterov ? add_scaled<T, kFma>(d, mu, b) : b;
    }
    p_new[i] = add_scaled<T, kFma>(p[i], -lr, d);  // p.add_(d_p, -lr)
  }
}

// The gradient: one source as it is, else ((g0 + g1) + ...) * scale, ShmAllreduce's average.
template <typename T, bool kFma>
[[gnu::always_inline]] inline void update(const T* const* grads, int count, T scale, const T* param,
                                          const T* momentum, int64_t n, const SgdHyper& h,
                                          T* const* params_out, T* const* momenta_out,
                                          int outputs) {
  const T lr = static_cast<T>(h.lr), mu = static_cast<T>(h.momentum),
          wd = static_cast<T>(h.weight_decay);
  alignas(64) T p_new[kBlock];
  alignas(64) T m_new[kBlock];
  alignas(64) T mean[kBlock];
  for (int64_t base = 0; base < n; base += kBlock) {
    const int64_t len = std::min(kBlock, n - base);
    const T* g = grads[0] + base;
    if (count > 1) {
      T* __restrict acc = mean;
      const T* __restrict first = grads[0] + base;
      const T* __restrict second = grads[1] + base;
      for (int64_t i = 0; i < len; ++i) acc[i] = first[i] + second[i];
      for (int k = 2; k < count; ++k) {
        const T* __restrict more = grads[k] + base;
        for (int64_t i = 0; i < len; ++i) acc[i] += more[i];
      }
      for (int64_t i = 0; i < len; ++i) acc[i] *= scale;
      g = mean;
    }
    compute<T, kFma>(g, param + base, momentum ? momentum + base : nullptr, len, lr, mu, wd,
                     h.nesterov, p_new, m_new);
    for (int k = 0; k < outputs; ++k) {
      std::memcpy(params_out[k] + base, p_new, len * sizeof(T));
      if (momentum) std::memcpy(momenta_out[k] + base, m_new, len * sizeof(T));
    }
  }
}

#if defined(__x86_64__)
template <typename T>
__attribute__((target("fma"))) void update_fma(const T* const* grads, int count, T scale,
                                               const T* param, const T* momentum, int64_t n,
                                               const SgdHyper& h, T* const* params_out,
                                               T* const* momenta_out, int outputs) {
  update<T, true>(grads, count, scale, param, momentum, n, h, params_out, momenta_out, outputs);
}
#endif

// ATen fuses where it runs its vectorised kernels: on x86, AVX2 (with FMA) or AVX-512, unless
// ATEN_CPU_CAPABILITY=default pins it to the plain ones (ATen's own choice, DispatchStub.cpp).
bool aten_fuses() {
  static const bool fuses = [] {
#if defined(__x86_64__)
    return env::get_or("ATEN_CPU_CAPABILITY", "") != "default" && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#else
    return false;
#endif
  }();
  return fuses;
}

template <typename T>
void dispatch(const T* const* grads, int count, T scale, const T* param, const T* momentum,
              int64_t n, const SgdHyper& h, T* const* params_out, T* const* momenta_out,
              int outputs) {
#if defined(__x86_64__)
  if (aten_fuses())
    return update_fma<T>(grads, count, scale, param, momentum, n, h, params_out, momenta_out,
                         outputs);
#endif
  update<T, false>(grads, count, scale, param, momentum, n, h, params_out, momenta_out, outputs);
}

}  // namespace

void* sgd_state_key(const torch::Tensor& param) { return param.unsafeGetTensorImpl(); }

SgdHyper SgdHyper::of(const torch::optim::SGDOptions& o) {
  return SgdHyper{o.lr(), o.momentum(), o.weight_decay(), o.nesterov()};
}

template <typename T>
void sgd_update(const T* grad, const T* param, const T* momentum, int64_t n, const SgdHyper& h,
                T* const* params_out, T* const* momenta_out, int outputs) {
  dispatch<T>(&grad, 1, T(1), param, momentum, n, h, params_out, momenta_out, outputs);
}

template <typename T>
void sgd_update_mean(const T* const* grads, int count, T scale, T* param, T* momentum, int64_t n,
                     const SgdHyper& h) {
  dispatch<T>(grads, count, scale, param, momentum, n, h, &param, &momentum, 1);
}

template void sgd_update<float>(const float*, const float*, const float*, int64_t, const SgdHyper&,
                                float* const*, float* const*, int);
template void sgd_update<double>(const double*, const double*, const double*, int64_t,
                                 const SgdHyper&, double* const*, double* const*, int);
template void sgd_update_mean<float>(const float* const*, int, float, float*, float*, int64_t,
                                     const SgdHyper&);
template void sgd_update_mean<double>(const double* const*, int, double, double*, double*, int64_t,
                                      const SgdHyper&);

bool fused_sgd_covers(torch::optim::SGD& sgd) {
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.dampening() != 0) return false;
    for (const auto& p : group.params()) {
      const bool real = p.scalar_type() == torch::kFloat32 || p.scalar_type() == torch::kFloat64;
      if (!real || !p.is_contiguous() || !p.device().is_cpu()) return false;
    }
  }
  return true;
}

bool fused_sgd_step(torch::optim::SGD& sgd) {
  if (!fused_sgd_covers(sgd)) return false;
  for (auto& group : sgd.param_groups()) {
    for (const auto& p : group.params()) {
      if (p.grad().defined() && p.grad().scalar_type() != p.scalar_type()) return false;
    }
  }
  torch::NoGradGuard no_grad;
  for (auto& group : sgd.param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    const SgdHyper h = SgdHyper::of(o);
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;  // as libtorch: no gradient, no update
      const torch::Tensor grad = p.grad().contiguous();
      torch::Tensor buffer;
      if (o.momentum() != 0) {
        auto& state = sgd.state();
        auto it = state.find(sgd_state_key(p));
        if (it == state.end()) {
          // libtorch clones the first d_p; a zero buffer gives the same value (0 * mu + d_p).
          auto fresh = std::make_unique<torch::optim::SGDParamState>();
          fresh->momentum_buffer(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
          it = state.emplace(sgd_state_key(p), std::move(fresh)).first;
        }
        buffer = static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer();
        if (!buffer.is_contiguous()) {
          buffer = buffer.contiguous();
          static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer(buffer);
        }
      }
      auto run = [&](auto* data) {
        using T = std::remove_pointer_t<decltype(data)>;
        T* m = buffer.defined() ? buffer.data_ptr<T>() : nullptr;
        sgd_update<T>(grad.data_ptr<T>(), data, m, p.numel(), h, &data, &m, 1);
      };
      if (p.scalar_type() == torch::kFloat32)
        run(p.data_ptr<float>());
      else
        run(p.data_ptr<double>());
    }
  }
  return true;
}

}  // namespace ddpx::optim
