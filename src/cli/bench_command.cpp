// `ddpx bench gemm|allreduce|train`: programs that print figures (docs/performance.md).
#include <CLI/CLI.hpp>

#include "bench/allreduce.h"
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

  auto* allreduce = bench->add_subcommand(
      "allreduce", "nccl-tests style all-reduce table; run under `ddpx run N -- bench allreduce`");
  allreduce->option_defaults()->always_capture_default();
  auto a = std::make_shared<bench::AllreduceOptions>();
  allreduce->add_option("--min_bytes,-b", a->min_bytes, "smallest message in bytes");
  allreduce->add_option("--max_bytes,-e", a->max_bytes, "largest message in bytes");
  allreduce->add_option("--step_factor,-f", a->step_factor, "multiply the size by this each row");
  allreduce->add_option("--iterations,-n", a->iterations, "timed iterations (0: per size)");
  allreduce->add_option("--warmup,-w", a->warmup, "untimed iterations per size");
  allreduce->add_option("--dtype", a->dtype, "float32 | float64");
  allreduce->add_option("--backend", a->backend, "auto | gloo | nccl");
  allreduce->add_option("--timeout", a->timeout_s, "collective timeout in seconds");
  allreduce->callback([a, &exit_code] {
    bench::run_allreduce(*a);
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
