// `ddpx bench gemm|allreduce|train`: programs that print figures (docs/performance.md).
#include <CLI/CLI.hpp>

#include "bench/gemm.h"
#include "cli/commands.h"

namespace ddpx::cli {

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "benchmarks: gemm, allreduce, train");
  bench->require_subcommand(1);

  auto* gemm = bench->add_subcommand("gemm", "matrix-multiply GFLOP/s (the seed's GEMM test)");
  gemm->option_defaults()->always_capture_default();
  auto g = std::make_shared<bench::GemmOptions>();
  gemm->add_option("--size", g->size, "matrix size n (n x n times n x n)");
  gemm->add_option("--dtype", g->dtype, "float32 | float64 | bfloat16");
  gemm->add_option("--iterations", g->iterations, "timed multiplies");
  gemm->add_option("--warmup", g->warmup, "untimed multiplies first");
  gemm->add_option("--device", g->device, "cpu (cuda on GPU builds)");
  gemm->callback([g, &exit_code] {
    bench::print_gemm(*g, bench::run_gemm(*g));
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
