#!/usr/bin/env bash
# bench/gpu_check.sh --dry-run from a fresh copy of the checkout (its tracked and unignored files,
# as a clone or the device tool has them: no build, no kit, no .git), on this machine without a
# GPU: it exits 0, plans every check docs/performance.md lists as pending, and writes the results'
# header with the date, the commit and the torch. A step it does not know is refused.
# Usage: tests/kit/gpu_check_dry_run_test.sh PYTHON   (a Python with torch)
set -euo pipefail
src="$(cd "$(dirname "$0")/../.." && pwd)"
python="${1:?usage: gpu_check_dry_run_test.sh PYTHON}"
copy=$(mktemp -d /tmp/ddpx-gpu-check.XXXXXX)
trap 'rm -rf "$copy"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

(cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$copy" 2>/dev/null) ||
  true
[[ -f "$copy/bench/gpu_check.sh" ]] || fail "the copy of the checkout has no bench/gpu_check.sh"

set +e
plan=$(cd "$copy" && DDPX_PYTHON="$python" DDPX_COMMIT=abc1234 bash bench/gpu_check.sh --dry-run 2>&1)
rc=$?
set -e
((rc == 0)) || fail "--dry-run exited $rc: $plan"

expect() {
  [[ "$plan" == *"$1"* ]] || fail "the plan lacks '$1':
$plan"
}
expect "-DDDPX_GPU_CHECK=ON"
expect "ninja -C build-gpu-check -j $(nproc) ddpx ddpx-torch test_gpu"
expect "ctest -L gpu -E 'BatchSizeFinder|OutOfMemory'"
expect "ctest -L gpu -R 'BatchSizeFinder|OutOfMemory' --output-on-failure --timeout 150"  # the memory fillers, alone
for dtype in fp32 tf32 bf16 fp16; do
  expect "bench gemm --device cuda --size 8192 --dtype $dtype"
done
expect "DDPX_FORCE_GROUP=1 build-gpu-check/src/ddpx run 1 -- bench allreduce --device cuda --backend nccl"  # a forced world of one on NCCL
expect "run 2 --gpus 0,0 -- bench allreduce --device cuda --backend gloo"
expect "src/ddpx bench train --device cuda --amp bf16"        # no DDP ...
expect "DDPX_FORCE_GROUP=1 build-gpu-check/src/ddpx bench train --device cuda"  # ... against DDP on a world of one
expect "plan --model resnet50 --image_size 224 --batch_size 128"  # the planner beside it
expect "train --device cuda --amp bf16 --channels_last --num_epochs 1"
expect "run 3 --gpus 0,0,0 -- train --device cuda --model vit_tiny_patch4_32"  # tensor parallel ...
expect "--tensor_parallel 3 --sequence_parallel"                               # ... and sequence parallel
expect "--comm_hook powersgd --powersgd_rank 2 --powersgd_start_iter 10"
expect "DEVICE=cuda"
expect "bench/compare_train.sh 50"
for recipe in fashion-mnist-best cifar10-resnet18 cifar100-resnet18; do
  expect "train --recipe $recipe --device cuda --num_epochs 1"
done
expect "no kit at gpu-kit"  # the preflight says what the build would need

results="$copy/gpu_check_results.md"
[[ -f "$results" ]] || fail "no gpu_check_results.md written"
grep -q "^## GPU results: $(date -u +%Y-%m-%d) on " "$results" || fail "no dated heading: $(cat "$results")"
grep -q "commit abc1234;" "$results" || fail "no commit in the results: $(cat "$results")"
grep -q "torch 2\.[0-9]" "$results" || fail "no torch version in the results: $(cat "$results")"
grep -q "^Dry run: the plan only" "$results" || fail "the dry run is not marked: $(cat "$results")"
[[ ! -d "$copy/build-gpu-check/src" ]] || fail "the dry run built something"

set +e
bad=$(cd "$copy" && bash bench/gpu_check.sh --dry-run --step benchmarks 2>&1)
rc=$?
set -e
((rc == 2)) || fail "an unknown step exited $rc, not 2"
[[ "$bad" == *"--step 'benchmarks' is not one of: build tests tests_alone bench pipeline parallel peer recipes"* ]] ||
  fail "an unknown step was not named: $bad"
echo "PASS: the dry run plans every pending GPU check"
