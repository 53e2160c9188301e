// `ddpx bench gemm|allreduce|train|memory`: programs that print figures (docs/performance.md).
#include <CLI/CLI.hpp>

#include "bench/allreduce.h"
#include "bench/gemm.h"
#include "bench/loader_bench.h"
#include "bench/memory_bench.h"
#include "bench/shard_memory.h"
#include "bench/train_bench.h"
#include "cli/choices.h"
#include "cli/commands.h"
#include "cli/help_format.h"
#include "cli/model_data_flags.h"
#include "cli/parallel_flags.h"
#include "core/error.h"
#include "models/zoo/registry.h"

namespace ddpx::cli {

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "benchmarks: gemm, allreduce, train, loader, memory");
  bench->require_subcommand(1);

  auto* gemm = bench->add_subcommand("gemm", "matrix-multiply GFLOP/s (the seed's GEMM test)");
  gemm->option_defaults()->always_capture_default();
  auto g = std::make_shared<bench::GemmOptions>();
  gemm->add_option("--size", g->size, "matrix size: m = n = k unless given");
  gemm->add_option("--m", g->m, "rows of A and C (0: --size)");
  gemm->add_option("--n", g->n, "columns of B and C (0: --size)");
  gemm->add_option("--k", g->k, "columns of A, rows of B (0: --size)");
  add_choice(gemm, "--dtype", g->dtype, bench::kGemmDtypeNames,
             "fp32 | tf32 (GPU tensor cores) | bf16 | fp16 | fp64");
  gemm->add_option("--iterations", g->iterations, "timed multiplies");
  gemm->add_option("--warmup", g->warmup, "untimed multiplies first");
  add_choice(gemm, "--device", g->device, dist::kDeviceNames,
             "auto (the GPU when one is visible) | cpu | cuda");
  gemm->add_option(
      "--threads", g->threads,
      "CPU intra-op threads (0: $DDPX_THREADS, $OMP_NUM_THREADS, or cores / local ranks)");
  gemm->callback([g, &exit_code] {
    const bench::GemmResult r = bench::run_gemm(*g);
    bench::print_gemm(*g, r);
    // A wrong product is a broken device or library, not a speed: the run fails.
    DDPX_CHECK(r.successful == r.iterations, ErrorKind::kInternal,
               "bench gemm: {} of {} products on {} differ from the fp64 reference by more than "
               "{:g} (worst {:.2e}); the device or its math library computes wrong results",
               r.iterations - r.successful, r.iterations, r.device, r.tolerance, r.worst_error);
    exit_code = 0;
  });

  auto* allreduce = bench->add_subcommand(
      "allreduce", "nccl-tests style all-reduce table; run under `ddpx run N -- bench allreduce`");
  allreduce->option_defaults()->always_capture_default();
  auto a = std::make_shared<bench::AllreduceOptions>();
  add_choice(allreduce, "--op", a->op, bench::kBenchCollectiveNames,
             "allreduce | reduce_scatter | all_gather (into a tensor, as a sharded plan calls "
             "them; with shared memory, Gloo's own beside it in the same table)");
  allreduce->add_option("--min_bytes,-b", a->min_bytes, "smallest message in bytes");
  allreduce->add_option("--max_bytes,-e", a->max_bytes, "largest message in bytes");
  allreduce->add_option("--step_factor,-f", a->step_factor, "multiply the size by this each row");
  allreduce->add_option("--iterations,-n", a->iterations, "timed iterations (0: per size)");
  allreduce->add_option("--warmup,-w", a->warmup, "untimed iterations per size");
  add_choice(allreduce, "--dtype", a->dtype, bench::kReduceDtypeNames,
             "float32 | float64 | bfloat16");
  add_choice(allreduce, "--backend", a->backend, dist::kBackendNames, "auto | gloo | nccl");
  add_choice(allreduce, "--transport", a->transport, dist::kTransportNames, "auto | shm | gloo");
  add_choice(allreduce, "--device", a->device, dist::kDeviceNames,
             "auto (GPU buffers and NCCL when a GPU is visible) | cpu | cuda");
  add_choice(allreduce, "--buffer", a->buffer, bench::kReduceBufferNames,
             "ordinary | shared (where DDP puts gradient buckets: reduced in place)");
  allreduce->add_option("--timeout", a->timeout_s, "collective timeout in seconds");
  allreduce->callback([a, &exit_code] {
    bench::run_allreduce(*a);
    exit_code = 0;
  });

  auto* train = bench->add_subcommand(
      "train", "steady-state training images/s of ddpx train's loop; `ddpx run N -- bench train`");
  train->option_defaults()->always_capture_default();
  auto t = std::make_shared<bench::TrainBenchOptions>();
  add_choice(train, "--loop", t->loop, bench::kBenchLoopNames,
             "trainer (ddpx train's loop, synchronized at the window's ends, as the PyTorch "
             "peer) | phases (a step split into data, forward+backward, exposed communication, "
             "optimizer; syncs every phase)");
  train->add_option("--workers", t->workers, "loader threads per rank (--loop trainer)");
  // The model and data flags of `ddpx train`; the bench resizes to 32x32 unless told.
  auto md = std::make_shared<ModelDataOptions>();
  md->dataset = t->data;
  md->image_size = t->image_size;
  md->synthetic_image = t->image_size;
  md->synthetic_classes = t->num_classes;
  add_model_data_flags(train, *md);
  add_choice(train, "--data", md->dataset, data::kDatasetNames, "the same as --dataset")
      ->group("");  // the bench's older name, hidden
  train->add_option("--num_classes", md->synthetic_classes, "classes (synthetic data)");
  train->add_option("--batch_size", t->batch_size, "batch per rank");
  train->add_option("--steps", t->steps, "measured synchronised steps");
  train->add_option("--warmup", t->warmup, "untimed steps first");
  train->add_option(
      "--threads", t->threads,
      "intra-op threads (0: $DDPX_THREADS, $OMP_NUM_THREADS, or cores / local ranks)");
  add_switch(train, "augment", t->augment, "random crop (padding 4) and flip");
  auto* bucket =
      train->add_option("--bucket_mb", t->bucket_mb, "DDP bucket cap in MiB (--loop phases)");
  auto* first_bucket = train->add_option("--first_bucket_mb", t->first_bucket_mb,
                                         "DDP first bucket cap in MiB (--loop phases)");
  add_choice(train, "--comm_hook", t->comm_hook, dist::kCommHookNames,
             "allreduce | fp16 | bf16 | powersgd");
  train->add_option("--powersgd_rank", t->powersgd_rank, "with --comm_hook powersgd");
  train->add_option("--powersgd_start_iter", t->powersgd_start_iter,
                    "with --comm_hook powersgd: steps of plain all-reduce first");
  add_choice(train, "--transport", t->transport, dist::kTransportNames, "auto | shm | gloo");
  static constexpr NameTable<bool, 2> kStepNames{{{true, "fused"}, {false, "libtorch"}}};
  add_choice(train, "--optimizer_step", t->fused_step, kStepNames,
             "fused (as ddpx train: split or one pass) | libtorch (torch::optim::SGD::step; "
             "--loop phases)");
  add_choice(train, "--device", t->device, dist::kDeviceNames, "auto | cpu | cuda");
  add_choice(train, "--amp", t->amp, optim::kAmpNames,
             "off | bf16 | fp16 | auto (autocast, as ddpx train)");
  train->add_flag("--channels_last", t->channels_last, "NHWC weights and images");
  add_bias_flag(train, t->bias);
  // ddpx train's parallelism (--loop trainer)
  auto train_parallel = std::make_shared<ParallelOptions>();
  add_parallel_flags(train, *train_parallel, kAllParallelFlags);
  auto* train_deterministic = train->add_flag("--deterministic", t->deterministic,
                                              "--loop trainer: ddpx train's --deterministic");
  train->add_option("--deterministic_atom", t->deterministic_atom,
                    "with --deterministic: samples an atom");
  train->add_option("--json", t->json, "append the figures as a JSON line (rank 0)");
  train->callback([t, md, train_parallel, train, bucket, first_bucket, train_deterministic,
                   &exit_code] {
    t->model = md->model;
    t->stem = md->stem;
    t->data = md->dataset;
    t->data_dir = md->data_dir;
    t->image_size = md->input_size();
    t->seq_len = md->seq_len;
    t->vocab_size = md->vocab_size;
    t->num_classes = data::dataset_shape(md->dataset_spec()).num_classes;
    apply_parallel_options(*train_parallel, *t);
    // ddpx train's loop uses ddpx train's buckets: a cap given for it would be ignored.
    for (auto* option : {bucket, first_bucket}) {
      DDPX_CHECK(t->loop == bench::BenchLoop::kPhases || option->count() == 0, ErrorKind::kUsage,
                 "bench train: {} sets the buckets of the phases loop only; add --loop phases",
                 option->get_name());
    }
    // The phases loop times the data-parallel plan: a layout flag runs ddpx train's loop.
    std::vector<CLI::Option*> trainer_only{train_deterministic};
    for (CLI::Option* option : train->get_options()) {
      if (option->get_group() == kParallelGroup) trainer_only.push_back(option);
    }
    for (CLI::Option* option : trainer_only) {
      DDPX_CHECK(t->loop == bench::BenchLoop::kTrainer || option->count() == 0, ErrorKind::kUsage,
                 "bench train: {} runs ddpx train's loop; drop --loop phases", option->get_name());
    }
    bench::run_train_bench(*t);
    exit_code = 0;
  });

  auto* loader = bench->add_subcommand(
      "loader", "images/s of the image loader alone: decode, RandomResizedCrop, flip, normalise");
  loader->option_defaults()->always_capture_default();
  auto l = std::make_shared<bench::LoaderBenchOptions>();
  add_choice(loader, "--dataset", l->dataset, data::kDatasetNames,
             "imagefolder | imagenet (DIR/train) | shards (tar shards)");
  loader->add_option("--data_dir", l->data_dir, "the image folder, or the shards' folder");
  loader->add_option("--data_url", l->data_url,
                     "tar shards on an HTTP(S) server, in place of --data_dir (implies --dataset "
                     "shards): URLs as train's --data_url");
  loader->add_option("--workers", l->workers, "loader threads");
  loader->add_option("--batch_size", l->batch_size, "images a batch");
  loader->add_option("--image_size", l->image_size, "RandomResizedCrop's output side");
  loader->add_option("--batches", l->batches, "timed batches (0: the rest of one epoch)");
  loader->add_option("--warmup", l->warmup, "untimed batches first");
  loader->add_option("--seed", l->seed, "the shuffle's and the crops' seed");
  add_choice(loader, "--decode", l->decode, data::kImageDecodeNames,
             "fast: only the crop, at its DCT scale, resized on uint8; exact: the whole image, "
             "resized on float as torchvision's tensor transforms");
  loader->add_option("--threads", l->threads, "torch intra-op threads");
  loader->add_option("--json", l->json, "append one JSON line of the figures to this file");
  loader->callback([l, &exit_code] {
    bench::run_loader_bench(*l);
    exit_code = 0;
  });

  auto* memory = bench->add_subcommand(
      "memory", "peak resident memory of one training step at the model's default size");
  memory->option_defaults()->always_capture_default();
  auto m = std::make_shared<bench::MemoryBenchOptions>();
  memory->add_option("--model", m->model, "model name");
  memory->add_option("--image_size", m->image_size, "input height = width (0: the model's)");
  memory->add_option("--batch_size", m->batch_size, "images in the step");
  memory->add_option("--num_classes", m->num_classes, "classifier outputs");
  memory->add_option(
      "--threads", m->threads,
      "intra-op threads (0: $DDPX_THREADS, $OMP_NUM_THREADS, or cores / local ranks)");
  auto shard = std::make_shared<bench::ShardMemoryOptions>();
  memory->footer(
      "With --shard, --pipeline_parallel or --tensor_parallel (run under `ddpx run N`): the model "
      "states a rank holds under ddpx train's layout, beside ZeRO's formula (--shard) or "
      "(8+K)Psi_r (the rank's pipeline stages or tensor-parallel pieces; with --shard the "
      "replicas shard them, beside ZeRO's formula over Psi_r; both sizes: the 3-D mesh).");
  auto memory_parallel = std::make_shared<ParallelOptions>();
  add_parallel_flags(
      memory, *memory_parallel,
      kShardFlag | kMeshSizeFlags | kPipelineFlags | kSequenceParallelFlag | kCheckpointingFlag);
  add_token_flags(memory, shard->seq_len, shard->vocab_size);
  add_bias_flag(memory, m->bias);
  auto optimizer = std::make_shared<std::string>("sgd");
  memory->add_option("--optimizer", *optimizer, "with --shard: sgd (momentum) | adamw")
      ->check(CLI::IsMember({"sgd", "adamw"}));
  memory->add_flag("--json", shard->json, "with --shard: one JSON object per rank");
  add_choice(memory, "--transport", shard->transport, dist::kTransportNames,
             "with --shard: auto | shm | gloo (gloo: DDP's buckets are tensors, counted)");
  memory->callback([m, shard, memory_parallel, optimizer, memory, &exit_code] {
    apply_parallel_options(*memory_parallel, *shard);
    // --tensor_parallel and --pipeline_parallel take --shard (their replicas shard the pieces
    // or the stages), and each other (the 3-D mesh: a pipeline of tensor-parallel stages).
    DDPX_CHECK(shard->pipeline_parallel >= 1 && shard->tensor_parallel >= 1, ErrorKind::kUsage,
               "bench memory: --pipeline_parallel and --tensor_parallel must be at least 1");
    // A language model steps on token windows: the layouts' path, as DDP (--shard none) on its
    // own (the image step below feeds images).
    const bool language = models::is_language_model(models::find_model(m->model));
    if (!language && memory->count("--shard") == 0 && memory->count("--pipeline_parallel") == 0 &&
        memory->count("--tensor_parallel") == 0) {
      DDPX_CHECK(!shard->json && memory->count("--optimizer") == 0, ErrorKind::kUsage,
                 "bench memory: --json and --optimizer go with --shard (e.g. `ddpx run 2 -- bench "
                 "memory --shard full --json`)");
      bench::print_memory_bench(*m, bench::run_memory_bench(*m));
    } else {
      shard->model = m->model;
      shard->image_size = m->image_size;
      shard->batch_size = m->batch_size;
      shard->num_classes = m->num_classes;
      shard->threads = m->threads;
      shard->bias = m->bias;
      shard->adamw = *optimizer == "adamw";
      bench::run_shard_memory(*shard);
    }
    exit_code = 0;
  });
}

}  // namespace ddpx::cli
