// The seed's GEMM test, stating what it measured: C = A x B with A m x k and B k x n in one
// dtype on one device, timed over many iterations after a warm-up. Each timed product is then
// checked against an fp64 reference product of the same inputs (the seed's "Successful
// iterations: N/N"), so a fast but wrong multiply is reported as a failure, not a speed.
// Reports achieved TFLOP/s (2 m n k flops a multiply) and the share of that dtype's peak: on a
// GPU from the published table (distributed/peak_flops.h), on a CPU estimated from its vector
// width, cores, clock.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/names.h"
#include "distributed/choices.h"

namespace ddpx::bench {

// The multiply's dtype: tf32 is fp32 storage on GPU tensor cores. The long names are aliases
// (the first name of a value is the one printed).
enum class GemmDtype { kFp32, kTf32, kBf16, kFp16, kFp64 };
inline constexpr NameTable<GemmDtype, 8> kGemmDtypeNames{{{GemmDtype::kFp32, "fp32"},
                                                          {GemmDtype::kTf32, "tf32"},
                                                          {GemmDtype::kBf16, "bf16"},
                                                          {GemmDtype::kFp16, "fp16"},
                                                          {GemmDtype::kFp64, "fp64"},
                                                          {GemmDtype::kFp32, "float32"},
                                                          {GemmDtype::kBf16, "bfloat16"},
                                                          {GemmDtype::kFp16, "float16"}}};
inline const char* name(GemmDtype dtype) { return name_of(kGemmDtypeNames, dtype); }

struct GemmOptions {
  int64_t size = 2048;          // m = n = k unless given
  int64_t m = 0, n = 0, k = 0;  // 0: size
  GemmDtype dtype = GemmDtype::kFp32;
  int64_t iterations = 20;
  int64_t warmup = 3;
  dist::DeviceChoice device = dist::DeviceChoice::kAuto;  // auto: the GPU when one is visible
  int threads = 0;  // CPU: 0 = default_threads() (distributed/threads.h)
};

struct GemmResult {
  std::string device;        // "cpu" or the GPU's name as the driver reports it
  std::string device_line;   // "cpu (model), 2 threads" or "cuda:0 NVIDIA H100 80GB HBM3, ..."
  std::string measured_on;   // "cpu" or "cuda:0"
  int64_t visible_gpus = 0;  // GPUs libtorch sees (on ROCm too), whichever device was measured
  int threads = 0;           // CPU intra-op threads (CPU runs)
  std::string dtype;         // the canonical name
  int64_t m = 0, n = 0, k = 0;
  int64_t iterations = 0;
  int64_t successful = 0;    // products within `tolerance` of the reference
  double tolerance = 0;      // relative Frobenius error allowed for this dtype
  double worst_error = 0;    // the largest relative error seen
  double total_seconds = 0;  // the timed multiplies together
  double seconds_per_iteration = 0;
  double tflops = 0;
  std::optional<double> peak_tflops;  // empty when unknown
  std::string peak_basis;             // where the peak comes from
};

GemmResult run_gemm(const GemmOptions& options);
// The seed's lines after a header stating what was measured: the device and the device count,
// total time, successful iterations, success rate, average performance in GFLOPS with thousands
// separators ("83,090.86"), and the share of the peak. format_gemm returns them; print_gemm
// writes them to stdout.
std::string format_gemm(const GemmOptions& options, const GemmResult& result);
void print_gemm(const GemmOptions& options, const GemmResult& result);

// 83090.857 -> "83,090.86" (two decimals, a comma every three digits).
std::string with_thousands(double value);

}  // namespace ddpx::bench
