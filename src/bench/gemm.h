// The seed's GEMM GFLOPS test: C = A x B on square matrices, timed over many iterations after
// a warm-up. Reports achieved GFLOP/s (2 n^3 flops a multiply) and, where the CPU's vector
// width, core count and clock can be read, the share of an estimated peak.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ddpx::bench {

struct GemmOptions {
  int64_t size = 2048;
  std::string dtype = "float32";  // float32 | float64 | bfloat16
  int64_t iterations = 20;
  int64_t warmup = 3;
  std::string device = "cpu";  // cpu (cuda when libtorch has it)
  int threads = 0;             // 0: $DDPX_THREADS or every usable core
};

struct GemmResult {
  double seconds_per_iteration = 0;
  double gflops = 0;
  std::optional<double> peak_gflops;  // estimated; empty when unknown
  std::string peak_basis;             // how the peak was estimated
};

GemmResult run_gemm(const GemmOptions& options);
void print_gemm(const GemmOptions& options, const GemmResult& result);

}  // namespace ddpx::bench
