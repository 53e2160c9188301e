#!/usr/bin/env bash
# Every GPU check docs/performance.md lists as pending, in one command, on a machine with one or
# more NVIDIA GPUs, PyTorch (the torch ddpx builds against), CUDA, CMake, ninja and a C++
# compiler; no package registry needed: where the system lacks a library, the build takes it from
# the kit that scripts/gpu-kit made (gpu-kit/, brought along). Writes gpu_check_results.md
# (markdown for docs/performance.md, with device, driver, torch, date and commit) and prints it;
# each step's full output goes to build-gpu-check/logs/. Where $OUT names a folder (the device
# tool's), the results and a log of every step are copied there too.
#
# Usage: bench/gpu_check.sh [--dry-run] [--budget SECONDS] [--step STEP]...
#   (default: every step, in order; a step other than build builds first where nothing is built)
#   steps: build  configure -DDDPX_GPU_CHECK=ON and build ddpx, ddpx-torch and test_gpu
#          tests  ctest -L gpu (then tests_alone)
#          tests_alone  the gpu tests that fill the GPU's memory, one at a time
#          bench  GEMM per dtype, the all-reduce table, world size 1 against no DDP, `ddpx plan`'s
#                 prediction for it, a short run
#          peer   ddpx beside PyTorch eager (DEVICE=cuda bench/compare_train.sh)
#          recipes  the first epoch of each recipe whose data is here
#          pipeline  a pipeline's stages on CUDA tensors (GPipe, 1F1B, interleaved; with activation
#                 checkpointing), and activation checkpointing's step time and peak memory
#                 against none on ResNet-101 and ViT-B/16 (issue #25)
#          parallel  tensor parallelism (with and without sequence parallelism), PowerSGD and
#                 --deterministic on CUDA tensors, each beside the run it must match
#   Every command is time-boxed; --budget cuts each box to what is left of SECONDS since the
#   start (commands past it are skipped and say so), for a tool that limits a call's time. On one
#   H100 all the steps take about 20 minutes; docs/performance.md splits them into 10-minute calls.
#   --dry-run prints every command it would run, checks what the build needs, and writes the
#   results' header; it needs no GPU and builds nothing.
# Environment: DDPX_PYTHON (default python3: the Python with torch), DDPX_KIT (default gpu-kit),
#   GPU_CHECK_BUILD (default build-gpu-check), GPU_CHECK_RESULTS (default gpu_check_results.md),
#   GPU_CHECK_DATA (a folder with cifar10/ and
#   cifar100/ for their recipes), DDPX_COMMIT (the commit, where this copy has no .git).
set -uo pipefail
cd "$(dirname "$0")/.."

dry_run=0
budget=0
steps=()
all_steps=(build tests tests_alone bench pipeline parallel peer recipes)
while (($#)); do
  case "$1" in
    --dry-run) dry_run=1 ;;
    --step)
      [[ " ${all_steps[*]} " == *" ${2:-} "* ]] || {
        echo "gpu_check: --step '${2:-}' is not one of: ${all_steps[*]}" >&2
        exit 2
      }
      steps+=("$2")
      shift
      ;;
    --budget)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || {
        echo "gpu_check: --budget '${2:-}' is not a number of seconds" >&2
        exit 2
      }
      budget="$2"
      shift
      ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *)
      echo "gpu_check: unknown argument '$1' (--dry-run, --step STEP, --budget S, --help)" >&2
      exit 2
      ;;
  esac
  shift
