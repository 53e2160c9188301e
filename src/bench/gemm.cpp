#include "bench/gemm.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/error.h"
#include "core/timer.h"
#include "distributed/device.h"
#include "distributed/peak_flops.h"
#include "distributed/threads.h"
#include "distributed/world.h"

namespace ddpx::bench {
namespace {

struct Dtype {
  std::string name;  // canonical: fp32, tf32, bf16, fp16, fp64
  torch::ScalarType type;
};

Dtype dtype_of(GemmDtype dtype) {
  switch (dtype) {
    case GemmDtype::kTf32:
      return {"tf32", torch::kFloat32};
    case GemmDtype::kBf16:
      return {"bf16", torch::kBFloat16};
    case GemmDtype::kFp16:
      return {"fp16", torch::kHalf};
    case GemmDtype::kFp64:
      return {"fp64", torch::kFloat64};
    case GemmDtype::kFp32:
      break;
  }
  return {"fp32", torch::kFloat32};
}

// Peak FLOP/s of this CPU: cores x clock x FLOPs per cycle per core, from /proc/cpuinfo's
// vector flags, assuming two FMA units (true for recent x86 server cores). An estimate only.
std::optional<std::pair<double, std::string>> estimate_cpu_peak(const std::string& dtype) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = line;
    if (line.rfind("cpu MHz", 0) == 0 && mhz == 0) mhz = std::stod(line.substr(line.find(':') + 1));
  }
  if (flags.empty() || mhz <= 0 || (dtype != "fp32" && dtype != "fp64")) return std::nullopt;
  int lanes32 = 0;
  std::string isa;
  if (flags.find(" avx512f") != std::string::npos)
    lanes32 = 16, isa = "AVX-512";
  else if (flags.find(" fma") != std::string::npos && flags.find(" avx2") != std::string::npos)
    lanes32 = 8, isa = "AVX2+FMA";
  if (lanes32 == 0) return std::nullopt;
  int lanes = dtype == "fp64" ? lanes32 / 2 : lanes32;
  int cores = torch::get_num_threads();
  double peak = cores * mhz * 1e-6 * lanes * 2 /*FMA*/ * 2 /*units*/;
  return std::make_pair(
      peak, fmt::format("estimated: {} cores x {:.0f} MHz x {} lanes x 2 (FMA) x 2 units, {}",
                        cores, mhz, lanes, isa));
}

// "Intel(R) Xeon(R) ..." from /proc/cpuinfo; "unknown CPU" when it is not there.
std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      std::string name = line.substr(line.find(':') + 1);
      name.erase(0, name.find_first_not_of(' '));
      return name;
    }
  }
  return "unknown CPU";
}

// The seed's device lines in one: which device, and for a GPU its memory, multiprocessors and
// compute capability (on ROCm: the gfx version's major and minor).
std::string describe_for_gemm(const torch::Device& device) {
  if (device.is_cpu())
    return fmt::format("cpu ({}), {} threads", cpu_model(), torch::get_num_threads());
  const auto p = dist::gpu_properties(device);
  if (!p) return dist::describe_device(device);
  return fmt::format("{}, {} multiprocessors, compute capability {}.{}",
                     dist::describe_device(device), p->multiprocessors, p->major, p->minor);
}

// Relative Frobenius error a correct product stays under: the dtype's rounding of the output
// (and for tf32 of the inputs) with margin for fp32 accumulation over k. A wrong product (wrong
// operands, garbage) is off by about 1.
double tolerance_for(const std::string& dtype) {
  if (dtype == "fp64") return 1e-10;
  if (dtype == "fp32") return 1e-4;
  return 2e-2;  // tf32, bf16, fp16: 8 to 11 mantissa bits
}

}  // namespace

