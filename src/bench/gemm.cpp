#include "bench/gemm.h"

#include <ATen/Context.h>
#include <ATen/DeviceAccelerator.h>
#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <fstream>

#include "bench/peaks.h"
#include "core/error.h"
#include "core/timer.h"
#include "dist/device.h"
#include "dist/world.h"
#include "train/threads.h"

namespace ddpx::bench {
namespace {

struct Dtype {
  std::string name;  // canonical: fp32, tf32, bf16, fp16, fp64
  torch::ScalarType type;
};

Dtype parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return {"fp32", torch::kFloat32};
  if (name == "tf32") return {"tf32", torch::kFloat32};
  if (name == "bf16" || name == "bfloat16") return {"bf16", torch::kBFloat16};
  if (name == "fp16" || name == "float16") return {"fp16", torch::kHalf};
  if (name == "fp64" || name == "float64") return {"fp64", torch::kFloat64};
  fail(ErrorKind::kUsage, "--dtype '{}' is not one of fp32, tf32, bf16, fp16, fp64", name);
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

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) at::accelerator::synchronizeDevice(device.index());
}

}  // namespace

GemmResult run_gemm(const GemmOptions& o) {
  DDPX_CHECK(o.size > 0 && o.m >= 0 && o.n >= 0 && o.k >= 0 && o.iterations > 0 && o.warmup >= 0,
             ErrorKind::kUsage,
             "--size, --m, --n, --k and --iterations must be positive (0 for m/n/k: --size), "
             "--warmup >= 0");
  const Dtype dtype = parse_dtype(o.dtype);
  const torch::Device device = dist::select_device(o.device, dist::detect_world());
  GemmResult r;
  r.m = o.m > 0 ? o.m : o.size;
  r.n = o.n > 0 ? o.n : o.size;
  r.k = o.k > 0 ? o.k : o.size;
  r.dtype = dtype.name;
  r.device = dist::device_name(device);
  if (device.is_cpu()) {
    DDPX_CHECK(dtype.name != "tf32", ErrorKind::kUsage,
               "--dtype tf32 is a GPU tensor-core format; on CPU use fp32, bf16 or fp64");
    set_threads(o.threads > 0 ? o.threads : default_threads());
  } else {
    // fp32 means IEEE fp32 (CUDA cores); tf32 lets cuBLAS use tensor cores on fp32 data.
    at::globalContext().setAllowTF32CuBLAS(dtype.name == "tf32");
  }
  auto options = torch::TensorOptions().dtype(dtype.type).device(device);
  torch::Tensor a = torch::randn({r.m, r.k}, options);
  torch::Tensor b = torch::randn({r.k, r.n}, options);
  torch::Tensor c = torch::empty({r.m, r.n}, options);
  for (int64_t i = 0; i < o.warmup; ++i) torch::mm_out(c, a, b);
  synchronize(device);
  Stopwatch watch;
  for (int64_t i = 0; i < o.iterations; ++i) torch::mm_out(c, a, b);
  synchronize(device);
  r.seconds_per_iteration = watch.seconds() / o.iterations;
  r.tflops = 2.0 * r.m * r.n * r.k / r.seconds_per_iteration / 1e12;
  if (device.is_cpu()) {
    if (auto peak = estimate_cpu_peak(dtype.name)) {
      r.peak_tflops = peak->first;
      r.peak_basis = peak->second;
    }
  } else if (auto peak = gpu_peak(r.device, dtype.name)) {
    r.peak_tflops = peak->tflops;
    r.peak_basis = fmt::format("published dense peak of the {}", peak->label);
  }
  return r;
}

void print_gemm(const GemmOptions& o, const GemmResult& r) {
  fmt::print(
      "# ddpx bench gemm: C = A x B, m {} n {} k {}, {} on {}, {} iterations after {} "
      "warm-up{}\n",
      r.m, r.n, r.k, r.dtype, r.device, o.iterations, o.warmup,
      r.device == "cpu" ? fmt::format(", {} threads", torch::get_num_threads()) : "");
  fmt::print("Time per multiply: {:.3f} ms\n", r.seconds_per_iteration * 1e3);
  fmt::print("Average performance: {:.2f} GFLOPS ({:.2f} TFLOP/s, {} {}x{}x{})\n", r.tflops * 1e3,
             r.tflops, r.dtype, r.m, r.n, r.k);
  if (r.peak_tflops) {
    fmt::print("Peak: {:.1f} TFLOP/s ({}); achieved {:.1f}% of it\n", *r.peak_tflops, r.peak_basis,
               100.0 * r.tflops / *r.peak_tflops);
  } else {
    fmt::print("Peak: unknown for {} in {}\n", r.device, r.dtype);
  }
  std::fflush(stdout);
}

}  // namespace ddpx::bench