done
((${#steps[@]})) || steps=("${all_steps[@]}")
# A step that runs the build's programs builds them first where they are missing (a fresh
# machine: the device tool's machine is given back 30 s after a call, its build with it).
if [[ " ${steps[*]} " != *" build "* ]] && ((!dry_run)) &&
  [[ ! -x "${GPU_CHECK_BUILD:-build-gpu-check}/tests/test_gpu" ]]; then
  steps=(build "${steps[@]}")
fi

python="${DDPX_PYTHON:-python3}"
kit="${DDPX_KIT:-gpu-kit}"
build="${GPU_CHECK_BUILD:-build-gpu-check}"
ddpx="$build/src/ddpx"
results="${GPU_CHECK_RESULTS:-gpu_check_results.md}"
parts="$build/results"  # one markdown file per step, so that a step run again replaces its part
logs="$build/logs"
jobs=$(nproc)
fashion=/usr/share/datasets/fashion-mnist  # where ddpx and the gpu tests look for it first

gpus=0
command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')

# run_timed NAME SECONDS COMMAND...: runs COMMAND (through bash) with a time limit, cut to what
# is left of --budget, its output into the log and the step's part; a failure or timeout is
# recorded, not fatal.
run_timed() {
  local name="$1" limit="$2"
  shift 2
  echo "\$ $*" | tee -a "$logs/$step.log"
  if ((dry_run)); then
    echo "  (time box ${limit}s)"
    return 0
  fi
  if ((budget)); then
    local left=$((budget - SECONDS))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
      printf '\n`%s`: skipped, --budget %s was spent\n' "$*" "$budget" | tee -a "$parts/$step.md"
      return 124
    fi
  fi
  local start=$SECONDS rc
  timeout --kill-after=10 "$limit" bash -c "$*" >"$logs/$step.$name.out" 2>&1
  rc=$?
  cat "$logs/$step.$name.out" >>"$logs/$step.log"
  local took=$((SECONDS - start)) verdict="ok"
  ((rc == 124 || rc == 137)) && verdict="TIMED OUT after ${limit}s"
  ((rc != 0 && rc != 124 && rc != 137)) && verdict="FAILED (exit $rc)"
  {
    echo
    echo "\`$*\` (${took}s, $verdict):"
    echo
    echo '```'
    tail -n "${TAIL_LINES:-40}" "$logs/$step.$name.out"
    echo '```'
  } >>"$parts/$step.md"
  echo "  -> $verdict in ${took}s"
  return $rc
}

commit() {
  if git rev-parse --short HEAD >/dev/null 2>&1; then
    local c
    c=$(git rev-parse --short HEAD)
    git diff --quiet HEAD 2>/dev/null || c="$c with uncommitted changes"
    echo "$c"
  elif [[ -n "${DDPX_COMMIT:-}" ]]; then
    echo "$DDPX_COMMIT"
  elif [[ -f "$kit/COMMIT" ]]; then
    echo "$(cat "$kit/COMMIT") (the kit's; this copy has no .git)"
  else
    echo "unknown (no .git; set DDPX_COMMIT)"
  fi
}

header() {
  local device="none visible (nvidia-smi: ${gpus} GPUs)" torch
  if ((gpus > 0)); then
    device="${gpus}x $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader |
      head -1 | awk -F', ' '{print $1 ", " $2 ", driver " $3}')"
  fi
  torch=$("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>&1 |
    tail -1)
  cat <<EOF
## GPU results: $(date -u +%Y-%m-%d) on ${device}

\`bench/gpu_check.sh\`, $(date -u +%H:%MZ), commit $(commit); torch ${torch} (${python});
$(nproc) CPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)).
EOF
  ((dry_run)) && printf '\nDry run: the plan only, nothing built or measured.\n'
}

# The kit's prebuilt binaries (scripts/gpu-kit --prebuilt) in place of a build, where this
# Python's torch is the version they were built against: the binaries, their rpath and the tests
# name the kit machine's checkout, torch and Python by absolute path, so each such path that is
# missing here is made to point at this machine's (as root; a path that exists is left alone).
# Returns 1, saying why, where it cannot; the caller builds then.
install_prebuilt() {
  local pre="$kit/prebuilt" want have torch_dir
  [[ -x "$pre/$build/tests/test_gpu" && -f "$pre/TORCH" ]] || return 1
  want=$(cat "$pre/TORCH")
  have=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
  if [[ "$want" != "$have" ]]; then
    echo "gpu_check: the kit's prebuilt binaries are for torch $want," \
      "$python has ${have:-none}; building" >&2
    return 1
  fi
  local root
  root=$(cat "$pre/ROOT")
  if [[ "$(realpath .)" != "$(realpath -m "$root")" ]]; then
    if [[ -e "$root" ]] || ! { mkdir -p "$(dirname "$root")" && ln -s "$PWD" "$root"; }; then
      echo "gpu_check: the prebuilt binaries name $root, which is not this checkout; building" >&2
      return 1
    fi
  fi
  torch_dir=$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
  local kit_torch kit_python
  kit_torch=$(cat "$pre/TORCH_DIR")
  kit_python=$(cat "$pre/PYTHON")
  [[ -e "$kit_torch" ]] ||
    { mkdir -p "$(dirname "$kit_torch")" && ln -s "$torch_dir" "$kit_torch"; }
  # A wrapper, not a link: a venv's python finds its packages by the path it was started as.
  if [[ ! -e "$kit_python" ]]; then
    mkdir -p "$(dirname "$kit_python")"
    printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v "$python")" >"$kit_python"
    chmod +x "$kit_python"
  fi
  cp -a "$pre/$build/." "$build/"  # beside this run's results/ and logs/
  export LD_LIBRARY_PATH="$torch_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! "$build/src/ddpx-torch" --version >/dev/null; then
    echo "gpu_check: the prebuilt ddpx-torch does not run here; building" >&2
    rm -f "$build/src/ddpx" "$build/src/ddpx-torch" "$build/tests/test_gpu"
    return 1
  fi
  printf '\nThe kit'"'"'s prebuilt binaries (torch %s), not built here.\n' "$want" |
    tee -a "$parts/build.md"
}

step_build() {
  if ((!dry_run)); then
    # The gpu tests and the short run read Fashion-MNIST from Debian's folder; on a machine
    # without the package, the kit's copy goes there (as root) or is named with --data_dir.
    if [[ ! -e "$fashion/train-images-idx3-ubyte.gz" && -d "$kit/data/fashion-mnist" ]]; then
      mkdir -p "$fashion" 2>/dev/null && cp "$kit/data/fashion-mnist"/* "$fashion/" ||
        echo "gpu_check: cannot write $fashion; the gpu tests that train will fail" >&2
    fi
  fi
  if ((!dry_run)) && install_prebuilt; then
    return 0
  fi
  run_timed configure 120 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DDDPX_GPU_CHECK=ON -DDDPX_KIT="$(realpath -m "$kit")" -DDDPX_PYTHON="$(command -v "$python")" \
    -DDDPX_BUILD_TESTS=ON -DDDPX_BUILD_EXAMPLES=OFF || return 1
  run_timed ninja 450 ninja -C "$build" -j "$jobs" ddpx ddpx-torch test_gpu
}

alone_tests='BatchSizeFinder|OutOfMemory'
step_tests() {
  # A few at a time on one GPU (they ran so on an H200, 2026-11-27), each boxed: one test that
  # hangs costs its box, not the call. The tests that fill the GPU's memory run after, alone:
  # beside them another test's ddpx finds the GPU taken and refuses it, and a batch-size trial
  # runs out of memory early (both seen on the H200, 2026-11-27 19:11Z).
  TAIL_LINES=60 run_timed ctest 420 "cd $build && ctest -L gpu -E '$alone_tests' \
--output-on-failure --timeout 150 -j ${GPU_CHECK_TEST_JOBS:-3}"
  step_tests_alone
}

step_tests_alone() {
  TAIL_LINES=30 run_timed ctest_alone 240 "cd $build && ctest -L gpu -R '$alone_tests' \
--output-on-failure --timeout 150"
}

step_bench() {
  local gpu_flags="--device cuda --amp bf16 --channels_last"
  local bench_train="bench train $gpu_flags --model resnet50 --image_size 224 --batch_size 128 \
--num_classes 100 --steps 50 --warmup 10 --no_augment --workers 8"
  for dtype in fp32 tf32 bf16 fp16; do
    run_timed "gemm_$dtype" 60 "$ddpx" bench gemm --device cuda --size 8192 --dtype "$dtype"
  done
  local sizes="-b 1024 -e 268435456"
  if ((gpus > 1)); then
    run_timed allreduce_nccl 120 "$ddpx" run "$gpus" -- bench allreduce --device cuda \
      --backend nccl $sizes
  else
    # One GPU: a world of one on NCCL, and two ranks sharing the GPU through Gloo (slower: up to
    # 64 MiB).
    run_timed allreduce_nccl1 120 env DDPX_FORCE_GROUP=1 "$ddpx" run 1 -- bench allreduce \
      --device cuda --backend nccl $sizes
    run_timed allreduce_gloo2 180 "$ddpx" run 2 --gpus 0,0 -- bench allreduce --device cuda \
      --backend gloo -b 1024 -e 67108864
  fi
  # World size 1 against no DDP: the same workload twice each, interleaved. `ddpx run 1` forms no
  # process group (the same loop as no DDP), so the world of one is forced: DDP's buckets, hooks
  # and all-reduces on a NCCL group of one rank.
  for round in 1 2; do
    run_timed "no_ddp_$round" 120 "$ddpx" $bench_train
    run_timed "world1_$round" 120 env DDPX_FORCE_GROUP=1 "$ddpx" $bench_train
  done
  # `ddpx plan`'s prediction for the no-DDP run above (one GPU, bf16, batch 128; probed on this
  # host's CPU), to set beside that run's peak GPU memory.
  run_timed plan_resnet50 300 "$ddpx" plan --model resnet50 --image_size 224 --batch_size 128 \
    --num_classes 100 --gpus 1 --amp bf16 --threads 8
  run_timed train 300 "$ddpx" train $gpu_flags --num_epochs 1 --no_progress
  # Sharding on NCCL: ZeRO-3 of ResNet-50 (its all-gathers and reduce-scatters on the GPU), on
  # every GPU, or as a forced group of one on a single GPU.
  if ((gpus > 1)); then
    run_timed shard_full 180 "$ddpx" run "$gpus" -- $bench_train --shard full
  else
    run_timed shard_full 180 env DDPX_FORCE_GROUP=1 "$ddpx" $bench_train --shard full
  fi
}

step_pipeline() {
  # Two stages on CUDA tensors: one GPU each, the activations and gradients by NCCL send/recv on
  # the pipeline's links (the start-up line says `stage boundaries by NCCL send/recv, on the
  # GPU`), or both on one GPU (Gloo between them, through host memory: NCCL refuses two ranks
  # on one GPU).
  local pp="$ddpx run 2 --"
  ((gpus > 1)) || pp="$ddpx run 2 --gpus 0,0 --"
  local short="--model resnet18 --num_epochs 1 --batch_size 128 --limit_train_batches 60 \
--limit_test_batches 10 --no_progress --pipeline_parallel 2 --microbatches 4"
  local s
  for s in gpipe 1f1b interleaved; do
    run_timed "pipeline_$s" 120 $pp train --device cuda $short --pipeline_schedule "$s"
  done
  run_timed pipeline_checkpointed 120 $pp train --device cuda $short --activation_checkpointing \
    blocks
  # Activation checkpointing against none on one GPU: step time and peak GPU memory.
  local m p
  for m in resnet101 vit_b_16; do
    for p in none blocks blocks:8; do
      run_timed "checkpointing_${m}_${p/:/_}" 120 "$ddpx" bench train --device cuda --amp bf16 \
        --channels_last --model "$m" --image_size 224 --batch_size 128 --num_classes 100 \
        --steps 20 --warmup 5 --no_augment --activation_checkpointing "$p"
    done
  done
}

step_parallel() {
  # Tensor parallelism over 3 ranks sharing the GPU (Gloo between them: NCCL refuses two ranks
  # on one GPU), with and without sequence parallelism and recomputed blocks, beside one process: the same losses and
  # accuracies to print precision. PowerSGD (rank 2, compressing from step 10) beside plain
  # averaging, 2 ranks.
  local vit="train --device cuda --model vit_tiny_patch4_32 --optimizer sgd --num_epochs 1 \
--limit_train_batches 20 --limit_test_batches 2 --batch_size 32 --eval_batch_size 64 --no_progress"
  local three="$ddpx run 3 --gpus 0,0,0 --" two="$ddpx run 2 --gpus 0,0 --"
  ((gpus > 2)) && three="$ddpx run 3 --"
  ((gpus > 1)) && two="$ddpx run 2 --"
  TAIL_LINES=6 run_timed vit_one 120 "$ddpx" $vit
  TAIL_LINES=6 run_timed tensor_parallel_3 150 $three $vit --tensor_parallel 3
  TAIL_LINES=6 run_timed sequence_parallel_3 150 $three $vit --tensor_parallel 3 \
    --sequence_parallel
  # The split blocks recomputed in backward on CUDA tensors: the same figures again.
  TAIL_LINES=6 run_timed tensor_checkpointed_3 150 $three $vit --tensor_parallel 3 \
    --activation_checkpointing blocks
  # The 3-D mesh: 2 pipeline stages of 3 tensor ranks on CUDA tensors, the same figures again.
  local six="$ddpx run 6 --gpus 0,0,0,0,0,0 --"
  ((gpus > 5)) && six="$ddpx run 6 --"
  TAIL_LINES=6 run_timed mesh_3d_6 150 $six $vit --tensor_parallel 3 --pipeline_parallel 2
  # ... sequence parallel across the stage boundary: the same figures again.
  TAIL_LINES=6 run_timed mesh_3d_sp_6 150 $six $vit --tensor_parallel 3 --pipeline_parallel 2 \
    --sequence_parallel
  # 2 stages whose 2 replicas shard them (--shard full) on the global batch of 32: the figures
  # of 2 DDP ranks on that batch (each replica's own augmentation draws, as DDP's ranks').
  local four="$ddpx run 4 --gpus 0,0,0,0 --"
  ((gpus > 3)) && four="$ddpx run 4 --"
  TAIL_LINES=6 run_timed vit_ddp_2 150 $two $vit --batch_size_scaled
  TAIL_LINES=6 run_timed pipeline_shard_4 150 $four $vit --pipeline_parallel 2 --shard full \
    --batch_size_scaled
  local r18="train --device cuda --model resnet18 --num_epochs 1 --batch_size 128 \
--limit_train_batches 40 --limit_test_batches 5 --no_progress"
  TAIL_LINES=6 run_timed ddp_2 150 $two $r18
  TAIL_LINES=6 run_timed powersgd_2 150 $two $r18 --comm_hook powersgd --powersgd_rank 2 \
    --powersgd_start_iter 10
  # --deterministic on CUDA: one process and two ranks, one global batch of 32, the exported
  # weights compared bit for bit (PyTorch's deterministic algorithms on: an operation without a
  # deterministic kernel fails by name).
  local det="train --device cuda --model resnet18 --num_epochs 1 --limit_train_batches 5 \
--limit_test_batches 1 --batch_size 32 --batch_size_scaled --deterministic --no_progress"
  local w
  rm -rf "$build/deterministic"
  TAIL_LINES=6 run_timed deterministic_1 120 "$ddpx" $det --save_dir "$build/deterministic/w1"
  TAIL_LINES=6 run_timed deterministic_2 150 $two $det --save_dir "$build/deterministic/w2"
  for w in 1 2; do
    run_timed "deterministic_export_$w" 60 "$ddpx" export --checkpoint \
      "$build/deterministic/w$w/checkpoint_epoch0001.ddpx" --out "$build/deterministic/w$w.pt"
  done
  run_timed deterministic_compare 60 "$python" -c "'import torch; \
a = torch.load(\"$build/deterministic/w1.pt\"); b = torch.load(\"$build/deterministic/w2.pt\"); \
d = [k for k in a if not torch.equal(a[k], b[k])]; print(\"tensors\", len(a), \"differ\", len(d), d[:3])'"
}

step_peer() {
  TAIL_LINES=10 run_timed compare 560 \
    "DEVICE=cuda DDPX_PYTHON=$python DDPX_BIN=$ddpx bench/compare_train.sh 50"
}

step_recipes() {
  # The first epoch of each recipe, on one process (one GPU); CIFAR needs its data brought along
  # (170 MB: more than a device call carries) in $GPU_CHECK_DATA.
  run_timed fashion_mnist_best 300 "$ddpx" train --recipe fashion-mnist-best --device cuda \
    --num_epochs 1 --no_progress
  local data="${GPU_CHECK_DATA:-}" r
  for r in cifar10 cifar100; do
    if [[ -n "$data" && -d "$data/$r" ]] || ((dry_run)); then
      run_timed "${r}_resnet18" 300 "$ddpx" train --recipe "$r-resnet18" --device cuda \
        --num_epochs 1 --no_progress --data_dir "${data:-\$GPU_CHECK_DATA}/$r"
    else
      printf '\n%s-resnet18: skipped, no %s/ under GPU_CHECK_DATA=%s\n' "$r" "$r" "$data" |
        tee -a "$parts/$step.md"
    fi
  done
}

# What the build needs, said before anything starts.
preflight() {
  local ok=1
  for tool in cmake ninja "$python"; do
    command -v "$tool" >/dev/null || { echo "gpu_check: $tool is not on PATH" >&2; ok=0; }
  done
  command -v c++ >/dev/null || command -v g++ >/dev/null ||
    { echo "gpu_check: no C++ compiler (c++, g++) on PATH" >&2; ok=0; }
  "$python" -c 'import torch' 2>/dev/null ||
    { echo "gpu_check: $python cannot import torch; set DDPX_PYTHON" >&2; ok=0; }
  if [[ ! -d "$kit" ]]; then
    echo "gpu_check: no kit at $kit (scripts/gpu-kit makes it); the build needs the system's" \
      "CLI11, nlohmann-json, Gloo headers, zlib and GoogleTest then" >&2
  fi
  ((gpus > 0)) || echo "gpu_check: no GPU visible (nvidia-smi); the gpu tests skip and the" \
    "benchmarks fail" >&2
  ((ok))
}

mkdir -p "$parts" "$logs"
preflight || ((dry_run)) || exit 1
header >"$parts/0_header.md"
for step in "${steps[@]}"; do
  echo "== gpu_check: $step =="
  : >"$logs/$step.log"
  {
    echo
    echo "### $step"
  } >"$parts/$step.md"
  "step_$step"
  rc=$?
  if [[ "$step" == build ]] && ((rc != 0)) && ((!dry_run)); then
    echo "gpu_check: the build failed; see $logs/build.log" >&2
    break
  fi
done

# The results: the header, then each step's part in the steps' order (a step's last run).
{
  cat "$parts/0_header.md"
  for s in "${all_steps[@]}"; do
    [[ -f "$parts/$s.md" ]] && cat "$parts/$s.md"
  done
} >"$results"
echo
cat "$results"
if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then
  cp "$results" "$OUT/"
  cat "$logs"/*.log >"$OUT/gpu_check_logs.txt" 2>/dev/null
fi