GemmResult run_gemm(const GemmOptions& o) {
  DDPX_CHECK(o.size > 0 && o.m >= 0 && o.n >= 0 && o.k >= 0 && o.iterations > 0 && o.warmup >= 0,
             ErrorKind::kUsage,
             "--size, --m, --n, --k and --iterations must be positive (0 for m/n/k: --size), "
             "--warmup >= 0");
  const Dtype dtype = dtype_of(o.dtype);
  const torch::Device device = dist::select_device(o.device, dist::detect_world());
  GemmResult r;
  r.m = o.m > 0 ? o.m : o.size;
  r.n = o.n > 0 ? o.n : o.size;
  r.k = o.k > 0 ? o.k : o.size;
  r.dtype = dtype.name;
  r.device = dist::device_name(device);
  r.measured_on = device.str();
  r.visible_gpus = dist::visible_gpus();
  if (device.is_cpu()) {
    DDPX_CHECK(dtype.name != "tf32", ErrorKind::kUsage,
               "--dtype tf32 is a GPU tensor-core format; on CPU use fp32, bf16 or fp64");
    dist::set_threads(o.threads > 0 ? o.threads : dist::default_threads());
  } else {
    // fp32 means IEEE fp32 (CUDA cores); tf32 lets cuBLAS use tensor cores on fp32 data.
    at::globalContext().setAllowTF32CuBLAS(dtype.name == "tf32");
  }
  r.device_line = describe_for_gemm(device);
  r.threads = torch::get_num_threads();
  auto options = torch::TensorOptions().dtype(dtype.type).device(device);
  torch::Tensor a = torch::randn({r.m, r.k}, options);
  torch::Tensor b = torch::randn({r.k, r.n}, options);
  torch::Tensor c = torch::empty({r.m, r.n}, options);
  for (int64_t i = 0; i < o.warmup; ++i) torch::mm_out(c, a, b);
  dist::synchronize(device);
  // The reference: the same operands multiplied in fp64, once.
  const torch::Tensor reference = a.to(torch::kFloat64).mm(b.to(torch::kFloat64));
  const double reference_norm = reference.norm().item<double>();
  r.iterations = o.iterations;
  r.tolerance = tolerance_for(dtype.name);
  // Each multiply is timed alone (a device sync ends it) and its product checked untimed.
  for (int64_t i = 0; i < o.iterations; ++i) {
    c.zero_();
    dist::synchronize(device);
    Stopwatch watch;
    torch::mm_out(c, a, b);
    dist::synchronize(device);
    r.total_seconds += watch.seconds();
    double error = (c.to(torch::kFloat64) - reference).norm().item<double>() /
                   std::max(reference_norm, 1e-300);
    if (!std::isfinite(error)) error = std::numeric_limits<double>::infinity();
    r.worst_error = std::max(r.worst_error, error);
    if (error <= r.tolerance) ++r.successful;
  }
  r.seconds_per_iteration = r.total_seconds / o.iterations;
  r.tflops = 2.0 * r.m * r.n * r.k / r.seconds_per_iteration / 1e12;
  if (device.is_cpu()) {
    if (auto peak = estimate_cpu_peak(dtype.name)) {
      r.peak_tflops = peak->first;
      r.peak_basis = peak->second;
    }
  } else if (auto peak = dist::gpu_peak(r.device, dtype.name)) {
    r.peak_tflops = peak->tflops;
    r.peak_basis = fmt::format("published dense peak of the {}", peak->label);
  }
  return r;
}

std::string with_thousands(double value) {
  if (!std::isfinite(value)) return fmt::format("{}", value);
  std::string digits = fmt::format("{:.2f}", value);
  const bool negative = !digits.empty() && digits[0] == '-';
  if (negative) digits.erase(0, 1);
  size_t point = digits.find('.');
  if (point == std::string::npos) point = digits.size();
  for (size_t at = point; at > 3; at -= 3) digits.insert(at - 3, ",");
  return (negative ? "-" : "") + digits;
}

std::string format_gemm(const GemmOptions& o, const GemmResult& r) {
  const bool cpu = r.measured_on == "cpu";
  std::string out = fmt::format(
      "# ddpx bench gemm: C = A x B, m {} n {} k {}, {} on {}, {} iterations after {} "
      "warm-up{}\n",
      r.m, r.n, r.k, r.dtype, r.device, r.iterations, o.warmup,
      cpu ? fmt::format(", {} threads", r.threads) : "");
  out += fmt::format("Device: {}\n", r.device_line);
  out += fmt::format("Device count: {} GPU(s) visible; measured on {}\n", r.visible_gpus,
                     r.measured_on);
  out += fmt::format("Total time: {:.3f} ms ({:.3f} ms per multiply)\n", r.total_seconds * 1e3,
                     r.seconds_per_iteration * 1e3);
  out += fmt::format(
      "Successful iterations: {}/{} (product within {:g} relative error of an fp64 reference; "
      "worst {:.2e})\n",
      r.successful, r.iterations, r.tolerance, r.worst_error);
  out += fmt::format("Success rate: {:.2f}%\n",
                     r.iterations > 0 ? 100.0 * r.successful / r.iterations : 0.0);
  out += fmt::format("Average performance: {} GFLOPS ({:.2f} TFLOP/s, {} {}x{}x{})\n",
                     with_thousands(r.tflops * 1e3), r.tflops, r.dtype, r.m, r.n, r.k);
  if (r.peak_tflops) {
    out += fmt::format("Peak: {:.1f} TFLOP/s ({}); achieved {:.1f}% of it\n", *r.peak_tflops,
                       r.peak_basis, 100.0 * r.tflops / *r.peak_tflops);
  } else {
    out += fmt::format("Peak: unknown for {} in {}\n", r.device, r.dtype);
  }
  return out;
}

void print_gemm(const GemmOptions& o, const GemmResult& r) {
  fmt::print("{}", format_gemm(o, r));
  std::fflush(stdout);
}

}  // namespace ddpx::bench
