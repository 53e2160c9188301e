#include "bench/gemm.h"

#include <fmt/format.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/timer.h"
#include "train/threads.h"

namespace ddpx::bench {
namespace {

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "float64") return torch::kFloat64;
  if (name == "bfloat16") return torch::kBFloat16;
  fail(ErrorKind::kUsage, "--dtype '{}' is not one of float32, float64, bfloat16", name);
}

// Peak FLOP/s of this CPU: cores x clock x FLOPs per cycle per core, from /proc/cpuinfo's
// vector flags, assuming two FMA units (true for recent x86 server cores). An estimate only.
std::optional<std::pair<double, std::string>> estimate_cpu_peak(torch::ScalarType dtype) {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, flags;
  double mhz = 0;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0 && flags.empty()) flags = line;
    if (line.rfind("cpu MHz", 0) == 0 && mhz == 0) mhz = std::stod(line.substr(line.find(':') + 1));
  }
  if (flags.empty() || mhz <= 0) return std::nullopt;
  int lanes32 = 0;
  std::string isa;
  if (flags.find(" avx512f") != std::string::npos)
    lanes32 = 16, isa = "AVX-512";
  else if (flags.find(" fma") != std::string::npos && flags.find(" avx2") != std::string::npos)
    lanes32 = 8, isa = "AVX2+FMA";
  if (lanes32 == 0 || dtype == torch::kBFloat16) return std::nullopt;
  int lanes = dtype == torch::kFloat64 ? lanes32 / 2 : lanes32;
  int cores = torch::get_num_threads();
  double peak = cores * mhz * 1e-3 * lanes * 2 /*FMA*/ * 2 /*units*/;
  return std::make_pair(
      peak, fmt::format("{} cores x {:.0f} MHz x {} lanes x 2 (FMA) x 2 units, {}", cores, mhz,
                        lanes, isa));
}

}  // namespace

GemmResult run_gemm(const GemmOptions& o) {
  DDPX_CHECK(o.size > 0 && o.iterations > 0 && o.warmup >= 0, ErrorKind::kUsage,
             "--size and --iterations must be positive, --warmup >= 0");
  DDPX_CHECK(o.device == "cpu", ErrorKind::kUsage,
             "--device {}: this build of ddpx has a CPU-only libtorch; use --device cpu", o.device);
  set_threads(o.threads > 0 ? o.threads : default_threads());
  auto dtype = parse_dtype(o.dtype);
  auto options = torch::TensorOptions().dtype(dtype);
  torch::Tensor a = torch::randn({o.size, o.size}, options);
  torch::Tensor b = torch::randn({o.size, o.size}, options);
  torch::Tensor c = torch::empty({o.size, o.size}, options);
  for (int64_t i = 0; i < o.warmup; ++i) torch::mm_out(c, a, b);
  Stopwatch watch;
  for (int64_t i = 0; i < o.iterations; ++i) torch::mm_out(c, a, b);
  GemmResult r;
  r.seconds_per_iteration = watch.seconds() / o.iterations;
  r.gflops = 2.0 * o.size * o.size * o.size / r.seconds_per_iteration / 1e9;
  if (auto peak = estimate_cpu_peak(dtype)) {
    r.peak_gflops = peak->first;
    r.peak_basis = peak->second;
  }
  return r;
}

void print_gemm(const GemmOptions& o, const GemmResult& r) {
  fmt::print("# ddpx bench gemm: C = A x B, {}x{} {}, {} iterations after {} warm-up, {} threads\n",
             o.size, o.size, o.dtype, o.iterations, o.warmup, torch::get_num_threads());
  fmt::print("Time per multiply: {:.3f} ms\n", r.seconds_per_iteration * 1e3);
  fmt::print("Average performance: {:.2f} GFLOPS\n", r.gflops);
  if (r.peak_gflops) {
    fmt::print("Estimated peak: {:.1f} GFLOPS ({}); achieved {:.0f}% of it\n", *r.peak_gflops,
               r.peak_basis, 100.0 * r.gflops / *r.peak_gflops);
  } else {
    fmt::print("Estimated peak: unknown for this CPU and dtype\n");
  }
  std::fflush(stdout);
}

}  // namespace ddpx::bench
